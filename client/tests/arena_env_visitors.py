"""Simulated visitors for the live tests: each one is a browser-less session that goes through
the site's real HTTP flow (the page for its cookies, ``POST /api/terms``, ``POST /api/battles``,
``POST /api/battles/<id>/vote`` with the CSRF token), judging every battle it is served with a
rule the test gives (``decide(text_a, text_b) -> winner``)."""

import http.cookiejar
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Decide = Callable[[str, str], str]


class Visitor:
    def __init__(self, url: str) -> None:
        self.url = url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.votes = 0
        self.request("GET", "/")  # the session and CSRF cookies
        status, _ = self.request("POST", "/api/terms", {"accept": True})
        assert status == 200, f"terms refused: {status}"

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        csrf = next((c.value for c in self.jar if c.name == "csrftoken"), None)
        if csrf:
            headers["X-CSRFToken"] = csrf
        data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with self.opener.open(request, timeout=60) as response:
                raw = response.read()
                status = int(response.status)
        except urllib.error.HTTPError as error:
            raw = error.read()
            status = int(error.code)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, None

    def judge_one(self, decide: Decide, read_seconds: float = 0.0) -> bool:
        """Ask for a battle and vote on it after ``read_seconds`` (a vote faster than the
        site's ARENA_MIN_VOTE_SECONDS is flagged and does not count); False when none was
        served."""
        status, battle = self.request("POST", "/api/battles", {})
        if status != 201:
            return False
        time.sleep(read_seconds)
        turn = battle["turns"][0]
        winner = decide(turn["a"]["content"], turn["b"]["content"])
        status, _ = self.request("POST", f"/api/battles/{battle['id']}/vote", {"winner": winner})
        assert status == 201, f"vote refused: {status}"
        self.votes += 1
        return True


@contextmanager
def visitors_judging(url: str, decide: Decide, count: int = 3) -> Iterator[list[Visitor]]:
    """``count`` visitors asking for battles and voting on them in a background thread until
    the block ends (a visitor with nothing served waits a little and asks again)."""
    crowd = [Visitor(url) for _ in range(count)]
    stop = threading.Event()
    failures: list[BaseException] = []

    def judge() -> None:
        try:
            while not stop.is_set():
                served = [visitor.judge_one(decide) for visitor in crowd]
                if not any(served):
                    time.sleep(0.1)
        except BaseException as error:  # reported by the test, not lost in the thread
            failures.append(error)

    thread = threading.Thread(target=judge, daemon=True)
    thread.start()
    try:
        yield crowd
    finally:
        stop.set()
        thread.join(timeout=120)
    if failures:
        raise failures[0]


@contextmanager
def celery_eager() -> Iterator[None]:
    """Celery tasks run in the process that queues them (the vote's request, so each vote's
    reward refit is done when the vote's answer comes), whatever the settings chose at start-up
    (a REDIS_URL turns eager off)."""
    from config.celery_app import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


def by_quality(text_a: str, text_b: str) -> str:
    """The answer with the higher ``quality N`` in its text wins; equal ones tie."""

    def quality(text: str) -> int:
        found = re.search(r"quality (\d+)", text)
        assert found, f"no quality in {text!r}"
        return int(found.group(1))

    a, b = quality(text_a), quality(text_b)
    return "model_a" if a > b else "model_b" if b > a else "tie"
