"""The client README's trainer loop, run as written against the real application on loopback
while simulated visitors vote: the snippet is read from client/README.md, so it cannot drift from
the client. Only the demo's address is swapped for the test server's."""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from arena_env_visitors import celery_eager, visitors_judging

pytestmark = pytest.mark.postgres

README = Path(__file__).resolve().parents[1] / "README.md"
DEMO_URL = "http://127.0.0.1:8000"


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    with celery_eager():
        yield


def readme_loop() -> str:
    text = README.read_text()
    section = text.split("## A trainer's loop", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "no python block under 'A trainer's loop'"
    return found.group(1)


def longer_wins(text_a: str, text_b: str) -> str:
    return "model_a" if len(text_a) > len(text_b) else "model_b"


def test_the_readme_loop_prints_rewards_as_visitors_vote(
    asgi_server, eager_tasks, monkeypatch, capsys
):
    from arena.tokens import token_create
    from environment.models import EnvRun

    _, token = token_create(name="trainer", scopes=["env"])
    monkeypatch.setenv("ARENA_TOKEN", token)
    code = readme_loop()
    assert DEMO_URL in code
    with visitors_judging(asgi_server.url, longer_wins):
        exec(compile(code.replace(DEMO_URL, asgi_server.url), "client/README.md", "exec"), {})  # noqa: S102
    lines = capsys.readouterr().out.splitlines()
    complete = [line for line in lines if " complete " in line]
    assert len(complete) == 2, lines
    # The longer answer won every vote: a positive score; the shorter a negative one.
    scores = sorted(float(line.rsplit("score=", 1)[1]) for line in complete)
    assert scores[0] < 0 < scores[1]
    assert any(" pending " in line for line in lines)  # printed as they came, not only at the end
    # The loop's `with` block closed its run when it ended.
    assert EnvRun.objects.get(name="readme-loop").state == EnvRun.State.CLOSED
