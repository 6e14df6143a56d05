"""Benchmark of the rating engine against LMArena's ``arena-rank`` on the same Parquet file.

    .venv/bin/python bench/ratings.py [--battles 1000000] [--models 120] [--quick]

Generates seeded synthetic battles (true ratings ~ N(1000, 100) Elo, lognormal model
popularity, style effects of the published size, 18% ties) in the public arena schema with a
struct ``conv_metadata``, writes them to ``bench/out/battles.parquet``, then times whole
processes that start from that file:

1. ours, style-controlled Bradley-Terry with sandwich intervals (``python -m ratings.cli``,
   the code path of ``manage.py rate`` without Django's start-up);
2. ours, the same with a 100-round bootstrap;
3. arena-rank's ``ContextualBradleyTerry`` with sandwich intervals, same model (no
   reweighting, no L2), installed from PyPI into ``bench/.venv-arena-rank``.

Wall time is measured around each child process, peak memory is the child's ``ru_maxrss``
(``os.wait4``). Targets: (1) at most 1/10 of arena-rank's time, (2) under 6 s, both under 1 GB.

``--streamed`` (automatic from 10M battles) times the batch-by-batch fit instead
(``python -m ratings.cli FILE --streamed``, ``engine.rate_parquet``) on a file generated in
row groups of 1M battles, ``bench/out/stream_<n>_<models>_seed<seed>.parquet`` (kept for
reruns), with the in-memory fit of the same file as the anchor up to ``--memory-limit``
battles. Targets: 10M battles in at most 15 s under 1.5 GB, 100M in at most 180 s under 2 GB
(style control and sandwich intervals).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
ARENA_VENV = ROOT / "bench" / ".venv-arena-rank"
ARENA_RANK = "arena-rank==0.1.1"

ARENA_RUNNER = r"""
import json, sys
import numpy as np, pandas as pd, pyarrow.compute as pc, pyarrow.parquet as pq
from arena_rank.models.contextual_bradley_terry import ContextualBradleyTerry
from arena_rank.utils.data_utils import ContextualPairDataset

table = pq.read_table(sys.argv[1])
meta = table.column("conv_metadata")
def total(key, parts):
    field = pc.struct_field(meta, key)
    if not parts:
        return field.to_numpy().astype(float)
    return sum(pc.struct_field(field, p).to_numpy().astype(float) for p in parts)
H = ["h1", "h2", "h3", "h4", "h5", "h6"]
sides = {
    "length": ("sum_assistant_a_tokens", "sum_assistant_b_tokens", None),
    "header": ("header_count_a", "header_count_b", H),
    "list": ("list_count_a", "list_count_b", ["ordered", "unordered"]),
    "bold": ("bold_count_a", "bold_count_b", ["**", "__"]),
}
df = pd.DataFrame({c: table.column(c).to_numpy() for c in ("model_a", "model_b", "winner")})
for name, (a, b, parts) in sides.items():
    x, y = total(a, parts), total(b, parts)
    df[name] = (x - y) / (x + y + 1)
outcome = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}
data = ContextualPairDataset.from_pandas(
    df, feature_cols=list(sides), outcome_map=lambda w: outcome[w], reweighted=False
)
model = ContextualBradleyTerry(n_competitors=len(data.competitors), n_features=4, reg=0.0)
res = model.compute_ratings_and_cis(data, ci_method="sandwich")
json.dump(
    {
        "ratings": dict(zip(res["competitors"], np.asarray(res["ratings"]).tolist())),
        "coeffs": dict(zip(sides, np.asarray(res["coeffs"]).tolist())),
    },
    open(sys.argv[2], "w"),
)
"""


def generate(path: Path, n: int, p: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    theta = rng.normal(1000, 100, p) * np.log(10) / 400
    popularity = rng.lognormal(0, 1.0, p)
    popularity /= popularity.sum()
    a = rng.choice(p, n, p=popularity)
    b = rng.choice(p, n, p=popularity)
    while (same := a == b).any():
        b[same] = rng.choice(p, int(same.sum()), p=popularity)
    verbosity = rng.lognormal(6, 0.4, p)
    rates = [rng.gamma(1.0, 1.5, p), rng.gamma(1.5, 3, p), rng.gamma(1.2, 3, p)]

    def side(m: np.ndarray) -> list[np.ndarray]:
        tokens = rng.lognormal(np.log(verbosity[m]), 0.7).astype(np.int64)
        return [tokens, *(rng.poisson(r[m]) for r in rates)]

    sa, sb = side(a), side(b)
    f = np.stack([(x - y) / (x + y + 1.0) for x, y in zip(sa, sb, strict=True)])
    f = (f - f.mean(1, keepdims=True)) / f.std(1, keepdims=True)
    z = theta[a] - theta[b] + np.array([0.25, 0.02, 0.03, 0.02]) @ f
    u = rng.random(n)
    prob = 1 / (1 + np.exp(-z))
    winner = np.where(u < 0.82 * prob, 0, np.where(u < 0.82, 1, np.where(u < 0.94, 2, 3)))
    names = np.array([f"model-{i:03d}" for i in range(p)])
    labels = np.array(["model_a", "model_b", "tie", "tie (bothbad)"])

    def split(total: np.ndarray, keys: list[str]) -> pa.StructArray:
        first = total - total // len(keys) * (len(keys) - 1)
        parts = [first] + [total // len(keys)] * (len(keys) - 1)
        return pa.StructArray.from_arrays([pa.array(x) for x in parts], names=keys)

    h = ["h1", "h2", "h3", "h4", "h5", "h6"]
    meta = pa.StructArray.from_arrays(
        [
            pa.array(sa[0]),
            pa.array(sb[0]),
            split(sa[1], h),
            split(sb[1], h),
            split(sa[2], ["ordered", "unordered"]),
            split(sb[2], ["ordered", "unordered"]),
            split(sa[3], ["**", "__"]),
            split(sb[3], ["**", "__"]),
        ],
        names=[
            "sum_assistant_a_tokens",
            "sum_assistant_b_tokens",
            "header_count_a",
            "header_count_b",
            "list_count_a",
            "list_count_b",
            "bold_count_a",
            "bold_count_b",
        ],
    )
    table = pa.table(
        {
            "model_a": pa.array(names[a]),
            "model_b": pa.array(names[b]),
            "winner": pa.array(labels[winner]),
            "conv_metadata": meta,
        }
    )
    pq.write_table(table, path)


STREAM_TARGETS = {10_000_000: (15.0, 1536.0), 100_000_000: (180.0, 2048.0)}
CHUNK = 1_000_000


def generate_chunked(path: Path, n: int, p: int, seed: int = 0) -> None:
    """``generate``'s model in row groups of ``CHUNK`` battles, never all in memory.

    Style differences are z-scored with the mean and standard deviation of the first chunk
    (the true effect sizes are then per that chunk's deviation, which is close to the whole
    file's). Strings are written as Arrow dictionaries (one per row group).
    """
    rng = np.random.default_rng(seed)
    theta = rng.normal(1000, 100, p) * np.log(10) / 400
    popularity = rng.lognormal(0, 1.0, p)
    popularity /= popularity.sum()
    verbosity = rng.lognormal(6, 0.4, p)
    rates = [rng.gamma(1.0, 1.5, p), rng.gamma(1.5, 3, p), rng.gamma(1.2, 3, p)]
    names = pa.array([f"model-{i:03d}" for i in range(p)])
    labels = pa.array(["model_a", "model_b", "tie", "tie (bothbad)"])
    h = ["h1", "h2", "h3", "h4", "h5", "h6"]
    keys = [
        ("sum_assistant_a_tokens", None),
        ("sum_assistant_b_tokens", None),
        ("header_count_a", h),
        ("header_count_b", h),
        ("list_count_a", ["ordered", "unordered"]),
        ("list_count_b", ["ordered", "unordered"]),
        ("bold_count_a", ["**", "__"]),
        ("bold_count_b", ["**", "__"]),
    ]
    effects = np.array([0.25, 0.02, 0.03, 0.02])
    scale: tuple[np.ndarray, np.ndarray] | None = None
    partial = path.with_suffix(".partial")
    writer: pq.ParquetWriter | None = None
    try:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            a = rng.choice(p, m, p=popularity)
            b = rng.choice(p, m, p=popularity)
            while (same := a == b).any():
                b[same] = rng.choice(p, int(same.sum()), p=popularity)
            sides = []
            for model in (a, b):
                tokens = rng.lognormal(np.log(verbosity[model]), 0.7).astype(np.int64)
                sides.append([tokens, *(rng.poisson(r[model]) for r in rates)])
            sa, sb = sides
            f = np.stack([(x - y) / (x + y + 1.0) for x, y in zip(sa, sb, strict=True)])
            if scale is None:
                scale = (f.mean(1, keepdims=True), f.std(1, keepdims=True))
            z = theta[a] - theta[b] + effects @ ((f - scale[0]) / scale[1])
            u = rng.random(m)
            prob = 1 / (1 + np.exp(-z))
            winner = np.where(u < 0.82 * prob, 0, np.where(u < 0.82, 1, np.where(u < 0.94, 2, 3)))
            columns = []
            for (_key, parts), values in zip(
                keys, [sa[0], sb[0], sa[1], sb[1], sa[2], sb[2], sa[3], sb[3]], strict=True
            ):
                if parts is None:
                    columns.append(pa.array(values))
                    continue
                first = values - values // len(parts) * (len(parts) - 1)
                rest = [pa.array(values // len(parts))] * (len(parts) - 1)
                columns.append(pa.StructArray.from_arrays([pa.array(first), *rest], parts))
            meta = pa.StructArray.from_arrays(columns, [key for key, _ in keys])
            table = pa.table(
                {
                    "model_a": pa.DictionaryArray.from_arrays(pa.array(a.astype(np.int32)), names),
                    "model_b": pa.DictionaryArray.from_arrays(pa.array(b.astype(np.int32)), names),
                    "winner": pa.DictionaryArray.from_arrays(
                        pa.array(winner.astype(np.int32)), labels
                    ),
                    "conv_metadata": meta,
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(str(partial), table.schema)
            writer.write_table(table, row_group_size=CHUNK)
            print(f"  {start + m:,} / {n:,}", end="\r", flush=True)
    finally:
        if writer is not None:
            writer.close()
    partial.rename(path)
    print()


def timed(command: list[str], cwd: Path = ROOT) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak resident MiB of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    stderr = child.stderr.read().decode() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def arena_rank_python() -> Path:
    python = ARENA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {ARENA_VENV} with {ARENA_RANK} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(ARENA_VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import arena_rank"], capture_output=True)
    if probe.returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", ARENA_RANK], check=True)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--models", type=int, default=120)
    parser.add_argument("--quick", action="store_true", help="50,000 battles among 40 models")
    parser.add_argument("--skip-arena-rank", action="store_true")
    parser.add_argument(
        "--repeat", type=int, help="runs of ours (median shown; default 3, 1 from 50M)"
    )
    parser.add_argument(
        "--streamed",
        action="store_true",
        help="time the batch-by-batch fit (rate_parquet); automatic from 10M battles",
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (--streamed)")
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=10_000_000,
        help="--streamed: also time the in-memory fit up to this many battles",
    )
    args = parser.parse_args()
    n, p = (50_000, 40) if args.quick else (args.battles, args.models)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.streamed or n >= 10_000_000:
        streamed(n, p, args)
        return
    args.repeat = args.repeat or 3
    data = OUT / f"battles_{n}_{p}.parquet"
    if not data.exists():
        print(f"generating {n:,} battles among {p} models -> {data}", flush=True)
        generate(data, n, p)
    python = sys.executable
    ours = [python, "-m", "ratings.cli", str(data), "--format", "json"]
    sandwich_out, boot_out = OUT / "ours_sandwich.json", OUT / "ours_bootstrap.json"
    timed([*ours, "--output", str(sandwich_out)])  # warm the page cache and .pyc files
    rows = []
    boot = [*ours, "--ci", "bootstrap", "--rounds", "100", "--output", str(boot_out)]
    for name, command in (
        ("ours: style control + sandwich", [*ours, "--output", str(sandwich_out)]),
        ("ours: style control + bootstrap x100", boot),
    ):
        runs = sorted(timed(command) for _ in range(args.repeat))
        rows.append((f"{name} (median of {args.repeat})", *runs[len(runs) // 2]))
    theirs = None
    if not args.skip_arena_rank:
        arena_python = arena_rank_python()
        runner = OUT / "arena_rank_runner.py"
        runner.write_text(ARENA_RUNNER)
        theirs_out = OUT / "arena_rank.json"
        theirs_run = timed([str(arena_python), str(runner), str(data), str(theirs_out)])
        rows.append(("arena-rank: style control + sandwich", *theirs_run))
        theirs = json.loads(theirs_out.read_text())

    print(f"\n{n:,} battles, {p} models, {os.cpu_count()} CPUs\n")
    print(f"{'run':<52} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
    for name, seconds, cpu, mem in rows:
        print(f"{name:<52} {seconds:>8.2f} {cpu:>8.2f} {mem:>9.0f}")
    result = json.loads(sandwich_out.read_text())
    if theirs is not None:
        ratio = rows[2][1] / rows[0][1]
        cpu_ratio = rows[2][2] / rows[0][2]
        ours_ratings = {m["model"]: m["rating"] for m in result["models"]}
        diff = max(abs(ours_ratings[k] - v) for k, v in theirs["ratings"].items())
        coef = max(abs(result["style_coefficients"][k] - v) for k, v in theirs["coeffs"].items())
        print(
            f"\narena-rank time / ours (sandwich): {ratio:.1f}x wall, {cpu_ratio:.1f}x CPU"
            "  (target >= 10x)"
        )
        print(f"largest rating difference, ours vs arena-rank: {diff:.4f} Elo points")
        print(f"largest style coefficient difference: {coef:.2e} logits")
    print(f"bootstrap x100 under 6 s: {'yes' if rows[1][1] < 6 else 'NO'} ({rows[1][1]:.2f} s)")
    peak = max(r[3] for r in rows[:2])
    print(f"our peak memory under 1 GiB: {'yes' if peak < 1024 else 'NO'} ({peak:.0f} MiB)")
    print(
        f"our Newton iterations (sandwich fit): {result['method']['iterations']}, "
        f"gradient max-norm {result['method']['gradient_max_norm']:.1e}"
    )


def streamed(n: int, p: int, args: argparse.Namespace) -> None:
    """The batch-by-batch fit on a file generated in row groups, against the targets."""
    data = OUT / f"stream_{n}_{p}_seed{args.seed}.parquet"
    if not data.exists():
        print(f"generating {n:,} battles among {p} models in row groups -> {data}", flush=True)
        started = time.perf_counter()
        generate_chunked(data, n, p, args.seed)
        print(f"generated in {time.perf_counter() - started:.0f} s", flush=True)
    repeat = args.repeat or (1 if n >= 50_000_000 else 3)
    base = [sys.executable, "-m", "ratings.cli", str(data), "--format", "json"]
    streamed_out, memory_out = OUT / f"stream_{n}_streamed.json", OUT / f"stream_{n}_memory.json"
    command = [*base, "--streamed", "--output", str(streamed_out)]
    if repeat > 1:
        timed(command)  # warm the page cache and .pyc files
    runs = sorted(timed(command) for _ in range(repeat))
    rows = [(f"ours, streamed: style control + sandwich (median of {repeat})", *runs[repeat // 2])]
    if n <= args.memory_limit:
        rows.append(
            (
                "ours, in memory: style control + sandwich",
                *timed([*base, "--output", str(memory_out)]),
            )
        )
    size = data.stat().st_size / 2**30
    print(f"\n{n:,} battles, {p} models, {os.cpu_count()} CPUs, file {size:.2f} GiB\n")
    print(f"{'run':<58} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
    for name, seconds, cpu, mem in rows:
        print(f"{name:<58} {seconds:>8.2f} {cpu:>8.2f} {mem:>9.0f}")
    result = json.loads(streamed_out.read_text())
    print(
        f"\nstreamed fit: {result['method']['iterations']} Newton iterations, "
        f"gradient max-norm {result['method']['gradient_max_norm']:.1e}"
    )
    if len(rows) > 1:
        memory = json.loads(memory_out.read_text())
        ours = {m["model"]: m for m in result["models"]}
        diff = max(
            abs(ours[m["model"]][key] - m[key])
            for m in memory["models"]
            for key in ("rating", "rating_lower", "rating_upper")
        )
        print(f"largest difference streamed vs in memory (ratings and bounds): {diff:.1e} Elo")
        print(f"in-memory time / streamed: {rows[1][1] / rows[0][1]:.2f}x wall")
    target = STREAM_TARGETS.get(n)
    if target is not None:
        seconds, mib = target
        wall, peak = rows[0][1], rows[0][3]
        print(
            f"target {seconds:.0f} s: {'yes' if wall <= seconds else 'NO'} ({wall:.1f} s); "
            f"target {mib / 1024:.1f} GiB: {'yes' if peak <= mib else 'NO'} ({peak:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
