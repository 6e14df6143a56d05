"""Atropos' own API server (``atroposlib.api.server.app``, FastAPI) on a loopback port in this
process, and the trainer's side of its protocol (``/register``, ``/batch``), for the Atropos
script and tests. The app keeps its state in a module-level object: it is reset on entry."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def call(url: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
        raw = response.read()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


@contextmanager
def atropos_api() -> Iterator[str]:
    """The API server's base URL while the block runs."""
    import uvicorn
    from atroposlib.api.server import app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("Atropos' API server did not start")
        time.sleep(0.02)
    try:
        call(url, "/reset_data")
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def register_trainer(url: str, *, batch_size: int, num_steps: int, max_token_len: int = 512) -> Any:
    """What a trainer sends first; its first ``/batch`` then lets environments register."""
    answer = call(
        url,
        "/register",
        {
            "wandb_group": "arena",
            "wandb_project": "arena",
            "batch_size": batch_size,
            "max_token_len": max_token_len,
            "checkpoint_dir": "",
            "save_checkpoint_interval": -1,
            "starting_step": 0,
            "num_steps": num_steps,
        },
    )
    call(url, "/batch")
    return answer


def pull_batch(url: str) -> list[dict[str, Any]] | None:
    """A trainer's batch: groups adding up to its ``batch_size`` sequences, or ``None``."""
    batch = call(url, "/batch")["batch"]
    return None if batch is None else list(batch)
