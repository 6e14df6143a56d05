"""The one base of every arena websocket (the battle's, ``arena.live.consumer``, and the
red-teaming arena's, ``redteam.consumer``): admission, frame intake, the idle clock, the caps and
the close codes, written once so that every socket is bounded alike.

- Admission: the page's language is activated for the socket's frames; the session is loaded in
  the live battles' database threads (``runtime.db``) and the socket is counted against its
  address's cap, ``ARENA_WS_MAX_PER_ADDRESS``, one count for every kind of socket
  (``arena.live.sockets``); past the cap it is accepted only to be told why, then closed
  (``CLOSE_TOO_MANY_SOCKETS``).
- Frame intake: a frame over ``ARENA_WS_MAX_FRAME_BYTES`` is refused unread (``CLOSE_TOO_BIG``);
  any other is parsed (``arena.inputs.json_parse``) and must be a JSON object, then handed to
  the subclass's ``dispatch_frame``. An ``ArenaError`` becomes its error frame; anything else is
  logged with its traceback and answered with ``server_error``.
- The idle clock: a socket with no frame from the page and no turn streaming for
  ``ARENA_WS_IDLE_SECONDS`` is closed (``CLOSE_IDLE``); the pages open a new one when they next
  send a frame.
- No channel layer: nothing is sent to these sockets from elsewhere, so none subscribes to it
  (no Redis connection held in a blocking receive per open socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.utils import translation
from django.utils.translation import gettext

from arena.errors import ArenaError, ErrorCode, server_error, still_streaming
from arena.inputs import json_parse
from arena.live.runtime import db, socket_counts
from arena.live.sockets import SocketTicket, socket_admit, socket_release
from arena.live.upstream import Answer, UpstreamTarget, stream_answer
from arena.payloads import ErrorFrame

log = logging.getLogger(__name__)

# Close codes, in the range kept for applications (4000-4999), after the last 3 digits of the
# matching HTTP status; 1009 (message too big) is the protocol's own.
CLOSE_TOO_MANY_SOCKETS = 4429
CLOSE_IDLE = 4408
CLOSE_TOO_BIG = 1009


# The sockets' fixed error frames, built when sent so that they are in the socket's language.
def server_error_frame() -> ErrorFrame:
    return server_error().as_frame()


def frame_too_large_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.REQUEST_TOO_LARGE, gettext("The frame is too large."), status=413, field="frame"
    ).as_frame()


def too_many_sockets_frame() -> ErrorFrame:
    return ArenaError(
        ErrorCode.TOO_MANY_SOCKETS,
        gettext("Too many arena pages are open from your network; close some and reload this one."),
        status=429,
    ).as_frame()


def unknown_frame(kind: object) -> ArenaError:
    if isinstance(kind, str) and len(kind) <= 40:
        message = gettext("Unknown frame type %(type)s.") % {"type": repr(kind)}
    else:
        message = gettext("Unknown frame type.")
    return ArenaError(ErrorCode.INVALID, message, field="type")


def scope_language(scope: dict[str, Any]) -> str:
    """The language a page's socket speaks: as LocaleMiddleware chooses it for a request (the
    language cookie, else Accept-Language, else LANGUAGE_CODE), from the handshake's cookies
    (channels' CookieMiddleware, in the session stack) and headers."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies") or {})
    for name, value in scope.get("headers") or []:
        if name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return str(value.decode("latin-1"))  # as Django's ASGI request reads headers
    return None


def _session_key(session: Any) -> str:
    """The scope's session key, if it names a live session (a forged or expired cookie does not).

    Loading the session (from the cache or the database, by its backend) clears its key when no
    unexpired session has it, as Django's own session middleware finds it.
    """
    if session is None or not getattr(session, "session_key", None):
        return ""
    session.keys()  # loads it
    return str(session.session_key or "")


def _socket_open(
    session: Any, client_ip: str | None, opened: Callable[[str], None]
) -> tuple[str, SocketTicket | None]:
    """A new socket's session key (``opened`` is told it) and its place in its address's socket
    count (None: over the cap)."""
    session_key = _session_key(session)
    if session_key:
        opened(session_key)
    return session_key, socket_admit(client_ip)


class ArenaSocket(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """The base of the arena's sockets; a subclass answers frames (``dispatch_frame``) and may
    run one turn at a time in ``turn_task`` (streaming is not idling)."""

    channel_layer_alias = None

    async def connect(self) -> None:
        # Every frame this socket sends (error messages) is in the page's language: activated
        # in the consumer's own task, whose context its turn tasks and database threads copy.
        translation.activate(scope_language(self.scope))
        # The peer's address as the ASGI server reports it (behind a proxy, the server's
        # --forwarded-allow-ips makes it the visitor's): the key of the socket cap and of the
        # live-call rate limits.
        client = self.scope.get("client") or (None, None)
        self.client_ip: str | None = client[0]
        self.ticket: SocketTicket | None = None
        self.turn_task: asyncio.Task[None] | None = None
        self.connected = True
        self.send_lock = asyncio.Lock()
        self.tasks: set[asyncio.Task[None]] = set()
        self.max_frame_bytes: int = settings.ARENA_WS_MAX_FRAME_BYTES
        self.idle_seconds: float = settings.ARENA_WS_IDLE_SECONDS
        self.idle_timer: asyncio.TimerHandle | None = None
        # The session is loaded here, in the database threads (config/asgi.py: the socket's
        # stack loads no user, which nothing here reads), with the socket counted.
        self.session_key, self.ticket = await db(_socket_open)(
            self.scope.get("session"), self.client_ip, self.session_opened
        )
        await self.accept()
        if self.ticket is None:
            # Accepted first so that the page reads why before the close.
            await self._send(too_many_sockets_frame())
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        socket_counts().add(self.ticket)
        self._active()

    def session_opened(self, session_key: str) -> None:
        """Run in a database thread when a socket opens with a live session; nothing here."""

    async def disconnect(self, code: int) -> None:
        self.connected = False
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        await self._stop_turn()
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            socket_counts().remove(ticket)
            await db(socket_release)(ticket)

    def _hold(self, task: asyncio.Task[None]) -> None:
        self.tasks.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self.tasks.discard)

    # --- the idle clock ---------------------------------------------------------------------
    def _active(self) -> None:
        """The socket was used now (a frame came, a turn ended): its idle clock starts again."""
        self.active_at = asyncio.get_running_loop().time()
        if self.idle_timer is None and self.idle_seconds > 0 and self.connected:
            self.idle_timer = asyncio.get_running_loop().call_later(
                self.idle_seconds, self._idle_due
            )

    def _idle_due(self) -> None:
        loop = asyncio.get_running_loop()
        self.idle_timer = None
        if not self.connected:
            return
        if self._streaming():
            self.active_at = loop.time()  # streaming is not idling
        left = self.active_at + self.idle_seconds - loop.time()
        if left > 0:
            self.idle_timer = loop.call_later(left, self._idle_due)
            return
        self._hold(loop.create_task(self._close_idle()))

    async def _close_idle(self) -> None:
        if self.connected:
            await self.close(code=CLOSE_IDLE)

    # --- frame intake -----------------------------------------------------------------------
    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Dispatch one frame; a refused frame is answered with an error frame.

        An ``ArenaError`` is sent as its own frame (``as_frame``); any other exception raised
        while the frame is handled is logged with its traceback and answered with the generic
        ``server_error`` frame, so it neither closes the socket without a word nor skips
        ``disconnect`` (which cancels a turn's upstream calls). A cancellation is not caught.
        A turn streams in its own task, after this has returned: its failures end in frames of
        its own, not here.
        """
        self._active()
        if self._too_big(text_data, bytes_data):
            # Refused unread: the largest frame a page sends is far smaller (a start with the
            # longest prompt allowed), and parsing megabytes of JSON would hold the event loop.
            await self._send(frame_too_large_frame())
            await self.close(code=CLOSE_TOO_BIG)
            return
        try:
            if text_data is None:
                raise ArenaError(
                    ErrorCode.INVALID_FRAME,
                    gettext("Frames are JSON text, not binary."),
                    field="frame",
                )
            content = json_parse(text_data, what="The frame", field="frame")
            if not isinstance(content, dict):
                raise ArenaError(ErrorCode.INVALID, gettext("Frames are JSON objects with a type."))
            await self.dispatch_frame(content)
        except ArenaError as exc:
            await self._send(exc.as_frame())
        except Exception:
            log.exception("a websocket frame failed (%s)", type(self).__name__)
            await self._send(server_error_frame())

    async def dispatch_frame(self, content: dict[str, Any]) -> None:
        raise unknown_frame(content.get("type"))

    def _too_big(self, text: str | None, data: bytes | None) -> bool:
        """Whether a frame is over ``ARENA_WS_MAX_FRAME_BYTES`` (UTF-8 bytes, as on the wire)."""
        limit = self.max_frame_bytes
        if data is not None and len(data) > limit:
            return True
        if text is None or len(text) * 4 <= limit:  # 4 bytes a character at most
            return False
        return len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit

    # --- the turn in flight -----------------------------------------------------------------
    async def _stream(
        self,
        target: UpstreamTarget,
        history: Sequence[Mapping[str, Any]],
        max_tokens: int,
        answer: Answer,
        on_delta: Callable[[str], Awaitable[None]],
    ) -> None:
        """Stream one answer of a turn into ``answer`` (``arena.live.upstream``), within
        ``ARENA_LIVE_ANSWER_SECONDS``."""
        await stream_answer(
            target,
            history,
            answer=answer,
            on_delta=on_delta,
            max_tokens=max_tokens,
            deadline_seconds=settings.ARENA_LIVE_ANSWER_SECONDS,
        )

    def _streaming(self) -> bool:
        return self.turn_task is not None and not self.turn_task.done()

    def _refuse_while_streaming(self) -> None:
        if self._streaming():
            raise still_streaming(status=400)

    async def _stop_turn(self) -> None:
        task, self.turn_task = self.turn_task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # --- sending ----------------------------------------------------------------------------
    async def _send(self, frame: Mapping[str, Any]) -> None:
        """Send one frame, after anything the socket still holds back (``_send_held``)."""
        text = json.dumps(frame)
        async with self.send_lock:
            await self._send_held()
            await self._send_text(text)

    async def _send_held(self) -> None:
        """Send what the subclass buffers ahead of its next frame (the caller holds
        ``send_lock``); nothing here."""

    async def _send_text(self, text: str) -> None:
        if not self.connected:
            return
        try:
            await self.base_send({"type": "websocket.send", "text": text})
        except Exception:  # the socket went away; disconnect() does the cleanup
            self.connected = False
