"""uvicorn's httptools HTTP protocol, with the bounds uvicorn lacks and the arena's error bodies.

uvicorn bounds neither how long a request's head (request line and headers) may take to arrive
nor, with httptools, how large it may be: its keep-alive timer runs only between requests, and
a client sending a header byte every few seconds holds its connection for ever (slowloris).
Here a head must be complete within ``ARENA_HTTP_HEADER_TIMEOUT_SECONDS`` of its first byte (or
of the connection's opening), and at most ``ARENA_HTTP_MAX_HEAD_BYTES`` long; and the requests
uvicorn refuses itself (a control character in a header, a malformed request line, a URL too
long to parse) are answered, under ``/api/`` and on downloads, in the arena's JSON error shape instead of
uvicorn's plain text. bin/serve selects it (``--http config.protocols:ArenaHttpToolsProtocol``).

Settings are read when the first connection is made: uvicorn imports this module before it
loads the application (which sets Django up).
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_LINGER_SECONDS = 2.0


class _HeadTooLarge(Exception):
    pass


class ArenaHttpToolsProtocol(HttpToolsProtocol):
    head_timeout: float | None = None  # ARENA_HTTP_HEADER_TIMEOUT_SECONDS, read once
    max_head_bytes: int = 0  # ARENA_HTTP_MAX_HEAD_BYTES, read once

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls = type(self)
        if cls.head_timeout is None:
            from django.conf import settings

            cls.head_timeout = float(settings.ARENA_HTTP_HEADER_TIMEOUT_SECONDS)
            cls.max_head_bytes = int(settings.ARENA_HTTP_MAX_HEAD_BYTES)
        self.in_head = False
        self.head_bytes = 0  # the head's URL and headers so far, as parsed
        self.head_raw = 0  # bytes received since the head began, while it is incomplete
        self.head_status = HTTPStatus.BAD_REQUEST
        self.head_timer: asyncio.TimerHandle | None = None
        self.lingering = False

    # --- the head's deadline and size ---------------------------------------------------------
    def _head_begins(self) -> None:
        self.in_head = True
        self.head_bytes = self.head_raw = 0
        self.head_status = HTTPStatus.BAD_REQUEST
        self._head_timer_cancel()
        if self.head_timeout:
            self.head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _head_timer_cancel(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if self.in_head and not self.transport.is_closing():
            self.logger.warning("Request head not complete in time; connection closed.")
            self._refuse(HTTPStatus.REQUEST_TIMEOUT, "The request's headers took too long.")

    def _count_head(self, size: int, status: HTTPStatus) -> None:
        self.head_bytes += size
        if self.max_head_bytes and self.head_bytes > self.max_head_bytes:
            self.head_status = status
            raise _HeadTooLarge

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_begins()  # until the first request's head is in

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer_cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # refused: what follows is dropped until the close
        super().data_received(data)
        if self.in_head and not self.transport.is_closing():
            # A head still incomplete after these bytes: the parser holds them meanwhile.
            self.head_raw += len(data)
            if self.max_head_bytes and self.head_raw > self.max_head_bytes:
                self._refuse(
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "The request's headers are too large.",
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self.in_head:  # the next request on a kept-alive connection
            self._head_begins()
        self.head_bytes = self.head_raw = 0  # counted from the head's first byte

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._count_head(len(url), HTTPStatus.REQUEST_URI_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._count_head(len(name) + len(value), HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._head_timer_cancel()
        super().on_headers_complete()

    # --- uvicorn's own refusals, in the arena's shape -----------------------------------------
    def send_400_response(self, msg: str) -> None:
        status = self.head_status
        if status == HTTPStatus.REQUEST_URI_TOO_LONG:
            message = "The request's URL is too long."
        elif status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            message = "The request's headers are too large."
        else:
            message = "The request is malformed (its request line or a header is invalid)."
        self._refuse(status, message)

    def _refuse(self, status: HTTPStatus, message: str) -> None:
        """Answer ``status`` and close: the arena's JSON error where Django's errors are JSON
        (``arena.api.path_errors_as_json``: under /api/ and on downloads), plain text elsewhere
        (a page's visitor reads it as it is)."""
        from arena.api import path_errors_as_json
        from arena.errors import ArenaError, ErrorCode

        self.in_head = False
        self._head_timer_cancel()
        url: bytes = getattr(self, "url", b"") or b""
        path = url.split(b"?", 1)[0].decode("latin-1")
        if path_errors_as_json(path):
            too_large = (
                HTTPStatus.REQUEST_URI_TOO_LONG,
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
            )
            if status in too_large:
                error = ArenaError(ErrorCode.REQUEST_TOO_LARGE, message, status=status)
            else:
                error = ArenaError(ErrorCode.BAD_REQUEST, message, status=status)
            body = json.dumps(error.as_dict()).encode()
            content_type = b"application/json"
        else:
            body = message.encode()
            content_type = b"text/plain; charset=utf-8"
        head = [b"HTTP/1.1 %d %s\r\n" % (status, status.phrase.encode())]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: " + content_type + b"\r\n")
        head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + body)
        # Closed for writing, then read and dropped for a moment before the close: a socket
        # closed with the client's bytes still unread is reset, and the reset can reach the
        # client before the answer it has not read yet.
        self.lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(_LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()
