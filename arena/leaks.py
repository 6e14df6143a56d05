"""Identity leaks: an answer that names its own model or organisation.

Anonymous battles are only anonymous while the answers do not say who wrote them ("I am Claude,
an AI assistant created by Anthropic"). A visitor who reads that can vote for or against a
model by name, which is the first step of rigging a leaderboard (Huang et al., 2025). The check
runs when an answer is saved (``BattleMessage.names_model``); a vote on a battle with such an
answer is flagged ``identity_leak`` and stays out of ratings and exports by default.

Matching is case- and punctuation-insensitive on word boundaries: texts and names are folded to
lower case with every run of non-alphanumeric characters made one space, and a name matches
where its folded form sits between spaces ("GPT-3.5 turbo" matches "gpt_3.5-Turbo" but neither
"gpt-3.5x" nor "chatgpt-3.5"). A name the user's own turns mention is no leak: the answer may
well repeat what it was asked about.
"""

import re
from collections.abc import Iterable

from arena.models import ArenaModel

IDENTITY_LEAK = "identity_leak"
# Folded names shorter than this match too much ordinary text ("ai", "x") and are ignored.
MIN_NAME_CHARS = 3

_NOT_ALNUM = re.compile(r"[\W_]+")


def fold(text: str) -> str:
    """``text`` in lower case, each run of punctuation or space one space, padded with spaces."""
    folded = _NOT_ALNUM.sub(" ", text.casefold()).strip()
    return f" {folded} " if folded else ""


def model_names(model: ArenaModel) -> list[str]:
    """The names that identify ``model``: slug, display name, organisation and aliases."""
    aliases = model.aliases if isinstance(model.aliases, list) else []
    return [model.slug, model.display_name, model.organization, *map(str, aliases)]


def names_in_answer(answer: str, *, names: Iterable[str], user_turns: Iterable[str]) -> list[str]:
    """The names (folded, without padding) ``answer`` mentions that no user turn mentions."""
    folded_answer = fold(answer)
    if not folded_answer:
        return []
    asked = " ".join(fold(turn) for turn in user_turns)
    found: list[str] = []
    for name in names:
        folded = fold(name)
        if len(folded.strip()) < MIN_NAME_CHARS or folded.strip() in found:
            continue
        if folded in folded_answer and folded not in asked:
            found.append(folded.strip())
    return found


def answer_names_model(answer: str, *, model: ArenaModel, user_turns: Iterable[str]) -> bool:
    """Whether ``answer`` names ``model`` (or its organisation) where the user's turns did not."""
    return bool(names_in_answer(answer, names=model_names(model), user_turns=user_turns))
