"""Whole live battles, closed loop, on several hosts: two web nodes behind a proxy against one.

The shape of tests/multihost.py (network namespaces on this machine, root needed): PostgreSQL
and Redis of their own on ``db``, the Celery workers on ``worker``, beat on ``beat``, uvicorn
(``bin/serve``, ``--web-workers`` each) on ``web1`` and ``web2``, and tests/tcp_proxy.py on
``proxy`` (round robin per connection). The fake upstream (bench/battles.py's) runs in the root
namespace on the bridge, as does this client.

In one run, the same closed-loop load as bench/battles.py (N visitors, each: page, terms,
challenge, websocket; then battle -> every frame to ``turn_end`` -> vote -> next battle, no
think time), each window after a warm-up that reaches both nodes:

1. against one web node directly (``web1``'s address, no proxy): the anchor;
2. through the proxy to both web nodes.

Printed for each: battles/s (votes acknowledged in the window), TTFT, overhead over the direct
stream, and vote round trip p50/p99, errors, votes acknowledged versus rows in ``arena_vote``
for those battles, uvicorn CPU per battle (both nodes), the connections PostgreSQL holds for
the site once the window has run (the pools' and the workers') and Redis's memory; then the
ratio of battles/s, two nodes over one. Every host shares this machine's cores: two nodes on two
cores show that the shape scales out without losing or doubling a vote and what the proxy's hop
costs, not the throughput two machines would reach. The settings bench/battles.py changes for a
closed loop (limits and caps) are changed here too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.battles import (  # noqa: E402
    BENCH_ENV,
    LIVE_MODELS,
    UPSTREAM,
    direct_stream_ms,
    row,
    run_level,
)
from bench.shape import BIN, stored_votes  # noqa: E402
from tests.multihost import Cluster, unavailable  # noqa: E402


class Hosts:
    """Every host's processes as one for ``Cpu.now``: CPU seconds by process name, summed."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def cpu_seconds(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for shape in self.cluster.nodes.values():
            for name, seconds in shape.cpu_seconds().items():
                totals[name] = totals.get(name, 0.0) + seconds
        return totals


def measure(
    label: str,
    base: str,
    cluster: Cluster,
    visitors: int,
    warmup: float,
    seconds: float,
    direct_ms: float,
) -> dict:
    import uvloop

    level, used = uvloop.run(run_level(base, visitors, warmup, seconds, Hosts(cluster)))  # type: ignore[arg-type]
    for role, shape in cluster.nodes.items():
        shape.check_alive(f"the {label} run ({role})")
    stored = stored_votes(cluster.postgres, [d.battle_id for d in level.done])  # type: ignore[arg-type]
    result = row(level, used, seconds, direct_ms, stored)
    result["label"] = label
    # Sizing: the connections the pools hold once the load has run, and Redis's memory.
    result["pg_connections"] = cluster.postgres.query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", cluster.postgres.database
    )[0][0]
    with cluster.redis.client() as client:
        memory = client.info("memory")
    result["redis_mb"] = memory["used_memory"] / 2**20
    result["redis_peak_mb"] = memory["used_memory_peak"] / 2**20
    print(
        f"{label}: {visitors} visitors, {result['battles_per_s']:.1f} battles/s, TTFT p50/p99 "
        f"{result['ttft_p50']:.0f}/{result['ttft_p99']:.0f} ms, overhead p50/p99 "
        f"{result['overhead_p50']:.0f}/{result['overhead_p99']:.0f} ms, vote p50/p99 "
        f"{result['vote_p50']:.0f}/{result['vote_p99']:.0f} ms, errors "
        f"{result['error_kinds'] or 0}, acked/in DB {result['acknowledged']}/{result['stored']}, "
        f"uvicorn CPU {result['web_cpu_ms']:.1f} ms/battle; PostgreSQL connections "
        f"{result['pg_connections']}, Redis {result['redis_mb']:.1f} MiB (peak "
        f"{result['redis_peak_mb']:.1f}); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--visitors", type=int, default=20, help="closed-loop visitors")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--web-workers", type=int, default=1, help="uvicorn workers per node")
    parser.add_argument("--tokens", type=int, default=26, help="content chunks per answer")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--quick", action="store_true", help="10 visitors for 8 s")
    args = parser.parse_args()
    if args.quick:
        args.visitors, args.seconds = 10, 8.0
    reason = unavailable()
    if reason:
        sys.exit(f"bench/multihost.py {reason}")

    import uvloop

    started = time.monotonic()
    cluster = Cluster(settings=BENCH_ENV, web_workers=args.web_workers)
    upstream: subprocess.Popen[str] | None = None
    results = []
    try:
        cluster.start()
        upstream = subprocess.Popen(
            [
                str(BIN / "python"),
                "-c",
                UPSTREAM.format(
                    root=str(ROOT),
                    host=cluster.network.gateway,
                    tokens=args.tokens,
                    delay=args.delay,
                ),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert upstream.stdout is not None
        upstream_url = f"http://{cluster.network.gateway}:{int(upstream.stdout.readline())}/v1"
        for slug in LIVE_MODELS:
            cluster.worker.manage(
                "add_model",
                f"--slug={slug}",
                f"--provider-url={upstream_url}",
                f"--upstream-model={slug}",
            )
        direct_ms = uvloop.run(direct_stream_ms(upstream_url))
        print(
            f"hosts on {cluster.network.prefix}.0/24, {args.web_workers} uvicorn worker(s) per "
            f"node; settings changed for the bench: {BENCH_ENV}; fake upstream {args.tokens} "
            f"chunks {args.delay} s apart, direct stream {direct_ms:.0f} ms; set up in "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )
        # Warm-up: a new connection per request, through the proxy, so both nodes' workers
        # import what a page, a battle and a vote need.
        uvloop.run(run_level(cluster.proxy_url, 8, 0.0, 6.0, Hosts(cluster), force_close=True))  # type: ignore[arg-type]
        results.append(
            measure(
                "one web node (web1, direct)",
                cluster.url("web1"),
                cluster,
                args.visitors,
                args.warmup,
                args.seconds,
                direct_ms,
            )
        )
        results.append(
            measure(
                "two web nodes (web1 + web2, through the proxy)",
                cluster.proxy_url,
                cluster,
                args.visitors,
                args.warmup,
                args.seconds,
                direct_ms,
            )
        )
    finally:
        if upstream is not None:
            upstream.send_signal(signal.SIGTERM)
            upstream.wait(timeout=15)
        cluster.close()
    one, two = results
    print()
    print(
        f"Closed loop, {args.visitors} visitors, window {args.seconds:g} s after "
        f"{args.warmup:g} s; {time.monotonic() - started:.0f} s in all."
    )
    print(
        "| shape | battles/s | TTFT p50/p99 ms | overhead p50/p99 ms | vote p50/p99 ms "
        "| errors | acked / in DB | uvicorn CPU ms/battle | PostgreSQL connections | Redis MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['label']} | {r['battles_per_s']:.1f} "
            f"| {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} "
            f"| {r['overhead_p50']:.0f} / {r['overhead_p99']:.0f} "
            f"| {r['vote_p50']:.0f} / {r['vote_p99']:.0f} | {r['errors']} "
            f"| {r['acknowledged']} / {r['stored']} | {r['web_cpu_ms']:.1f} "
            f"| {r['pg_connections']} | {r['redis_mb']:.1f} |"
        )
    ratio = two["battles_per_s"] / one["battles_per_s"] if one["battles_per_s"] else float("nan")
    lost = sum(r["acknowledged"] - r["stored"] for r in results)
    print(
        f"Two nodes through the proxy vs one node direct: {ratio:.2f}x battles/s; votes "
        f"acknowledged but not stored: {lost}; machine load (1 min) {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs (every host shares them)."
    )


if __name__ == "__main__":
    main()
