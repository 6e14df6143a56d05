"""A real OpenAI-compatible HTTP server on loopback, with configurable pacing and faults.

It speaks ``POST /v1/chat/completions`` (streamed as server-sent events in HTTP/1.1 chunks, or
as one JSON body), keeps connections alive like a real server, and records every request and
whether the client closed the connection before the answer was complete. Behaviour is chosen
per upstream model name with :class:`FakeModel`::

    with FakeUpstream({"m-slow": FakeModel(tokens=50, delay=0.05)}) as upstream:
        client = AsyncOpenAI(base_url=upstream.url, api_key="x")

It also speaks ``POST /v1/moderations``: an input holding any of ``flagged_words`` (a
case-insensitive substring) is flagged (category ``harassment``); the ``model`` of the request
picks its :class:`FakeModel`, whose ``http_400``/``http_500`` and ``hang`` faults apply.

A whole answer of a ``numbered`` model ends with its number (each answer another text), and a
model's ``fail_on`` text fails each request that holds it with an HTTP 500. A model's ``reply``
scripts its answer from the conversation: a function of the request's messages returning the
text, streamed word by word (for instance, a model that gives in on the third turn).

Faults: ``error_midstream`` (an error event after ``fail_after`` tokens), ``http_500``, ``hang``
(after ``fail_after`` tokens, nothing more is sent, the connection stays open), ``endless``
(tokens forever, until the client goes away).

With ``stamp=True`` every token is ``"<monotonic ns at emit> "``, so a reader in another process
of the same machine can measure the relay delay (CLOCK_MONOTONIC is system-wide on Linux).

The server runs on its own event loop in a thread (:meth:`FakeUpstream.start`) or on the
caller's loop (:meth:`FakeUpstream.serve`, as the benchmark's upstream process does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

FAULTS = ("none", "error_midstream", "garbage_midstream", "http_400", "http_500", "hang", "endless")
_SHORT_PAUSE = 0.25  # seconds; a longer pause also ends as soon as the client goes


@dataclass
class FakeModel:
    tokens: int | list[str] = 8
    delay: float = 0.0  # seconds between tokens
    first_delay: float = 0.0  # seconds before the first token
    fault: str = "none"
    fail_after: int = 2  # tokens sent before error_midstream / hang
    stamp: bool = False
    finish_reason: str = "stop"
    usage: bool = True  # report token usage when the client asks for it
    # A whole (non-streamed) answer ends with its number among the model's answers, " (2)",
    # as sampling at a temperature above 0 gives another text each time.
    numbered: bool = False
    # An HTTP 500 for a request any of whose messages holds this text (one prompt failing).
    fail_on: str = ""
    # The answer as a function of the request's messages (None: ``tokens``).
    reply: Callable[[list[dict[str, Any]]], str] | None = None
    answered: int = 0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")

    def token(self, index: int) -> str:
        if self.stamp:
            return f"{time.monotonic_ns()} "
        if isinstance(self.tokens, list):
            return self.tokens[index]
        return f"tok{index} "

    def count(self) -> int:
        return len(self.tokens) if isinstance(self.tokens, list) else self.tokens


@dataclass
class FakeRequest:
    body: dict[str, Any]
    headers: dict[str, str]
    completed: bool = False
    disconnected: bool = False
    tokens_sent: int = 0
    closed: threading.Event = field(default_factory=threading.Event)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def content_parts(self) -> list[dict[str, Any]]:
        """Every content part received, in order: those of messages whose content is a list of
        parts (OpenAI's multi-modal messages), and of a moderation input given as parts."""
        parts: list[dict[str, Any]] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                parts += [p for p in content if isinstance(p, dict)]
        moderated = self.body.get("input")
        if isinstance(moderated, list):
            parts += [p for p in moderated if isinstance(p, dict)]
        return parts

    @property
    def image_urls(self) -> list[str]:
        """The URLs of the ``image_url`` parts received (data URLs from the arena)."""
        return [
            str((p.get("image_url") or {}).get("url", ""))
            for p in self.content_parts
            if p.get("type") == "image_url"
        ]


class _ClientGone(Exception):
    pass


class FakeUpstream:
    def __init__(
        self,
        models: dict[str, FakeModel] | None = None,
        *,
        default: FakeModel | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
    ) -> None:
        self.models = dict(models or {})
        self.default = default or FakeModel()
        self.host = host
        self.port = port
        self.record = record
        self.requests: list[FakeRequest] = []
        self.flagged_words: tuple[str, ...] = ()
        # Whether a moderation input with an image part is flagged (category sexual).
        self.flag_images = False
        # When set, a request without ``Authorization: Bearer <api_key>`` is refused with 401,
        # as OpenAI refuses a wrong key.
        self.api_key: str | None = None
        # Whether ``GET /models`` answers (some OpenAI-compatible servers have no such route).
        self.lists_models = True
        self.model_lists = 0  # ``GET /models`` requests answered or refused
        self._lock = threading.Lock()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def serve(self) -> asyncio.Server:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self._server

    def start(self) -> FakeUpstream:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.serve())
            self._started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-openai", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("fake upstream did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        loop, server = self._loop, self._server

        async def shutdown() -> None:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests look at ---------------------------------------------------------------
    def requests_for(self, model: str) -> list[FakeRequest]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    def wait_closed(self, model: str, timeout: float = 10.0) -> FakeRequest:
        """The latest request for ``model``, once its connection has ended one way or another."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.requests_for(model)
            if found and found[-1].closed.wait(0.05):
                return found[-1]
            time.sleep(0.02)
        raise AssertionError(f"no finished request for {model} within {timeout}s")

    # --- HTTP -------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carry = b""
        try:
            while True:
                head = carry + await reader.readuntil(b"\r\n\r\n")
                carry = b""
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(length) if length else b""
                if method == "GET" and path.rstrip("/").endswith("/models"):
                    self.model_lists += 1
                if self.api_key is not None and headers.get("authorization") != (
                    f"Bearer {self.api_key}"
                ):
                    await self._send_json(
                        writer,
                        401,
                        {
                            "error": {
                                "message": "Incorrect API key provided.",
                                "type": "invalid_request_error",
                                "code": "invalid_api_key",
                            }
                        },
                    )
                    continue
                if method == "GET" and path.rstrip("/").endswith("/models") and self.lists_models:
                    listed = [
                        {"id": name, "object": "model", "created": 0, "owned_by": "fake"}
                        for name in self.models
                    ]
                    await self._send_json(writer, 200, {"object": "list", "data": listed})
                    continue
                if method == "POST" and path.rstrip("/").endswith("/moderations"):
                    request = FakeRequest(body=json.loads(raw or b"{}"), headers=headers)
                    if self.record:
                        with self._lock:
                            self.requests.append(request)
                    await self._moderate(reader, writer, request)
                    continue
                if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
                    await self._send_json(writer, 404, {"error": {"message": "not found"}})
                    continue
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    await self._send_json(writer, 400, {"error": {"message": "bad json"}})
                    continue
                request = FakeRequest(body=body, headers=headers)
                if self.record:
                    with self._lock:
                        self.requests.append(request)
                try:
                    keep, carry = await self._answer(reader, writer, request)
                finally:
                    request.closed.set()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, _ClientGone):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            500: "Internal Server Error",
        }
        writer.write(
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: keep-alive\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _moderate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: FakeRequest
    ) -> None:
        """One moderation answer (OpenAI's shape), or the model's fault."""
        spec = self.models.get(request.model, self.default)
        if spec.fault in ("http_400", "http_500"):
            status = int(spec.fault[-3:])
            await self._send_json(writer, status, {"error": {"message": "moderation failed"}})
            return
        if spec.fault == "hang":
            await reader.read(1)  # until the client gives up and closes the connection
            raise _ClientGone
        inputs = request.body.get("input", "")
        if isinstance(inputs, list) and all(isinstance(i, dict) for i in inputs) and inputs:
            # Multi-modal input (content parts): one result for the whole of it, as OpenAI's.
            texts = [" ".join(str(p.get("text", "")) for p in inputs if p.get("type") == "text")]
            images = any(p.get("type") == "image_url" for p in inputs)
        else:
            texts = inputs if isinstance(inputs, list) else [inputs]
            images = False
        results = []
        for text in texts:
            flagged = any(word.lower() in str(text).lower() for word in self.flagged_words)
            flagged = flagged or (images and self.flag_images)
            results.append(
                {
                    "flagged": flagged,
                    "categories": {"harassment": flagged, "violence": False},
                    "category_scores": {"harassment": 0.99 if flagged else 0.01, "violence": 0.0},
                    "category_applied_input_types": {"harassment": ["text"], "violence": ["text"]},
                }
            )
        answer = {"id": "modr-fake", "model": request.model, "results": results}
        await self._send_json(writer, 200, answer)
        request.completed = True

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: FakeRequest
    ) -> tuple[bool, bytes]:
        """Answer one request; returns whether the connection stays open, and any byte of the
        client's next request that the disconnect watch read."""
        spec = self.models.get(request.model, self.default)
        if spec.reply is not None:
            # Word by word, each word with the spaces that follow it.
            words = re.findall(r"\S+\s*|\s+", spec.reply(request.messages)) or [""]
            spec = replace(spec, tokens=words, reply=None)
        fails_here = bool(spec.fail_on) and any(
            spec.fail_on in str(m.get("content", "")) for m in request.messages
        )
        if spec.fault in ("http_400", "http_500") or fails_here:
            status = 500 if fails_here else int(spec.fault[-3:])
            message = "context length exceeded" if status == 400 else "upstream exploded"
            kind = "invalid_request_error" if status == 400 else "server_error"
            await self._send_json(writer, status, {"error": {"message": message, "type": kind}})
            request.completed = True
            return True, b""
        # The client sends nothing more while its answer streams, so any read that returns
        # means it closed the connection.
        gone = asyncio.ensure_future(reader.read(1))
        gone.add_done_callback(lambda f: f.cancelled() or f.exception())  # a reset is expected
        try:
            if request.body.get("stream"):
                await self._stream(writer, request, spec, gone)
            else:
                await self._whole(writer, request, spec, gone)
        except _ClientGone:
            request.disconnected = True
            return False, b""
        finally:
            if not gone.done():
                gone.cancel()
                # let the cancelled read finish before the next request is read
                await asyncio.wait({gone})
        request.completed = True
        carry = b""
        if gone.done() and not gone.cancelled() and gone.exception() is None:
            carry = gone.result()
            if not carry:  # EOF right after the answer: the client closed, nothing to carry
                return False, b""
        return True, carry

    async def _pause(self, seconds: float, gone: asyncio.Future[bytes]) -> None:
        if gone.done():
            raise _ClientGone
        if seconds <= 0:
            return
        if seconds <= _SHORT_PAUSE:
            # The pause between tokens: a plain sleep costs a fraction of a wait on the watch
            # (which the benchmark's upstream does thousands of times a second); a client that
            # goes meanwhile is noticed when it ends.
            await asyncio.sleep(seconds)
            if gone.done():
                raise _ClientGone
            return
        done, _ = await asyncio.wait({gone}, timeout=seconds)
        if done:
            raise _ClientGone

    async def _write(
        self, writer: asyncio.StreamWriter, data: bytes, gone: asyncio.Future[bytes]
    ) -> None:
        if gone.done() or writer.is_closing():
            raise _ClientGone
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        try:
            await writer.drain()
        except ConnectionError:
            raise _ClientGone from None

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        request: FakeRequest,
        spec: FakeModel,
        gone: asyncio.Future[bytes],
    ) -> None:
        body = request.body
        model = request.model
        created = int(time.time())
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created}
        base["model"] = model

        def event(obj: Any) -> bytes:
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return event({**base, "choices": [choice]})

        if spec.fault == "hang" and spec.fail_after == 0:
            await self._pause(3600, gone)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: keep-alive\r\n\r\n"
        )
        await self._pause(spec.first_delay, gone)
        await self._write(writer, chunk({"role": "assistant", "content": ""}), gone)
        limit = spec.count()
        index = 0
        while spec.fault == "endless" or index < limit:
            if index and spec.delay:
                await self._pause(spec.delay, gone)
            if spec.fault == "error_midstream" and index == spec.fail_after:
                err = {"error": {"message": "model crashed mid-answer", "type": "server_error"}}
                await self._write(writer, event(err), gone)
                await self._write(writer, b"", gone)
                return
            if spec.fault == "garbage_midstream" and index == spec.fail_after:
                # Not the protocol at all: a data line that is not JSON, then the stream ends.
                await self._write(writer, b"data: {not json\n\n", gone)
                await self._write(writer, b"", gone)
                return
            if spec.fault == "hang" and index == spec.fail_after:
                await self._pause(3600, gone)
            await self._write(writer, chunk({"content": spec.token(index)}), gone)
            index += 1
            request.tokens_sent = index
        finish = spec.finish_reason
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if max_tokens and limit > int(max_tokens):
            finish = "length"
        await self._write(writer, chunk({}, finish), gone)
        if spec.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": _count_prompt(body), "completion_tokens": index}
            usage["total_tokens"] = usage["prompt_tokens"] + index
            await self._write(writer, event({**base, "choices": [], "usage": usage}), gone)
        await self._write(writer, b"data: [DONE]\n\n", gone)
        await self._write(writer, b"", gone)

    async def _whole(
        self,
        writer: asyncio.StreamWriter,
        request: FakeRequest,
        spec: FakeModel,
        gone: asyncio.Future[bytes],
    ) -> None:
        if spec.fault in ("hang", "endless"):
            await self._pause(3600, gone)
        await self._pause(spec.first_delay + spec.delay * spec.count(), gone)
        text = "".join(spec.token(i) for i in range(spec.count()))
        spec.answered += 1
        if spec.numbered:
            text += f" ({spec.answered})"
        message = {"role": "assistant", "content": text}
        await self._send_json(
            writer,
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": _count_prompt(request.body),
                    "completion_tokens": spec.count(),
                    "total_tokens": _count_prompt(request.body) + spec.count(),
                },
            },
        )


def _count_prompt(body: dict[str, Any]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
