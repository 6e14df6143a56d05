"""A scripted HTTP server on loopback for the client's tests (``http.server``, a real socket):
it answers each request with the next scripted answer and records what it received."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None


class ScriptedServer:
    """Answers requests from a queue per path prefix (the longest matching prefix wins);
    an unscripted request gets a 599 so that a test notices it."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: dict[str, list[Answer]] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with outer.lock:
                    outer.received.append(
                        Received(self.command, self.path, dict(self.headers.items()), body)
                    )
                    answer = outer._next(self.path)
                payload = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _next(self, path: str) -> Answer:
        matches = [p for p in self.script if path.startswith(p) and self.script[p]]
        if not matches:
            return Answer(599, {"error": {"code": "unscripted", "message": path}})
        return self.script[max(matches, key=len)].pop(0)

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, path: str, *answers: Answer) -> None:
        self.script.setdefault("/api/env/v1" + path, []).extend(answers)
