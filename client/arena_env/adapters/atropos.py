"""An environment in the shape of Atropos' ``BaseEnv`` loop, scored by the arena's visitors.

Atropos asks an environment for ``await get_next_item()`` and then ``await
collect_trajectories(item)``, which answers ``(scored_group, backlog)``: a group of rollouts of
one item with one score each (its ``ScoredDataGroup``) and items to try again later. Here the
rollouts come from the trainer's own ``generate`` callable and their scores from the arena: the
group is submitted, the visitors' votes are waited for, and the members judged in time are
returned with their scores.

What Atropos 0.4 accepts, and so what this module builds (``atroposlib/envs/base.py``,
``BaseEnv.handle_send_to_api``; ``atroposlib/api/server.py``):

- ``len(tokens)`` equals ``group_overrides["group_size"]`` when that is set, else the env's
  configured ``group_size``; any other group is skipped ("token count mismatch"). A partial
  group (some members judged in time) therefore carries its own size there.
- ``tokens`` are the prompt and completion ids of each member, ``masks`` the same ids with
  ``-100`` at the prompt's positions (what the trainer does not learn); the trainer trains on
  them, so a ``tokenize`` callable (or a ``tokenizer``) is required.
- A group whose scores are all equal is skipped by default (``ensure_scores_are_not_same``), and
  an environment returns ``None`` for a group it should not train on: here, fewer than
  ``min_scored`` members judged.
- The API server queues a group of its environment's registered size as is, buffers one of
  another size until buffered groups add up to that size, and a trainer's ``/batch`` packs
  whole groups into exactly ``batch_size`` sequences, groups of one size at a time. With
  ``partial="pad"`` a partial group keeps the full size instead: the unjudged members come with
  every position masked (nothing to learn from them) and the judged members' mean score (no
  advantage), so fixed-size batching goes on.

Atropos is not imported here, except by ``atropos_env_class()`` when it is called.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypedDict

from arena_env.adapters.trl import Value, reward_value, submit_group, wait_for_group
from arena_env.client import ArenaEnv, Reward, completion_text, prompt_messages

__all__ = ["HumanFeedbackEnv", "ScoredGroup", "atropos_env_class", "chat_tokenize"]

Generate = Callable[[Any, int], Sequence[Any] | Awaitable[Sequence[Any]]]
Tokenize = Callable[[Any, str], tuple[list[int], list[int]]]
Partial = Literal["shrink", "pad"]
MASKED = -100  # the label Atropos' trainers (and PyTorch's cross entropy) ignore


class ScoredGroup(TypedDict):
    """Atropos' ScoredDataGroup fields; ``overrides`` carries each member's record and
    ``group_overrides`` the group's size, its run and every generated member's score."""

    tokens: list[list[int]]
    masks: list[list[int]]
    scores: list[float]
    advantages: list[list[float]] | None
    ref_logprobs: list[list[float]] | None
    messages: list[list[dict[str, str]]] | None
    group_overrides: dict[str, Any]
    overrides: list[dict[str, Any]] | None


def _ids(encoded: Any) -> list[int]:
    # transformers 5 answers apply_chat_template with a BatchEncoding unless told otherwise.
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    return [int(t) for t in encoded]


def chat_tokenize(tokenizer: Any, *, eos: bool = True) -> Tokenize:
    """A ``tokenize`` from a Hugging Face tokenizer with a chat template: the prompt's ids with
    the generation prompt (masked), then the completion's ids and, with ``eos``, the end token.

    The prompt and the completion are encoded apart, as the policy saw and wrote them, so the
    mask's boundary is exact whatever the tokenizer merges across it.
    """
    end = getattr(tokenizer, "eos_token_id", None) if eos else None

    def tokenize(messages: Any, text: str) -> tuple[list[int], list[int]]:
        history = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        prompt = _ids(
            tokenizer.apply_chat_template(
                history, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        completion = _ids(tokenizer.encode(text, add_special_tokens=False))
        if end is not None and (not completion or completion[-1] != end):
            completion.append(int(end))
        return prompt + completion, [MASKED] * len(prompt) + completion

    return tokenize


class HumanFeedbackEnv:
    """``get_next_item`` / ``collect_trajectories`` over a list (or iterator) of items.

    ``items`` yields prompts (a string or role/content messages) or mappings with a
    ``"prompt"`` key. ``generate(prompt, n)`` (sync or async) returns ``n`` completions.
    ``tokenize(prompt_messages, completion_text) -> (tokens, masks)`` gives each member's ids
    (``masks``: ``-100`` where the trainer does not learn, the id elsewhere); pass a chat
    ``tokenizer`` instead for ``chat_tokenize(tokenizer)``. ``timeout`` bounds the wait for
    votes of one group; fewer than ``min_scored`` members judged in time gives no group
    (``None``). A partial group holds its judged members only and says its size in
    ``group_overrides["group_size"]`` (``partial="shrink"``), or keeps every member with the
    unjudged ones masked out (``partial="pad"``). A blank completion is not submitted (the arena
    refuses it) and counts as unjudged.
    """

    def __init__(
        self,
        env: ArenaEnv,
        run_id: str,
        items: Iterable[Any],
        generate: Generate,
        *,
        group_size: int = 4,
        timeout: float,
        poll: float = 2.0,
        min_scored: int = 2,
        value: Value = "score",
        tokenize: Tokenize | None = None,
        tokenizer: Any = None,
        partial: Partial = "shrink",
    ) -> None:
        if not 1 <= group_size <= 16:
            raise ValueError("group_size is between 1 and 16 (the API's group bound)")
        if not 1 <= min_scored <= group_size:
            raise ValueError(f"min_scored is between 1 and group_size ({group_size})")
        if partial not in ("shrink", "pad"):
            raise ValueError(f"partial is 'shrink' or 'pad', not {partial!r}")
        if tokenize is None and tokenizer is None:
            raise TypeError(
                "HumanFeedbackEnv needs tokenize=(prompt messages, completion text) -> "
                "(tokens, masks), or tokenizer= a chat tokenizer: Atropos trains on token ids"
            )
        if tokenize is not None and tokenizer is not None:
            raise TypeError("pass tokenize= or tokenizer=, not both")
        self.env = env
        self.run_id = run_id
        self.group_size = group_size
        self.timeout = timeout
        self.poll = poll
        self.min_scored = min_scored
        self.value: Value = value
        self.partial: Partial = partial
        self._items: Iterator[Any] = iter(items)
        self._generate = generate
        self._tokenize: Tokenize = tokenize if tokenize is not None else chat_tokenize(tokenizer)

    async def get_next_item(self) -> Any | None:
        """The next item, or ``None`` when the list is used up."""
        return next(self._items, None)

    async def collect_trajectories(self, item: Any) -> tuple[ScoredGroup | None, list[Any]]:
        prompt = item["prompt"] if isinstance(item, dict) else item
        generated = self._generate(prompt, self.group_size)
        completions = list(await generated if inspect.isawaitable(generated) else generated)
        if len(completions) != self.group_size:
            raise ValueError(f"generate gave {len(completions)} completions, not {self.group_size}")
        texts = [completion_text(c) for c in completions]
        messages = prompt_messages(prompt)
        ids = await asyncio.to_thread(submit_group, self.env, self.run_id, messages, texts)
        records = await asyncio.to_thread(
            wait_for_group, self.env, self.run_id, ids, timeout=self.timeout, poll=self.poll
        )
        return self._scored_group(messages, texts, ids, records), []

    def _member(self, messages: Any, text: str) -> tuple[list[int], list[int]]:
        tokens, masks = self._tokenize(messages, text)
        tokens, masks = [int(t) for t in tokens], [int(m) for m in masks]
        if not tokens or len(masks) != len(tokens):
            raise ValueError(
                f"tokenize gave {len(tokens)} tokens and {len(masks)} masks: "
                "a trainer needs one mask per token, and some tokens"
            )
        return tokens, masks

    def _scored_group(
        self,
        messages: Any,
        texts: list[str],
        completion_ids: Sequence[str | None],
        records: dict[str, Reward],
    ) -> ScoredGroup | None:
        history = (
            [{"role": "user", "content": messages}]
            if isinstance(messages, str)
            else [dict(m) for m in messages]
        )
        scores: list[float | None] = []
        for cid in completion_ids:
            record = records.get(cid) if cid is not None else None
            scores.append(reward_value(record, value=self.value))
        judged = [s for s in scores if s is not None]
        if len(judged) < self.min_scored:
            return None
        fill = sum(judged) / len(judged)
        group: ScoredGroup = {
            "tokens": [],
            "masks": [],
            "scores": [],
            "advantages": None,
            "ref_logprobs": None,
            "messages": [],
            "group_overrides": {"run_id": self.run_id, "arena_scores": scores},
            "overrides": [],
        }
        for index, (text, cid, score) in enumerate(zip(texts, completion_ids, scores, strict=True)):
            if score is None and self.partial == "shrink":
                continue
            tokens, masks = self._member(messages, text)
            if score is None:
                masks = [MASKED] * len(tokens)
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["scores"].append(fill if score is None else score)
            assert group["messages"] is not None and group["overrides"] is not None
            group["messages"].append([*history, {"role": "assistant", "content": text}])
            record = records.get(cid) if cid is not None else None
            group["overrides"].append(
                {
                    "index": index,
                    "judged": score is not None,
                    "completion_id": cid,
                    "votes": record.votes if record else 0,
                    "score_low": record.score_low if record else None,
                    "score_high": record.score_high if record else None,
                    "win_rate": record.win_rate if record else None,
                }
            )
        # Atropos compares len(tokens) with this, and with its config's group_size without it.
        group["group_overrides"]["group_size"] = len(group["tokens"])
        return group


def atropos_env_class() -> type:
    """A subclass of Atropos' ``BaseEnv`` whose items and groups are a ``HumanFeedbackEnv``'s.

    ``cls(feedback, config, server_configs, testing=...)`` with ``config`` a ``BaseEnvConfig``
    whose ``group_size`` is the feedback env's (``tokenizer_name`` must load offline where
    nothing may be downloaded). Atropos' own loop then runs it: ``handle_env`` and
    ``handle_send_to_api`` check the groups and post them to its API server. Imports
    ``atroposlib`` when called.
    """
    from atroposlib.envs.base import BaseEnv

    class ArenaFeedbackEnv(BaseEnv):  # type: ignore[misc]
        name = "arena_human_feedback"

        def __init__(
            self,
            feedback: HumanFeedbackEnv,
            config: Any,
            server_configs: Any,
            slurm: bool = False,
            testing: bool = False,
        ) -> None:
            if config.group_size != feedback.group_size:
                raise ValueError(
                    f"config.group_size ({config.group_size}) is not the feedback env's "
                    f"({feedback.group_size})"
                )
            super().__init__(config, server_configs, slurm=slurm, testing=testing)
            self.feedback = feedback

        async def setup(self) -> None:
            return None

        async def get_next_item(self) -> Any:
            return await self.feedback.get_next_item()

        async def collect_trajectories(self, item: Any) -> tuple[ScoredGroup | None, list[Any]]:
            return await self.feedback.collect_trajectories(item)

        async def evaluate(self, *args: Any, **kwargs: Any) -> None:
            return None

    return ArenaFeedbackEnv
