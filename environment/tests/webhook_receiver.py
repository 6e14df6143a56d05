"""A loopback HTTP server that receives webhook deliveries (http.server in a thread)."""

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers.get("x-arena-signature", ""), expected)


@dataclass
class WebhookReceiver:
    """Answers each POST with ``statuses.pop(0)`` (200 once the list is empty), with
    ``answer_headers`` and ``answer_body``."""

    statuses: list[int] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    answer_headers: dict[str, str] = field(default_factory=dict)
    answer_body: bytes = b""

    def __enter__(self) -> "WebhookReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.deliveries.append(
                    Delivery({k.lower(): v for k, v in self.headers.items()}, body)
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                for name, value in receiver.answer_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(receiver.answer_body)))
                self.end_headers()
                try:
                    self.wfile.write(receiver.answer_body)
                except OSError:
                    pass  # the client read what it wanted and left

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hook"
