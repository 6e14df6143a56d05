"""Building the demo arena from the real data bundled in ``arena/demo_data``."""

import csv
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from answer_style import conv_metadata, style_counts
from arena.errors import ArenaError, ErrorCode
from arena.leaks import IDENTITY_LEAK, answer_names_model
from arena.models import ArenaModel, Battle, BattleMessage, Prompt, Vote
from arena.services.pool import PoolLine, Progress, no_progress, pool_write
from arena.services.reactions import reaction_tags_seed

DEMO_DATA_DIR = Path(__file__).resolve().parent.parent / "demo_data"
MT_BENCH_SOURCE = "mt_bench"
# Fixed namespace so a historical vote always maps to the same battle id (idempotent loads).
_HISTORY_NAMESPACE = uuid.UUID("5b0c3f0e-3c55-4d1e-9d4f-7a1b8e2f6a10")


@dataclass
class DemoLoadResult:
    prompts_created: int
    completions_created: int
    models_created: int
    battles_created: int
    votes_skipped_without_text: int


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _pool_lines(data_dir: Path) -> list[PoolLine]:
    """The MT-bench answers, then the other texts the expert judges saw of the same models'
    answers (``_judged_variants``): a pool model's first variant is its published answer."""
    questions = {q["question_id"]: q for q in _read_jsonl(data_dir / "mt_bench" / "question.jsonl")}
    lines = []
    for answer_file in sorted((data_dir / "mt_bench" / "model_answer").glob("*.jsonl")):
        for answer in _read_jsonl(answer_file):
            question = questions[answer["question_id"]]
            turns = answer["choices"][0]["turns"]
            lines.append(
                PoolLine(
                    line_no=0,
                    prompt=tuple(question["turns"]),
                    model=answer["model_id"],
                    completion=tuple(turns[: len(question["turns"])]),
                    category=question["category"],
                    language="en",
                    prompt_id=str(question["question_id"]),
                )
            )
    return lines + _judged_variants(data_dir, questions, lines)


def _judged_variants(
    data_dir: Path, questions: dict[int, dict[str, Any]], published: list[PoolLine]
) -> list[PoolLine]:
    """Second pool answers, real ones: the texts the MT-bench expert judges saw
    (``answers_from_human_file.jsonl``) where a pool model's generation differs from its
    published answer to the same question. Models without published answers stay out of the
    pool (their texts are in the historical battles only)."""
    known = {(line.model, line.prompt_id): line.completion for line in published}
    lines = []
    path = data_dir / "mt_bench_human_votes" / "answers_from_human_file.jsonl"
    for row in _read_jsonl(path):
        question = questions.get(row["question_id"])
        key = (row["model"], str(row["question_id"]))
        if question is None or key not in known:
            continue
        turns = tuple(row["answers"][: len(question["turns"])])
        if turns == known[key] or len(turns) != len(question["turns"]):
            continue
        lines.append(
            PoolLine(
                line_no=0,
                prompt=tuple(question["turns"]),
                model=row["model"],
                completion=turns,
                category=question["category"],
                language="en",
                prompt_id=str(row["question_id"]),
            )
        )
    return lines


def _history_battles(data_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The expert votes, each with the exact conversation texts its judge saw."""
    folder = data_dir / "mt_bench_human_votes"
    texts = {
        (row["model"], row["question_id"]): row["answers"]
        for row in _read_jsonl(folder / "answers_from_human_file.jsonl")
    }
    battles, skipped = [], 0
    with (folder / "human_votes_subset.csv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            qid, turn = int(row["question_id"]), int(row["turn"])
            a, b = texts.get((row["model_a"], qid)), texts.get((row["model_b"], qid))
            if a is None or b is None:
                skipped += 1
                continue
            key = f"mt_bench_human:{qid}:{turn}:{row['model_a']}:{row['model_b']}:{row['judge']}"
            battles.append(
                {
                    "id": uuid.uuid5(_HISTORY_NAMESPACE, key),
                    "question_id": qid,
                    "turns": turn,
                    "model_a": row["model_a"],
                    "model_b": row["model_b"],
                    "a": a[:turn],
                    "b": b[:turn],
                    "winner": row["winner"],
                    "judge": row["judge"],
                }
            )
    return battles, skipped


def demo_load(
    *, data_dir: Path = DEMO_DATA_DIR, progress: Progress = no_progress
) -> DemoLoadResult:
    """Load the MT-bench pool and the historical expert votes. Running it again adds nothing.

    The pool's answers are MT-bench's published ones, plus, for the models whose answers the
    expert judges saw in another generation (gpt-4 and claude-v1), those texts as second
    variants, shown in rotation with the published ones.

    ``progress`` wraps the two long steps (the pool, the historical votes).
    """
    if not (data_dir / "mt_bench" / "question.jsonl").exists():
        raise ArenaError(
            ErrorCode.MISSING_DATA, f"No demo data under {data_dir}.", field="data_dir"
        )
    with (data_dir / "models.json").open(encoding="utf-8") as handle:
        meta = {k: v for k, v in json.load(handle).items() if not k.startswith("_")}
    model_defaults = {
        slug: {
            "display_name": m["name"],
            "organization": m["organization"],
            "license": m["license"],
        }
        for slug, m in meta.items()
    }
    history, skipped = _history_battles(data_dir)
    with transaction.atomic():
        reaction_tags_seed()  # a database emptied since its migrations has none
        pool = pool_write(
            lines=_pool_lines(data_dir),
            source=MT_BENCH_SOURCE,
            model_defaults=model_defaults,
            progress=progress,
        )
        models_created = len(pool.models_created)
        for slug in {b["model_a"] for b in history} | {b["model_b"] for b in history}:
            defaults = {"display_name": slug, **model_defaults.get(slug, {})}
            _, created = ArenaModel.objects.get_or_create(slug=slug, defaults=defaults)
            models_created += created
        # Names an answer may give its model away by (arena.leaks); staff's own are kept.
        for slug, m in meta.items():
            if m.get("aliases"):
                ArenaModel.objects.filter(slug=slug, aliases=[]).update(aliases=m["aliases"])
        battles_created = _write_history(history, progress)
    return DemoLoadResult(
        prompts_created=pool.prompts_created,
        completions_created=pool.completions_created,
        models_created=models_created,
        battles_created=battles_created,
        votes_skipped_without_text=skipped,
    )


def _write_history(history: list[dict[str, Any]], progress: Progress) -> int:
    existing = set(
        Battle.objects.filter(id__in=[b["id"] for b in history]).values_list("id", flat=True)
    )
    todo = [b for b in history if b["id"] not in existing]
    if not todo:
        return 0
    models = {m.slug: m for m in ArenaModel.objects.all()}
    prompts = {int(p.external_id): p for p in Prompt.objects.filter(source=MT_BENCH_SOURCE)}
    battles, messages, votes = [], [], []
    for item in progress(todo, desc="historical votes"):
        prompt = prompts[item["question_id"]]
        battles.append(
            Battle(
                id=item["id"],
                mode=Battle.Mode.ANONYMOUS,
                source=Battle.Source.IMPORT,
                model_a_id=models[item["model_a"]].pk,
                model_b_id=models[item["model_b"]].pk,
                prompt=prompt,
                session_hash="",
                state=Battle.State.VOTED,
            )
        )
        counts = {side: [style_counts(text) for text in item[side]] for side in ("a", "b")}
        leaked = False
        for side in ("a", "b"):
            model = models[item[f"model_{side}"]]
            for turn, text in enumerate(item[side]):
                names_model = answer_names_model(
                    text, model=model, user_turns=prompt.turns[: turn + 1]
                )
                leaked = leaked or names_model
                messages.append(
                    BattleMessage(
                        battle_id=item["id"],
                        side=side,
                        turn=turn,
                        user_content=prompt.turns[turn],
                        content=text,
                        style=counts[side][turn],
                        names_model=names_model,
                        status=BattleMessage.Status.DONE,
                    )
                )
        votes.append(
            Vote(
                battle_id=item["id"],
                winner=item["winner"],
                voter_id=f"mt_bench:{item['judge']}",
                user_agent_class="import",
                flagged=leaked,
                flags=[IDENTITY_LEAK] if leaked else [],
                style=conv_metadata(counts["a"], counts["b"]),
            )
        )
    Battle.objects.bulk_create(battles, batch_size=500)
    BattleMessage.objects.bulk_create(messages, batch_size=500)
    Vote.objects.bulk_create(votes, batch_size=500)
    return len(todo)
