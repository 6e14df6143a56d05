"""The upstream client against the loopback fake: retries, parameters, usage."""

import asyncio
import socket

import pytest

from arena.live.upstream import Answer, UpstreamTarget, _close, request_kwargs, stream_answer
from arena.tests.fake_openai import FakeModel

# No database is touched; the mark makes pytest-django order these async tests with the database
# tests, before the browser tests whose session-long Playwright loop would stop asyncio tests.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("upstream_clients")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def target(url: str, **kwargs) -> UpstreamTarget:
    defaults = dict(
        base_url=url,
        api_key_env="",
        upstream_model="m",
        params={},
        system_prompt="",
        connect_timeout=1.0,
        read_timeout=2.0,
        max_retries=0,
    )
    return UpstreamTarget(**{**defaults, **kwargs})


async def run(t: UpstreamTarget, max_tokens: int = 100) -> tuple[Answer, list[str]]:
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    answer = Answer()
    await stream_answer(
        t,
        [{"role": "user", "content": "hi"}],
        answer=answer,
        on_delta=on_delta,
        max_tokens=max_tokens,
        deadline_seconds=10,
    )
    return answer, deltas


async def test_a_refused_connection_is_retried_then_reported():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    answer, deltas = await run(target(dead, max_retries=2))
    assert answer.status == "error" and answer.error_kind == "connection"
    assert answer.attempts == 3 and deltas == []


async def test_system_prompt_key_and_generation_parameters_reach_the_upstream(
    fake_upstream, monkeypatch
):
    monkeypatch.setenv("ARENA_FAKE_KEY", "sk-secret-1")
    t = target(
        fake_upstream.url,
        api_key_env="ARENA_FAKE_KEY",
        system_prompt="Be brief.",
        params={"temperature": 0.2, "max_tokens": 50, "top_k": 5},
    )
    answer, deltas = await run(t, max_tokens=30)
    assert answer.status == "done" and "".join(deltas) == answer.text
    request = fake_upstream.requests[-1]
    assert request.headers["authorization"] == "Bearer sk-secret-1"
    assert request.messages[0] == {"role": "system", "content": "Be brief."}
    assert request.body["temperature"] == 0.2 and request.body["top_k"] == 5
    assert request.body["max_tokens"] == 30  # the arena's limit wins over the model's own
    assert request.body["stream_options"] == {"include_usage": True}


async def test_a_missing_api_key_variable_is_a_configuration_error(fake_upstream, monkeypatch):
    monkeypatch.delenv("ARENA_FAKE_KEY", raising=False)
    answer, _ = await run(target(fake_upstream.url, api_key_env="ARENA_FAKE_KEY"))
    assert answer.status == "error" and answer.error_kind == "config"
    assert "ARENA_FAKE_KEY" in answer.error and fake_upstream.requests == []


async def test_without_usage_the_token_count_is_the_number_of_chunks(fake_upstream):
    fake_upstream.default = FakeModel(tokens=4, usage=False)
    t = target(fake_upstream.url)
    kwargs = request_kwargs(t, [{"role": "user", "content": "x"}], 10)
    assert kwargs["stream"] is True
    answer, _ = await run(t)
    assert answer.completion_tokens == 4 and answer.prompt_tokens is None


async def test_a_stream_that_stalls_before_any_token_is_not_retried(fake_upstream):
    fake_upstream.default = FakeModel(fault="hang", fail_after=0)
    answer, _ = await run(target(fake_upstream.url, read_timeout=0.3, max_retries=3))
    assert answer.status == "error" and answer.error_kind == "timeout"
    assert len(fake_upstream.requests) == 1


def test_fake_upstream_rejects_an_unknown_fault():
    with pytest.raises(ValueError):
        FakeModel(fault="melt")


async def test_a_stream_that_stops_speaking_the_protocol_is_an_upstream_error(fake_upstream):
    fake_upstream.default = FakeModel(tokens=5, fault="garbage_midstream", fail_after=2)
    answer, deltas = await run(target(fake_upstream.url))
    assert answer.status == "error" and answer.error_kind == "upstream"
    assert "malformed response" in answer.error
    assert answer.text == "tok0 tok1 " and deltas == ["tok0 ", "tok1 "]  # what came is kept


class SlowToClose:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        await asyncio.sleep(0.05)
        self.closed = True


async def test_a_cancellation_while_closing_waits_for_the_close_and_is_not_swallowed():
    stream = SlowToClose()
    task = asyncio.create_task(_close(stream))
    await asyncio.sleep(0.01)  # inside the close
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.closed


async def test_a_refused_request_is_told_apart_from_a_failing_server(fake_upstream):
    fake_upstream.default = FakeModel(fault="http_400")
    answer, _ = await run(target(fake_upstream.url))
    assert answer.status == "error" and answer.error_kind == "request"
    assert "too long" in answer.public_error and not answer.provider_failed
    fake_upstream.default = FakeModel(fault="http_500")
    answer, _ = await run(target(fake_upstream.url))
    assert answer.error_kind == "upstream" and answer.provider_failed
