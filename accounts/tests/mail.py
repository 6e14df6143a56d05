"""The one-time code of a mail django-allauth sent (the test settings' outbox)."""

import re

from django.core import mail

# allauth's codes: letters without vowels and digits, in dashed groups (BCDF-GHJK).
CODE = re.compile(r"^\s*([A-Z0-9]{3,}(?:-[A-Z0-9]{3,})*)\s*$", re.MULTILINE)


def mailed_code(to: str) -> str:
    """The code in the newest mail sent to ``to``."""
    sent = [m for m in mail.outbox if to in m.to]
    assert sent, f"no mail to {to} in {[m.to for m in mail.outbox]}"
    found = CODE.findall(sent[-1].body)
    assert len(found) == 1, sent[-1].body
    return found[0]
