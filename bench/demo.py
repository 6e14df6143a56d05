"""How long a newcomer waits for the demo: ``make demo`` on a fresh clone to its first page.

Clones the committed HEAD (and, with ``--anchor REV``, that revision too) into a temporary
folder, runs ``make demo`` there with the package caches off (``UV_NO_CACHE``,
``PIP_NO_CACHE_DIR``: every package is downloaded, as on a new machine), stamps each line the
command prints with the seconds since it started, and polls the page until it answers 200.
Prints each run's steps and the time to the first page, and the anchor's over HEAD's.

    .venv/bin/python bench/demo.py --anchor 5724157
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_SECONDS = 900


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def demo_run(revision: str) -> tuple[float, list[tuple[float, str]]]:
    """Seconds from ``make demo`` to the first page on a fresh clone of ``revision``, and the
    lines it printed with their times."""
    with tempfile.TemporaryDirectory(prefix="arena-demo-") as folder:
        clone = Path(folder) / "arena"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", revision], check=True)
        port = free_port()
        env = os.environ | {"UV_NO_CACHE": "1", "PIP_NO_CACHE_DIR": "1"}
        lines: list[tuple[float, str]] = []
        start = time.monotonic()
        process = subprocess.Popen(
            ["make", "demo", f"PORT={port}"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append((time.monotonic() - start, line.rstrip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            while not answers(f"http://127.0.0.1:{port}/"):
                if process.poll() is not None:
                    raise SystemExit(f"make demo exited with {process.returncode}")
                if time.monotonic() - start > LIMIT_SECONDS:
                    raise SystemExit(f"no page within {LIMIT_SECONDS} s")
                time.sleep(0.25)
            first_page = time.monotonic() - start
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
            reader.join(timeout=5)
        return first_page, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--anchor", help="a revision to measure the same way, for the ratio")
    args = parser.parse_args()
    runs = [("HEAD", "HEAD")] + ([("anchor", args.anchor)] if args.anchor else [])
    seconds = {}
    for name, revision in runs:
        first_page, lines = demo_run(revision)
        seconds[name] = first_page
        print(f"== {name} ({revision}): first page after {first_page:.1f} s")
        for at, line in lines:
            if line.startswith(("[", "Demo loaded", "Snapshot", "Arena demo")) or "pip" in line:
                print(f"{at:7.1f}  {line}")
    if "anchor" in seconds:
        print(f"anchor / HEAD: {seconds['anchor'] / seconds['HEAD']:.2f}x")


if __name__ == "__main__":
    main()
