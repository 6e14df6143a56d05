"""An environment in the shape of Atropos' ``BaseEnv`` loop, scored by the arena's visitors.

Atropos asks an environment for ``await get_next_item()`` and then ``await
collect_trajectories(item)``, which answers ``(scored_group, backlog)``: a group of rollouts of
one item with one score each (its ``ScoredDataGroup``: ``tokens``, ``masks``, ``scores`` and
optional ``messages``, ``advantages``, ``ref_logprobs``, ``overrides``...) and items to try
again later. Here the rollouts come from the trainer's own ``generate`` callable and their
scores from the arena: the group is submitted, the visitors' votes are waited for, and the
members judged in time are returned with their scores. Tokens and masks are the trainer's
business: a ``tokenize`` callable fills them, else they are empty. Atropos is not imported: in
an Atropos ``BaseEnv`` subclass, delegate its two methods to a ``HumanFeedbackEnv`` (its
``generate`` calling the env's server).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, TypedDict

from arena_env.adapters.trl import Value, reward_value
from arena_env.client import ArenaEnv, Reward, completion_text, prompt_messages

__all__ = ["HumanFeedbackEnv", "ScoredGroup"]

Generate = Callable[[Any, int], Sequence[Any] | Awaitable[Sequence[Any]]]
Tokenize = Callable[[Any, str], tuple[list[int], list[int]]]


class ScoredGroup(TypedDict):
    """Atropos' ScoredDataGroup fields, plus ``overrides`` carrying each member's record."""

    tokens: list[list[int]]
    masks: list[list[int]]
    scores: list[float]
    advantages: list[list[float]] | None
    ref_logprobs: list[list[float]] | None
    messages: list[list[dict[str, str]]] | None
    group_overrides: dict[str, Any] | None
    overrides: list[dict[str, Any]] | None


class HumanFeedbackEnv:
    """``get_next_item`` / ``collect_trajectories`` over a list (or iterator) of items.

    ``items`` yields prompts (a string or role/content messages) or mappings with a
    ``"prompt"`` key. ``generate(prompt, n)`` (sync or async) returns ``n`` completions.
    ``timeout`` bounds the wait for votes of one group; fewer than ``min_scored`` members judged
    in time gives no group (``None``), as Atropos expects of a group it should not train on.
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
    ) -> None:
        if not 1 <= group_size <= 16:
            raise ValueError("group_size is between 1 and 16 (the API's group bound)")
        self.env = env
        self.run_id = run_id
        self.group_size = group_size
        self.timeout = timeout
        self.poll = poll
        self.min_scored = min_scored
        self.value: Value = value
        self._items: Iterator[Any] = iter(items)
        self._generate = generate
        self._tokenize = tokenize

    async def get_next_item(self) -> Any | None:
        """The next item, or ``None`` when the list is used up."""
        return next(self._items, None)

    async def collect_trajectories(self, item: Any) -> tuple[ScoredGroup | None, list[Any]]:
        prompt = item["prompt"] if isinstance(item, dict) else item
        generated = self._generate(prompt, self.group_size)
        completions = list(await generated if inspect.isawaitable(generated) else generated)
        texts = [completion_text(c) for c in completions]
        messages = prompt_messages(prompt)
        submission = await asyncio.to_thread(self.env.submit, self.run_id, messages, texts)
        records = await asyncio.to_thread(
            self.env.wait,
            self.run_id,
            submission.completion_ids,
            self.timeout,
            self.poll,
        )
        group = self._scored_group(messages, texts, submission.completion_ids, records)
        return group, []

    def _scored_group(
        self,
        messages: Any,
        texts: list[str],
        completion_ids: Sequence[str],
        records: dict[str, Reward],
    ) -> ScoredGroup | None:
        history = (
            [{"role": "user", "content": messages}]
            if isinstance(messages, str)
            else [dict(m) for m in messages]
        )
        group: ScoredGroup = {
            "tokens": [],
            "masks": [],
            "scores": [],
            "advantages": None,
            "ref_logprobs": None,
            "messages": [],
            "group_overrides": {"run_id": self.run_id},
            "overrides": [],
        }
        for text, cid in zip(texts, completion_ids, strict=True):
            record = records.get(cid)
            score = reward_value(record, value=self.value)
            if score is None or record is None:
                continue
            tokens, masks = self._tokenize(messages, text) if self._tokenize else ([], [])
            group["tokens"].append(tokens)
            group["masks"].append(masks)
            group["scores"].append(score)
            assert group["messages"] is not None and group["overrides"] is not None
            group["messages"].append([*history, {"role": "assistant", "content": text}])
            group["overrides"].append(
                {
                    "completion_id": cid,
                    "votes": record.votes,
                    "score_low": record.score_low,
                    "score_high": record.score_high,
                    "win_rate": record.win_rate,
                }
            )
        if len(group["scores"]) < self.min_scored:
            return None
        return group
