"""Benchmark of the vote exports: N votes in PostgreSQL written in every format.

    .venv/bin/python bench/export.py [--votes 1000000] [--quick] [--keep]

1. Creates the database ``arena_bench_export`` on the server ``DATABASE_URL`` names (default
   ``postgres://postgres@127.0.0.1:5432/``), migrates it, and bulk-loads N anonymous voted
   battles with ``COPY``. Every battle is one of the 1,751 real MT-bench human votes in
   ``arena/demo_data/mt_bench_human_votes`` (question, turn, the two models, the verdict),
   drawn with replacement and with its sides swapped half the time, and holds the exact
   answers those judges read (``answers_from_human_file.jsonl``): the first turn only for a
   vote on turn 1, both turns for a vote on turn 2. Style counts are the answers' own
   (``answer_style``). Voter ids and vote times are synthetic (100,000 voters, one vote every
   30 seconds; each vote's voter drawn uniformly, so about 10 votes per voter spread over the
   whole period). Each voter (session) has an address hash and a user-agent class fixed by its
   number (``voter_source``): 80,000 addresses, the voters k and k + 80,000 sharing one (a
   household or a NAT: 20,000 addresses with two sessions), a third of the sessions
   ``mobile``, the rest ``browser``; they draw nothing from the generator, so the battles,
   voters and times are those loaded before they existed.
2. Exports every format (``manage.py export_votes --format F -o DIR/``, JSONL and
   ``--parquet``, with the dataset card), each in a child process: rows per second and votes
   per second over the export itself (timed inside the child, Django's start-up excluded),
   and the child's peak resident memory (``ru_maxrss`` from ``os.wait4``, start-up included).
3. Prints the table against the targets: at least 50,000 rows/s, under 300 MB peak.

The database is dropped at the end unless ``--keep``; the exported files are deleted after
each run (their size is printed).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "out" / "export"
VOTES_DIR = ROOT / "arena" / "demo_data" / "mt_bench_human_votes"
DATABASE = "arena_bench_export"
FORMATS = ("arena", "trl", "openai", "hh-rlhf", "kto")
TARGET_ROWS_PER_S = 50_000
TARGET_PEAK_MB = 300
LOAD_CHUNK = 20_000  # battles per COPY round
START = datetime(2026, 1, 1, tzinfo=UTC)  # the first vote's time; one every 30 seconds
VOTERS = 100_000
ADDRESSES = 80_000  # voters k and k + ADDRESSES share an address


def voter_source(number: int) -> tuple[str, str]:
    """The address hash (32 hex digits, as ``arena.identity.ip_hash`` stores) and user-agent
    class of the loader's voter ``number``."""
    address = hashlib.sha256(f"bench-address-{number % ADDRESSES}".encode()).hexdigest()[:32]
    return address, "mobile" if number % 3 == 0 else "browser"


def database_urls() -> tuple[str, str]:
    """(the server's maintenance database, the benchmark's database) from DATABASE_URL."""
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(f"DATABASE_URL must name a PostgreSQL server, not {parts.scheme}")
    return (
        urlunsplit(parts._replace(path="/postgres")),
        urlunsplit(parts._replace(path=f"/{DATABASE}")),
    )


def _copy_text(value: str) -> str:
    """A value in COPY's text format."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def templates() -> tuple[list[dict[str, Any]], dict[str, str], list[dict[str, Any]]]:
    """The real votes with their answers, as battle templates; the questions' categories; and
    the prompts (question id, turns)."""
    from answer_style import conv_metadata, style_counts

    answers: dict[tuple[str, int], dict[str, Any]] = {}
    for line in (VOTES_DIR / "answers_from_human_file.jsonl").read_text().splitlines():
        row = json.loads(line)
        answers[row["model"], int(row["question_id"])] = row
    categories: dict[int, str] = {}
    for line in (VOTES_DIR / "question.jsonl").read_text().splitlines():
        row = json.loads(line)
        categories[int(row["question_id"])] = row["category"]
    styles: dict[tuple[str, int, int], Any] = {}
    result = []
    prompts: dict[int, list[str]] = {}
    with (VOTES_DIR / "human_votes_subset.csv").open() as handle:
        votes = list(csv.DictReader(handle))
    for vote in votes:
        qid, turns = int(vote["question_id"]), int(vote["turn"])
        a, b = answers.get((vote["model_a"], qid)), answers.get((vote["model_b"], qid))
        if a is None or b is None:
            continue
        prompts[qid] = a["prompts"]
        for swap in (False, True):
            left, right = (b, a) if swap else (a, b)
            winner = vote["winner"]
            if swap and winner in ("model_a", "model_b"):
                winner = "model_b" if winner == "model_a" else "model_a"
            counts = []
            for side in (left, right):
                per_turn = []
                for t in range(turns):
                    key = (side["model"], qid, t)
                    if key not in styles:
                        styles[key] = style_counts(side["answers"][t])
                    per_turn.append(styles[key])
                counts.append(per_turn)
            result.append(
                {
                    "qid": qid,
                    "model_a": left["model"],
                    "model_b": right["model"],
                    "winner": winner,
                    "style": _copy_text(json.dumps(conv_metadata(counts[0], counts[1]))),
                    "messages": [
                        (t, side, _copy_text(a["prompts"][t]), _copy_text(who["answers"][t]))
                        for t in range(turns)
                        for side, who in (("a", left), ("b", right))
                    ],
                }
            )
    return (
        result,
        {str(q): c for q, c in categories.items()},
        [{"qid": q, "turns": t} for q, t in sorted(prompts.items())],
    )


def _models_and_prompts(
    battles: list[dict[str, Any]], categories: dict[str, str], prompts: list[dict[str, Any]]
) -> tuple[dict[str, int], dict[int, int]]:
    """The models and prompts, through the ORM (so new model fields keep their defaults)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()
    from arena.models import ArenaModel, Prompt

    slugs = sorted({b["model_a"] for b in battles} | {b["model_b"] for b in battles})
    model_ids = {
        slug: ArenaModel.objects.create(slug=slug, display_name=slug, is_active=False).pk
        for slug in slugs
    }
    prompt_ids = {
        p["qid"]: Prompt.objects.create(
            turns=p["turns"],
            category=categories[str(p["qid"])],
            language="en",
            source="mt_bench",
            external_id=str(p["qid"]),
        ).pk
        for p in prompts
    }
    return model_ids, prompt_ids


def _copy_sql(model: Any, columns: list[str]) -> tuple[str, str]:
    """``COPY table (columns..., others...) FROM STDIN`` and the COPY text of the others: every
    other required column the model has, at its field's default (fields added later keep the
    loader working)."""
    extra, values = [], []
    for f in model._meta.concrete_fields:
        if f.column in columns or f.null or f.primary_key and f.column == "id":
            continue
        default = f.get_default()
        extra.append(f.column)
        if isinstance(default, bool):
            values.append("t" if default else "f")
        elif isinstance(default, dict | list):
            values.append(_copy_text(json.dumps(default)))
        else:
            values.append(_copy_text(str(default)))
    table = model._meta.db_table
    sql = f"COPY {table} ({', '.join(columns + extra)}) FROM STDIN"
    return sql, "".join(f"\t{v}" for v in values)


def load(url: str, n: int, seed: int = 7) -> None:
    """N voted battles into the migrated database at ``url``, with COPY."""
    import psycopg

    battles, categories, prompts = templates()
    rng = random.Random(seed)
    now = START
    model_ids, prompt_ids = _models_and_prompts(battles, categories, prompts)
    from arena.models import Battle, BattleMessage, Vote

    battle_sql, battle_tail = _copy_sql(
        Battle,
        "id mode source model_a_id model_b_id prompt_id session_hash state created_at"
        " updated_at".split(),
    )
    message_sql, message_tail = _copy_sql(
        BattleMessage,
        "battle_id side turn user_content content status finish_reason error created_at".split(),
    )
    vote_sql, vote_tail = _copy_sql(
        Vote,
        "battle_id winner voter_id ip_hash user_agent_class flagged flags style created_at".split(),
    )
    sources = ["\t".join(voter_source(v)) for v in range(VOTERS)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        start = time.perf_counter()
        done = 0
        while done < n:
            size = min(LOAD_CHUNK, n - done)
            battle_lines, message_lines, vote_lines = [], [], []
            for i in range(done, done + size):
                t = battles[rng.randrange(len(battles))]
                battle_id = uuid.UUID(int=rng.getrandbits(128), version=4)
                moment = (now + timedelta(seconds=30 * i)).isoformat()
                battle_lines.append(
                    f"{battle_id}\tanonymous\tpool\t{model_ids[t['model_a']]}\t"
                    f"{model_ids[t['model_b']]}\t{prompt_ids[t['qid']]}\t\tvoted\t{moment}\t"
                    f"{moment}{battle_tail}\n"
                )
                for turn, side, user, content in t["messages"]:
                    message_lines.append(
                        f"{battle_id}\t{side}\t{turn}\t{user}\t{content}\tdone\t\t\t{moment}"
                        f"{message_tail}\n"
                    )
                voter = rng.randrange(VOTERS)
                vote_lines.append(
                    f"{battle_id}\t{t['winner']}\tbench-voter-{voter}\t{sources[voter]}\t"
                    f"f\t[]\t{t['style']}\t{moment}{vote_tail}\n"
                )
            with conn.transaction(), conn.cursor() as cur:
                for sql, lines in (
                    (battle_sql, battle_lines),
                    (message_sql, message_lines),
                    (vote_sql, vote_lines),
                ):
                    with cur.copy(sql) as copy:
                        copy.write("".join(lines))
            done += size
            rate = done / (time.perf_counter() - start)
            print(f"\rloaded {done:,} / {n:,} votes ({rate:,.0f}/s)", end="", flush=True)
        print()
        conn.execute("VACUUM ANALYZE")


def child(fmt: str, parquet: bool, out: Path, *, orm: bool = False, until: str = "") -> None:
    """One export, as ``manage.py export_votes`` runs it; prints its figures as JSON. ``orm``:
    through the ORM path (``records.voted_battles``), as before the COPY path and as on SQLite;
    ``until``: the votes before that moment only."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()
    import resource
    from io import StringIO

    from django.core.management import call_command

    if orm:
        from arena.management.commands import export_votes

        export_votes.supported = lambda: False  # type: ignore[attr-defined]
    err = StringIO()
    args = ["export_votes", f"--format={fmt}", f"--output={out}/"]
    args += [f"--until={until}"] if until else []
    setup_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start, cpu = time.perf_counter(), time.process_time()
    call_command(*args, *(["--parquet"] if parquet else []), stderr=err)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    summary = err.getvalue().strip()
    written = int(summary.split(": ", 1)[1].split(" written", 1)[0])
    votes = written
    if " from " in summary:
        votes = int(summary.split(" from ", 1)[1].split(" votes", 1)[0])
    size = sum(p.stat().st_size for p in out.iterdir())
    figures = {"rows": written, "votes": votes, "seconds": seconds, "cpu": cpu, "bytes": size}
    print(json.dumps({**figures, "setup_mb": setup_mb}))


def run_child(
    url: str, fmt: str, parquet: bool, *, orm: bool = False, until: str = ""
) -> dict[str, Any]:
    """One export in a child process: its figures and its peak resident MiB (``os.wait4``)."""
    out = OUT / f"{fmt}-{'parquet' if parquet else 'jsonl'}{'-orm' if orm else ''}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
    env.pop("REDIS_URL", None)
    command = [sys.executable, __file__, "--child", fmt, "--out", str(out)]
    command += ["--parquet"] if parquet else []
    command += (["--orm"] if orm else []) + ([f"--until={until}"] if until else [])
    logs = out.with_name(out.name + ".log")
    with logs.open("w+b") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
        log.seek(0)
        text = log.read().decode()
    shutil.rmtree(out, ignore_errors=True)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{fmt} export failed:\n{text[-3000:]}")
    logs.unlink()
    figures = json.loads(text.strip().splitlines()[-1])
    return {**figures, "peak_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="50,000 votes")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="export the kept database again")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument(
        "--old-votes",
        type=int,
        default=100_000,
        help="time the old ORM path too, on the first N votes (0: not at all); the ratio is "
        "the COPY path's rows/s over all the votes against the ORM path's on these",
    )
    parser.add_argument("--orm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--until", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--load", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--parquet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.parquet, args.out, orm=args.orm, until=args.until)
        return
    if args.load:
        load(args.url, args.load)
        return
    n = 50_000 if args.quick else args.votes
    server, url = database_urls()
    import psycopg

    if not args.reuse:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            conn.execute(f"CREATE DATABASE {DATABASE}")
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local"}
        env.pop("REDIS_URL", None)
        manage = [sys.executable, "manage.py", "migrate", "--verbosity=0"]
        subprocess.run(manage, cwd=ROOT, env=env, check=True)
        start = time.perf_counter()
        # In a child: the parent stays small, and its exports' children start from that size
        # (Linux keeps ru_maxrss across fork and exec).
        loader = [sys.executable, __file__, "--load", str(n), "--url", url]
        subprocess.run(loader, cwd=ROOT, env=env, check=True)
        print(f"loaded in {time.perf_counter() - start:.0f} s")
    with psycopg.connect(url) as conn:
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        print(f"database {DATABASE}: {size.fetchone()[0]}")  # type: ignore[index]
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    old_votes = min(args.old_votes, n)
    # The loader's votes are 30 s apart from START: the first K are those before this moment.
    until = (START + timedelta(seconds=30 * old_votes)).isoformat() if old_votes < n else ""
    try:
        for fmt in args.formats.split(","):
            for parquet in (False, True):
                figures = run_child(url, fmt, parquet)
                old = run_child(url, fmt, parquet, orm=True, until=until) if old_votes else None
                results.append((fmt, "Parquet" if parquet else "JSONL", figures, old))
                print(f"  {fmt} {'parquet' if parquet else 'jsonl'}: {figures}", flush=True)
                print(f"    old ORM path, {old_votes:,} votes: {old}", flush=True)
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    print()
    print(
        f"{n:,} votes in PostgreSQL; targets >= {TARGET_ROWS_PER_S:,} rows/s, peak < "
        f"{TARGET_PEAK_MB} MB"
    )
    print()
    print(
        "| format | file | votes | rows | wall s | CPU s | rows/s | rows per CPU s "
        "| peak MiB (after start-up) | MB written | target met | old rows/s | old peak MiB "
        "| rows/s vs old |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for fmt, kind, f, old in results:
        rate = f["rows"] / f["seconds"]
        met = rate >= TARGET_ROWS_PER_S and f["peak_mb"] * 1.048576 <= TARGET_PEAK_MB
        old_rate = old["rows"] / old["seconds"] if old else None
        versus = (
            f"{old_rate:,.0f} | {old['peak_mb']:.0f} | {rate / old_rate:.1f}x"
            if old and old_rate
            else "– | – | –"
        )
        print(
            f"| {fmt} | {kind} | {f['votes']:,} | {f['rows']:,} | {f['seconds']:.1f} | "
            f"{f['cpu']:.1f} | {rate:,.0f} | {f['rows'] / f['cpu']:,.0f} | "
            f"{f['peak_mb']:.0f} ({f['setup_mb']:.0f}) | {f['bytes'] / 1e6:,.0f} | "
            f"{'yes' if met else 'no'} | {versus} |"
        )
    print()
    print("wall s, CPU s: the export itself in the child (Django's start-up excluded; CPU is the")
    print("child's own, the database server's not counted); peak: the child's ru_maxrss, with")
    print("its size after django.setup() in brackets. old: the ORM path (records.voted_battles,")
    print(f"as SQLite exports) in the same run, on the first {old_votes:,} votes; target met:")
    print(f">= {TARGET_ROWS_PER_S:,} rows/s and <= {TARGET_PEAK_MB} MB (10^6 bytes) peak.")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
