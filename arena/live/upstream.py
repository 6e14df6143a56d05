"""Streaming one answer from an OpenAI-compatible chat-completions endpoint.

Calls go through the ``openai`` package's async client: base URL and key per provider (the key
read from the environment variable the provider names), the model's generation parameters and
system prompt, connect and read timeouts. The client's own retries are off: a call is retried
here only for a connection failure before the first token, never once text has been shown.

Nothing here touches the database; the caller passes an :class:`UpstreamTarget` built from the
models and receives an :class:`Answer` that is filled in as the stream goes, so whatever was
produced survives a cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arena.inputs import text_storable
from arena.payloads import MessageStatus

if TYPE_CHECKING:
    import openai

    from arena.models import ArenaModel

# The openai client and its HTTP stack (about 50 MB) are imported by the functions below, on a
# worker's first live answer: a worker that only serves pages, pool battles and votes never
# loads them.

# Parameters the chat-completions call takes by name; anything else goes in the request body
# as is (e.g. vLLM's top_k), so a provider's own extensions keep working.
_NAMED_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "stop",
        "logit_bias",
        "n",
    }
)
_NO_KEY = "sk-no-key"  # local servers (vLLM, Ollama) accept any key; the client wants one
_RETRY_BASE_SECONDS = 0.25
_MAX_CONNECTIONS = 100_000  # per endpoint and process

PUBLIC_ERRORS = {
    "timeout": "The model took too long to answer.",
    "connection": "The model could not be reached.",
    "upstream": "The model's server returned an error.",
    "config": "The model is not configured correctly.",
    "request": "The model's server refused this conversation (it may be too long).",
}
# Statuses that refuse one request (too long, filtered, malformed for this model) rather than
# say the provider is failing: the circuit breaker does not count them.
_REQUEST_REFUSALS = frozenset({400, 413, 422})
_FINISH_REASON_CHARS = 40  # BattleMessage.finish_reason's length


@dataclass(frozen=True)
class UpstreamTarget:
    """Everything needed to call one model, read from the database beforehand."""

    base_url: str
    api_key_env: str
    upstream_model: str
    params: dict[str, Any]
    system_prompt: str
    connect_timeout: float
    read_timeout: float
    max_retries: int
    provider_id: int | None = None

    @classmethod
    def for_model(cls, model: ArenaModel, *, max_retries: int | None = None) -> UpstreamTarget:
        """The target of a live model (one with a provider); ``max_retries`` defaults to the
        provider's."""
        provider = model.provider
        assert provider is not None  # noqa: S101  (only live models get here)
        return cls(
            base_url=provider.base_url,
            api_key_env=provider.api_key_env,
            upstream_model=model.upstream_model_id,
            params=dict(model.generation_params or {}),
            system_prompt=model.system_prompt,
            connect_timeout=provider.connect_timeout,
            read_timeout=provider.read_timeout,
            max_retries=provider.max_retries if max_retries is None else max_retries,
            provider_id=provider.pk,
        )


@dataclass
class Answer:
    """One side's answer as it streams; final once ``status`` is not ``streaming``."""

    parts: list[str] = field(default_factory=list)
    status: MessageStatus = "streaming"
    finish_reason: str = ""
    error: str = ""  # full detail, for the record and the admin
    # timeout | connection | upstream | config | request; the client sees only this
    error_kind: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    attempts: int = 0
    time_to_first_token_ms: int | None = None
    latency_ms: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def provider_failed(self) -> bool:
        """An error that counts against the provider's circuit breaker."""
        return self.status == "error" and self.error_kind != "request"

    @property
    def public_error(self) -> str:
        return PUBLIC_ERRORS.get(self.error_kind, "") if self.status == "error" else ""


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def _client(target: UpstreamTarget, api_key: str) -> openai.AsyncOpenAI:
    """One client (one connection pool) per endpoint, key and timeouts, per event loop."""
    import httpx2
    import openai

    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    key = (target.base_url, api_key, target.connect_timeout, target.read_timeout)
    client = per_loop.get(key)
    if client is None:
        timeout = httpx2.Timeout(
            target.read_timeout, connect=target.connect_timeout, pool=target.connect_timeout
        )
        client = openai.AsyncOpenAI(
            base_url=target.base_url,
            api_key=api_key,
            max_retries=0,
            timeout=timeout,
            # The aiohttp transport (openai's ``aiohttp`` extra): its C HTTP parser reads a
            # streamed chunk for about half the CPU of httpcore's h11 and anyio read timeouts,
            # and the relay spends most of a token's CPU reading it (bench/streaming.py).
            http_client=openai.DefaultAioHttpClient(
                timeout=timeout,
                # A streaming answer holds its connection throughout: no pool limit worth the
                # name (aiohttp reads None as its default of 100, which would queue the 101st).
                limits=httpx2.Limits(
                    max_connections=_MAX_CONNECTIONS, max_keepalive_connections=256
                ),
            ),
        )
        per_loop[key] = client
    return client


def _is_connection_failure(exc: BaseException) -> bool:
    """A failure to reach the server, as opposed to a slow or failing one."""
    import httpx2
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return isinstance(exc.__cause__, httpx2.ConnectTimeout | httpx2.PoolTimeout)
    return isinstance(exc, openai.APIConnectionError)


def _refused(exc: BaseException) -> bool:
    """Whether an operating-system error other than a timeout (refused, unreachable) caused it.

    The aiohttp transport reports a refused connection as a connect *timeout*; its cause chain
    still holds the ``ConnectionRefusedError`` (an ``OSError`` that is not a ``TimeoutError``).
    """
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__
    return False


def _classify(exc: BaseException) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return "connection" if _refused(exc) else "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.APIStatusError) and exc.status_code in _REQUEST_REFUSALS:
        return "request"
    return "upstream"


def request_kwargs(
    target: UpstreamTarget, history: Sequence[Mapping[str, Any]], max_tokens: int
) -> dict[str, Any]:
    messages = list(history)
    if target.system_prompt:
        messages.insert(0, {"role": "system", "content": target.system_prompt})
    params = dict(target.params)
    wanted = params.pop("max_tokens", None) or params.pop("max_completion_tokens", None)
    named = {k: v for k, v in params.items() if k in _NAMED_PARAMS}
    extra = {k: v for k, v in params.items() if k not in _NAMED_PARAMS}
    kwargs: dict[str, Any] = {
        "model": target.upstream_model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": min(int(wanted), max_tokens) if wanted else max_tokens,
        **named,
    }
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def request_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of the call that :func:`request_kwargs` describes (extra_body merged in)."""
    body = {k: v for k, v in kwargs.items() if k != "extra_body"}
    body.update(kwargs.get("extra_body") or {})
    return body


class UpstreamFailed(Exception):
    """The provider gave no answer to a whole (non-streamed) request; the message says why."""


def answer_whole(
    target: UpstreamTarget, history: Sequence[Mapping[str, Any]], *, max_tokens: int
) -> str:
    """One answer to ``history``, asked without streaming (the model's system prompt and
    generation parameters as a live battle's): for answers stored beforehand, such as the
    environment's reference answers and generated pool variants. One attempt per
    ``target.max_retries`` + 1. Raises ``UpstreamFailed`` (the text is never empty)."""
    import httpx2
    import openai

    api_key = _NO_KEY
    if target.api_key_env:
        api_key = os.environ.get(target.api_key_env, "")
        if not api_key:
            raise UpstreamFailed(f"environment variable {target.api_key_env} is not set")
    body: dict[str, Any] = request_body(request_kwargs(target, history, max_tokens))
    body.pop("stream", None)
    body.pop("stream_options", None)
    timeout = httpx2.Timeout(
        target.read_timeout, connect=target.connect_timeout, pool=target.connect_timeout
    )
    with openai.OpenAI(
        base_url=target.base_url,
        api_key=api_key,
        max_retries=target.max_retries,
        timeout=timeout,
    ) as client:
        try:
            response = client.post("/chat/completions", body=body, cast_to=object)
        except openai.OpenAIError as exc:
            raise UpstreamFailed(f"{type(exc).__name__}: {exc}"[:2000]) from exc
    try:
        content = response["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError) as exc:
        raise UpstreamFailed(f"malformed response: {type(exc).__name__}: {exc}") from exc
    if not isinstance(content, str) or not content.strip():
        raise UpstreamFailed("the answer is empty")
    return content


async def stream_answer(
    target: UpstreamTarget,
    history: Sequence[Mapping[str, Any]],
    *,
    answer: Answer,
    on_delta: Callable[[str], Awaitable[None]],
    max_tokens: int,
    deadline_seconds: float,
) -> Answer:
    """Stream one answer into ``answer``, calling ``on_delta`` with each piece of text.

    Ends with ``answer.status`` done, error or (when cancelled) aborted; a cancellation is
    re-raised after the HTTP response is closed, so the upstream sees the connection go.
    """
    if "openai" not in sys.modules:
        # A worker's first live answer: the import (about half a second) runs in a thread, so
        # that the answers already streaming on this event loop keep flowing meanwhile.
        await asyncio.to_thread(importlib.import_module, "openai")
    import openai

    started = time.monotonic()
    stream: Any = None
    try:
        api_key = _NO_KEY
        if target.api_key_env:
            api_key = os.environ.get(target.api_key_env, "")
            if not api_key:
                answer.status, answer.error_kind = "error", "config"
                answer.error = f"environment variable {target.api_key_env} is not set"
                return answer
        client = _client(target, api_key)
        body = request_body(request_kwargs(target, history, max_tokens))
        async with asyncio.timeout(deadline_seconds):
            while True:
                answer.attempts += 1
                try:
                    # The client's own request path (headers, timeouts, status errors, SSE
                    # decoding, error events), but each chunk stays the parsed JSON dict:
                    # building a ChatCompletionChunk model costs about 2/3 of the CPU of a
                    # token (bench/streaming.py), and only four fields are read here.
                    stream = await client.post(
                        "/chat/completions",
                        body=body,
                        cast_to=object,
                        stream=True,
                        stream_cls=openai.AsyncStream[object],
                    )
                    async for chunk in stream:
                        if not isinstance(chunk, dict):
                            continue
                        usage = chunk.get("usage")
                        if isinstance(usage, dict):
                            answer.prompt_tokens = _count(usage.get("prompt_tokens"))
                            answer.completion_tokens = _count(usage.get("completion_tokens"))
                        choices = chunk.get("choices")
                        if not choices:
                            continue
                        choice = choices[0]
                        delta = choice.get("delta")
                        text = delta.get("content") if isinstance(delta, dict) else None
                        if text and isinstance(text, str):
                            # Kept as shown and saved: no NUL or lone surrogate, which the
                            # database refuses (and would lose the whole answer).
                            text = text_storable(text)
                            if answer.time_to_first_token_ms is None:
                                answer.time_to_first_token_ms = _ms_since(started)
                            answer.parts.append(text)
                            answer.chunks += 1
                            await on_delta(text)
                            if answer.chunks > max_tokens:
                                # An upstream that ignores max_tokens is cut off here.
                                answer.finish_reason = "length"
                                break
                        finish = choice.get("finish_reason")
                        if finish and isinstance(finish, str):
                            answer.finish_reason = text_storable(finish)[:_FINISH_REASON_CHARS]
                    break
                except openai.APIConnectionError as exc:
                    retry = (
                        _is_connection_failure(exc)
                        and not answer.parts
                        and answer.attempts <= target.max_retries
                    )
                    if not retry:
                        raise
                    await _close(stream)
                    stream = None
                    await asyncio.sleep(_RETRY_BASE_SECONDS * 2 ** (answer.attempts - 1))
        answer.status = "done"
        answer.finish_reason = answer.finish_reason or "stop"
    except asyncio.CancelledError:
        answer.status = "aborted"
        raise
    except TimeoutError:
        answer.status, answer.error_kind = "error", "timeout"
        answer.error = f"no complete answer within {deadline_seconds:g}s"
    except openai.OpenAIError as exc:
        answer.status, answer.error_kind = "error", _classify(exc)
        answer.error = f"{type(exc).__name__}: {exc}"[:2000]
    except Exception as exc:
        # Not the protocol: a data line that is not JSON, a chunk of the wrong shape, an HTTP
        # response the transport could not parse. The server is at fault, not the visitor.
        answer.status, answer.error_kind = "error", "upstream"
        answer.error = f"malformed response: {type(exc).__name__}: {exc}"[:2000]
    finally:
        answer.latency_ms = _ms_since(started)
        if answer.completion_tokens is None and answer.chunks:
            answer.completion_tokens = answer.chunks
        await _close(stream)
    return answer


async def _close(stream: Any) -> None:
    """Close the HTTP response, even while being cancelled, so the connection is released.

    A cancellation that arrives while closing waits for the close to finish and is then
    raised again: swallowing it would let a stopped side go on (to a retry, say).
    """
    if stream is None:
        return
    closing = asyncio.ensure_future(stream.close())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.wait([closing])
        raise
    except Exception:  # noqa: S110  (closing a broken connection may fail; it is gone either way)
        pass


async def close_clients() -> None:
    """Close this event loop's clients and their connections (a test's or a server's end)."""
    clients = _clients.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        await client.close()


def _count(value: Any) -> int | None:
    """A token count the database can hold, or None for anything else an upstream sends."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    return None


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
