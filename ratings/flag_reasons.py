"""Why a flagged vote is left out, in words a visitor reads (the codes stay for programs)."""

from __future__ import annotations

#: Each flag code the arena writes (``arena.services.votes``, ``arena.leaks``,
#: ``arena.services.flags``) as a sentence.
FLAG_REASON_TEXT = {
    "identity_leak": "An answer revealed the model's name, so the vote was not anonymous.",
    "too_fast": "The vote came faster than anyone could read both answers.",
    "bot_user_agent": "The vote came from a browser that identifies itself as a bot.",
    "anomalous_voter": "A check over all of this voter's votes found them unlike other "
    "visitors' choices.",
}

#: The same, in a few words, where a line lists them (the leaderboard's header).
FLAG_REASON_LABEL = {
    "identity_leak": "an answer named its model",
    "too_fast": "voted too fast",
    "bot_user_agent": "a bot's browser",
    "anomalous_voter": "an anomalous voter",
}


def flag_reason_label(code: str) -> str:
    """A few words for ``code``."""
    return FLAG_REASON_LABEL.get(code) or code.replace("_", " ")


def flag_reason_text(code: str) -> str:
    """The sentence for ``code``; a code without one is still read as a sentence."""
    text = FLAG_REASON_TEXT.get(code)
    if text:
        return text
    return f"Flagged as {code.replace('_', ' ')}."
