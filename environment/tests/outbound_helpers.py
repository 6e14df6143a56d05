"""The network edge of the guarded client (environment.outbound) in tests: a stub resolver, and a
loopback listener that records every connection made to it."""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from environment.outbound import OutboundUnresolved

LOOPBACK_ALLOWED = {
    "ARENA_ENV_WEBHOOK_ALLOW_HOSTS": ["127.0.0.1/32"],
    "ARENA_ENV_WEBHOOK_ALLOW_HTTP": True,
}


@dataclass
class StubResolver:
    """Answers the names in ``names`` (a name: its addresses); any other name does not resolve.
    The names may be changed between calls (DNS that changes after a check)."""

    names: dict[str, list[str]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.names:
            raise OutboundUnresolved(f"the host {host!r} does not resolve")
        return list(self.names[host])


@dataclass
class Listener:
    """A TCP server on a loopback address that counts the connections it accepts (and answers
    none of them)."""

    host: str = "127.0.0.1"
    connections: int = 0

    def __post_init__(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((self.host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> int:
        """Stop listening; the connections accepted, those still in the backlog included."""
        self._stop.set()
        self._thread.join()
        self.sock.setblocking(False)
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                break
            self.connections += 1
            conn.close()
        self.sock.close()
        return self.connections


@contextmanager
def listening(host: str = "127.0.0.1") -> Iterator[Listener]:
    listener = Listener(host)
    try:
        yield listener
    finally:
        listener.close()
