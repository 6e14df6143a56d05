"""A verifiers 0.4 taskset and harness for the trainers' tests, importable by id
(``--env.taskset.id vf_arena_tasks``): a few chat prompts, and a harness that asks the
model once, in-process, through the rollout's interception endpoint (no ``uv``, no
download, no subprocess).

The module exports its ``Taskset`` and ``Harness`` subclasses through ``__all__``, which is
how verifiers 0.4 resolves plugins by id; the taskset's harness is then the default harness
of every agent playing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx
import verifiers.v1 as vf

__all__ = ["ArenaChatHarness", "ArenaTaskset"]

PROMPTS = (
    "Why is the sea salty?",
    "Write a short poem about the morning light over the hills.",
    "Explain why the sky is blue in two sentences.",
    "What makes a good answer?",
)
SYSTEM = "Answer briefly."


class ArenaTaskset(vf.Taskset[vf.Task]):
    """One task per prompt, each a list of message objects (verifiers' ``UserMessage``);
    every other one carries its text as a content part, as multimodal tasks do."""

    def load(self) -> Iterable[vf.Task]:
        for i, text in enumerate(PROMPTS):
            content: Any = text if i % 2 == 0 else [vf.TextContentPart(text=text)]
            yield vf.Task(
                vf.TaskData(prompt=[vf.UserMessage(content=content)], system_prompt=SYSTEM),
                self.config.task,
            )


class ArenaChatHarness(vf.Harness[vf.HarnessConfig]):
    """One chat completion on the task's prompt, in this process: the harness contract
    allows an in-process loop as long as every model call goes through ``endpoint``."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        **kwargs: Any,
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(m.model_dump(exclude_none=True) for m in prompt or [])
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.post(
                f"{endpoint.rstrip('/')}/chat/completions",
                headers={"Authorization": f"Bearer {secret}"},
                json={"model": ctx.model, "messages": messages},
            )
        if answer.status_code != 200:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=answer.text)
        return vf.ProgramResult(exit_code=0, stdout=answer.text, stderr="")
