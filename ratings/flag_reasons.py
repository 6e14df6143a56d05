"""Why a flagged vote is left out, in words a visitor reads (the codes stay for programs)."""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

#: Each flag code the arena writes (``arena.services.votes``, ``arena.leaks``,
#: ``arena.services.flags``) as a sentence.
FLAG_REASON_TEXT = {
    "identity_leak": gettext_noop(
        "An answer revealed the model's name, so the vote was not anonymous."
    ),
    "too_fast": gettext_noop("The vote came faster than anyone could read both answers."),
    "bot_user_agent": gettext_noop("The vote came from a browser that identifies itself as a bot."),
    "anomalous_voter": gettext_noop(
        "A check over all of this voter's votes found them unlike other visitors' choices."
    ),
    "cohort_burst": gettext_noop(
        "It came in a burst of votes from new visitors that disagrees with the rest of the "
        "arena about a model; it is held out while the burst stands out."
    ),
}

#: The same, in a few words, where a line lists them (the leaderboard's header).
FLAG_REASON_LABEL = {
    "identity_leak": gettext_noop("an answer named its model"),
    "too_fast": gettext_noop("voted too fast"),
    "bot_user_agent": gettext_noop("a bot's browser"),
    "anomalous_voter": gettext_noop("an anomalous voter"),
    "cohort_burst": gettext_noop("a burst of new visitors"),
}


def flag_reason_label(code: str) -> str:
    """A few words for ``code``, in the active language."""
    label = FLAG_REASON_LABEL.get(code)
    return gettext(label) if label else code.replace("_", " ")


def flag_reason_text(code: str) -> str:
    """The sentence for ``code``; a code without one is still read as a sentence."""
    text = FLAG_REASON_TEXT.get(code)
    if text:
        return gettext(text)
    return gettext("Flagged as %(code)s.") % {"code": code.replace("_", " ")}
