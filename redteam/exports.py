"""The safety data set: every succeeded, surrendered or expired attempt as one row.

Columns: ``attempt_id``, ``model``, ``challenge`` (slug), ``challenge_kind``, ``rule``,
``state``, ``outcome`` (``broken`` or ``held``), ``verdict_reason``, ``evidence`` (JSON text),
``messages`` (role/content, the challenge's rule as the system message: the system prompt and
its secret are never exported, and the secret in any form the judge counts (any case, spelled
out, reversed, base64) is replaced by ``[***]`` in every text, ``redteam.judges.secret_redact``),
``turns``, ``judge`` (keyed hash of the player, ``arena.exports.records.judge_hash``),
``created_at`` and ``ended_at`` (ISO 8601, UTC). Flagged attempts are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arena.exports.records import judge_hash
from redteam.judges import secret_redact, secret_redact_json
from redteam.models import Attempt
from redteam.selectors import challenge_secret

EXPORTED_STATES = (Attempt.State.SUCCEEDED, Attempt.State.SURRENDERED, Attempt.State.EXPIRED)
CARD = """---
license: cc-by-4.0
configs:
- config_name: default
  data_files: attempts.{ext}
---
# Arena red-teaming attempts

Each row is one player's attempt to make an anonymous model break a challenge's rule:
`outcome` is `broken` (the rule broke, `evidence` says where) or `held`. `messages` holds the
conversation, with the challenge's rule as the system message; system prompts and planted
secrets are not included. `judge` is a keyed hash of the player, stable across exports.
"""


def attempt_messages(attempt: Attempt) -> list[dict[str, str]]:
    """The attempt's conversation, the challenge's rule as the system message, the secret
    redacted (its turns prefetched by the caller)."""
    challenge = attempt.challenge
    secret = challenge_secret(challenge)
    messages = [{"role": "system", "content": challenge.rule}]
    for t in attempt.turns.all():
        messages.append({"role": "user", "content": secret_redact(t.user_content, secret)})
        messages.append({"role": "assistant", "content": secret_redact(t.content, secret)})
    return messages


def attempt_rows() -> list[dict[str, Any]]:
    attempts = (
        Attempt.objects.filter(state__in=EXPORTED_STATES, flagged=False)
        .select_related("challenge", "model")
        .prefetch_related("turns")
        .order_by("ended_at", "id")
    )
    rows = []
    for a in attempts:
        ch = a.challenge
        secret = challenge_secret(ch)
        messages = attempt_messages(a)
        rows.append(
            {
                "attempt_id": str(a.id),
                "model": a.model.slug,
                "challenge": ch.slug,
                "challenge_kind": ch.kind,
                "rule": ch.rule,
                "state": a.state,
                "outcome": "broken" if a.state == Attempt.State.SUCCEEDED else "held",
                "verdict_reason": secret_redact(a.verdict_reason, secret),
                "evidence": json.dumps(secret_redact_json(a.evidence, secret)),
                "messages": messages,
                "turns": (len(messages) - 1) // 2,
                "judge": judge_hash(a.player_id),
                "created_at": a.created_at.isoformat(),
                "ended_at": a.ended_at.isoformat() if a.ended_at else None,
            }
        )
    return rows


def export_write(*, out: Path, parquet: bool = False) -> Path:
    """Write ``attempts.jsonl`` (or ``attempts.parquet``) and the card ``README.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = attempt_rows()
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), out / "attempts.parquet")
    else:
        with (out / "attempts.jsonl").open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    (out / "README.md").write_text(CARD.format(ext="parquet" if parquet else "jsonl"))
    return out
