"""End to end in Chromium, at a desktop's size and a phone's: the code blocks of a pool battle's
answers run in the visitor's browser. Python runs in Pyodide in a Web Worker (its output, its
traceback, a loop stopped by the Stop button and one by the time limit); an HTML answer runs in
the sandboxed frame and cannot reach the page, its cookies or the network; a vote cast after
running code of both answers is stored as code_ran."""

import pytest
from playwright.sync_api import expect

from arena.models import Vote
from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from tests.helpers import SIZES, csp_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


PY_PRINT = "```python\nfor i in range(3):\n    print('line', i * 7)\n```"
PY_RAISE = "```python\nraise ValueError('no good value')\n```"
PY_LOOP = "```python\nprint('looping')\nwhile True:\n    pass\n```"
# The worker's network is gone before the answer's code runs.
PY_NETWORK = (
    "```python\nimport js\n"
    "print([getattr(js, name, None) for name in ('fetch', 'XMLHttpRequest', 'WebSocket')])\n```"
)
# The answer's script tries the page's cookies, its DOM and this site's API, then reports.
HTML_PROBE = """```html
<p>probe</p>
<script>
const results = {};
function attempt(name, f) {
  try { results[name] = "read: " + String(f()); } catch (e) { results[name] = "blocked: " + e.name; }
}
attempt("cookie", () => parent.document.cookie);
attempt("body", () => parent.document.body.innerHTML.length);
attempt("write", () => { parent.document.body.textContent = "owned"; return "written"; });
attempt("ownCookie", () => document.cookie);
attempt("storage", () => localStorage.length);
fetch("/api/battles", { method: "POST" })
  .then((r) => { results.fetch = "read: " + r.status; },
        (e) => { results.fetch = "blocked: " + e.name; })
  .then(() => parent.postMessage({ probe: results }, "*"));
</script>
```"""
ANSWER = "\n\n".join(["Some code:", PY_PRINT, PY_RAISE, PY_LOOP, PY_LOOP, PY_NETWORK, HTML_PROBE])


# The page's DOM (without the blocks' run controls, outputs and frames), title and cookies.
PAGE_STATE = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll("[data-testid=code-run]").forEach((run) => run.remove());
  return [body.innerHTML, document.title, document.cookie];
}"""


def page_violations(violations):
    """The violations of the site's policy: the run frame's own policy refusing the answer's
    request to the API is the behaviour under test."""
    return [
        v
        for v in violations
        if not ("/api/battles" in v and ("default-src 'none'" in v or "Refused to connect" in v))
    ]


def open_pool_battle(asgi_server, browser, size, *, prompt, answer):
    """A pool battle of two models that both answered ``answer``, open in a new context at
    ``size`` with the terms accepted; returns the context, the page and the context's list of
    policy violations."""
    prompt = PromptFactory(turns=[prompt])
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=[answer])
    context = browser.new_context(**SIZES[size])
    violations = csp_violations(context)
    page = context.new_page()
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    return context, page, violations


@pytest.mark.parametrize("size", sorted(SIZES))
def test_code_blocks_run_in_the_browser_sandboxed_and_the_vote_says_so(
    asgi_server, browser, settings, size
):
    settings.ARENA_CODE_RUN_SECONDS = 3
    context, page, violations = open_pool_battle(
        asgi_server, browser, size, prompt="Write a loop and a page.", answer=ANSWER
    )
    side_a = page.get_by_test_id("response-a")
    side_b = page.get_by_test_id("response-b")
    runs_a = side_a.get_by_test_id("code-run")
    expect(runs_a).to_have_count(6)
    assert [runs_a.nth(i).get_attribute("data-language") for i in range(6)] == (
        ["python"] * 5 + ["html"]
    )
    # Pyodide is fetched only when a visitor asks for a run.
    loaded = page.evaluate("performance.getEntriesByType('resource').map((e) => e.name)")
    assert not [name for name in loaded if "pyodide" in name]

    printing = runs_a.nth(0)
    printing.get_by_test_id("code-run-button").click()
    expect(printing.get_by_test_id("code-stdout")).to_have_text(
        "line 0\nline 7\nline 14\n", timeout=90_000
    )
    expect(printing.get_by_test_id("code-status")).to_have_text("Finished.")
    expect(printing.get_by_test_id("code-stderr")).to_be_hidden()

    raising = runs_a.nth(1)
    raising.get_by_test_id("code-run-button").click()
    expect(raising.get_by_test_id("code-stderr")).to_contain_text("ValueError: no good value")
    expect(raising.get_by_test_id("code-stdout")).to_be_hidden()

    stopped = runs_a.nth(2)
    stopped.get_by_test_id("code-run-button").click()
    expect(stopped.get_by_test_id("code-stdout")).to_have_text("looping\n")
    stopped.get_by_test_id("code-stop-button").click()
    expect(stopped.get_by_test_id("code-status")).to_have_text("Stopped.")
    expect(stopped.get_by_test_id("code-run-button")).to_be_enabled()

    timed = runs_a.nth(3)
    timed.get_by_test_id("code-run-button").click()
    expect(timed.get_by_test_id("code-stdout")).to_have_text("looping\n", timeout=90_000)
    expect(timed.get_by_test_id("code-status")).to_have_text(
        "Stopped: the time limit is 3 seconds."
    )
    # After a stop, Python starts again in a new worker.
    printing.get_by_test_id("code-run-button").click()
    expect(printing.get_by_test_id("code-status")).to_have_text("Finished.", timeout=90_000)
    expect(printing.get_by_test_id("code-stdout")).to_have_text("line 0\nline 7\nline 14\n")

    network = runs_a.nth(4)
    network.get_by_test_id("code-run-button").click()
    expect(network.get_by_test_id("code-stdout")).to_have_text("[None, None, None]\n")

    # The HTML answer, on side B.
    before = page.evaluate(PAGE_STATE)
    page.evaluate(
        """window.addEventListener('message', (event) => {
          if (event.data && event.data.probe) window.__probe = event.data.probe; })"""
    )
    probe_run = side_b.get_by_test_id("code-run").nth(5)
    probe_run.get_by_test_id("code-run-button").click()
    results = page.wait_for_function("() => window.__probe").json_value()
    assert results == {
        "cookie": "blocked: SecurityError",
        "body": "blocked: SecurityError",
        "write": "blocked: SecurityError",
        "ownCookie": "blocked: SecurityError",
        "storage": "blocked: SecurityError",
        "fetch": "blocked: TypeError",
    }
    frame = probe_run.get_by_test_id("code-frame")
    assert frame.get_attribute("sandbox") == "allow-scripts"
    expect(
        page.frame_locator("[data-testid=response-b] [data-testid=code-frame]").get_by_text("probe")
    ).to_be_visible()
    # The page is as it was, but for the block's own run controls and frame.
    assert page.evaluate(PAGE_STATE) == before
    # The outputs and the frames fit the screen: nothing scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # Stop takes the frame's page away.
    probe_run.get_by_test_id("code-stop-button").click()
    expect(probe_run.get_by_test_id("code-frame")).to_have_count(0)
    expect(probe_run.get_by_test_id("code-status")).to_have_text("Stopped.")

    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A")
    assert Vote.objects.get().code_ran is True
    context.close()
    assert not page_violations(violations), "\n".join(violations)
    # The frame's own policy is what refused the request.
    assert any("default-src 'none'" in v and "/api/battles" in v for v in violations)


def test_a_vote_after_running_one_side_only_is_not_code_ran(asgi_server, page):
    prompt = PromptFactory(turns=["Print something."])
    for model in (ArenaModelFactory(), ArenaModelFactory()):
        CompletionFactory(prompt=prompt, model=model, turns=[PY_PRINT])
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    run = page.get_by_test_id("response-a").get_by_test_id("code-run")
    run.get_by_test_id("code-run-button").click()
    expect(run.get_by_test_id("code-status")).to_have_text("Finished.", timeout=90_000)
    page.get_by_test_id("vote-b").click()
    expect(page.get_by_test_id("model-name-b")).not_to_have_text("Model B")
    assert Vote.objects.get().code_ran is False


# A script that never yields once it has said so: were the frame in the page's own process, the
# page would freeze with it.
JS_LOOP = "```javascript\nconsole.log('spinning');\nsetTimeout(() => { for (;;) {} }, 50);\n```"


@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_script_that_loops_forever_leaves_the_page_responsive_and_is_stopped(
    asgi_server, browser, settings, size
):
    settings.ARENA_CODE_RUN_SECONDS = 3
    context, page, _ = open_pool_battle(asgi_server, browser, size, prompt="Spin.", answer=JS_LOOP)
    run = page.get_by_test_id("response-a").get_by_test_id("code-run")
    other = page.get_by_test_id("response-b").get_by_test_id("code-run")
    run.get_by_test_id("code-run-button").click()
    # The frame printed before it started spinning: its loop is running now.
    expect(run.get_by_test_id("code-stdout")).to_have_text("spinning\n")
    # The page still runs its own script and answers the visitor while the frame spins.
    assert page.evaluate("() => 6 * 7") == 42
    run.get_by_test_id("code-stop-button").click()
    expect(run.get_by_test_id("code-status")).to_have_text("Stopped.")
    expect(run.get_by_test_id("code-frame")).to_have_count(0)

    # Side B run while side A spins (the browser may hold B back in A's process): stopping A
    # lets B run.
    run.get_by_test_id("code-run-button").click()
    expect(run.get_by_test_id("code-stdout")).to_have_text("spinning\n")
    other.get_by_test_id("code-run-button").click()
    page.wait_for_timeout(1500)  # A has missed its heartbeats by now
    run.get_by_test_id("code-stop-button").click()
    expect(run.get_by_test_id("code-status")).to_have_text("Stopped.")
    expect(other.get_by_test_id("code-stdout")).to_have_text("spinning\n")
    other.get_by_test_id("code-stop-button").click()
    expect(other.get_by_test_id("code-frame")).to_have_count(0)

    # Both sides spinning: each frame is stopped once silent for the time limit, and the second
    # runs even where the browser puts both frames in one process.
    run.get_by_test_id("code-run-button").click()
    expect(run.get_by_test_id("code-stdout")).to_have_text("spinning\n")
    other.get_by_test_id("code-run-button").click()
    silent = "Stopped: the page did not respond for 3 seconds."
    expect(run.get_by_test_id("code-status")).to_have_text(silent, timeout=30_000)
    expect(run.get_by_test_id("code-frame")).to_have_count(0)
    expect(other.get_by_test_id("code-stdout")).to_have_text("spinning\n", timeout=30_000)
    expect(other.get_by_test_id("code-status")).to_have_text(silent, timeout=30_000)
    expect(other.get_by_test_id("code-frame")).to_have_count(0)
    expect(run.get_by_test_id("code-run-button")).to_be_enabled()
    page.get_by_test_id("vote-a").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A")
    assert Vote.objects.get().code_ran is True
    context.close()


LIVE_PY = ["Here it is:\n\n", "```python\n", "print('from', 'python')\n", "```\n"]
LIVE_JS = ["Try this:\n\n", "```javascript\n", "console.log('from', 'javascript');\n", "```\n"]


@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_live_code_battle_from_a_suggested_task_is_run_on_both_sides_and_voted(
    asgi_server, browser, fake_upstream, live_models, size
):
    from arena.code_tasks import CODE_TASKS
    from arena.tests.fake_openai import FakeModel

    fake_upstream.models["upstream-quokka-1"] = FakeModel(tokens=LIVE_PY, delay=0.02)
    fake_upstream.models["upstream-quokka-2"] = FakeModel(tokens=LIVE_JS, delay=0.02)
    context = browser.new_context(**SIZES[size])
    violations = csp_violations(context)
    page = context.new_page()
    page.goto(asgi_server.url + "/?mode=live")
    page.get_by_test_id("terms-accept").click()
    expect(page.locator("#terms")).to_be_hidden()
    page.get_by_test_id("suggest-code").click()
    expect(page.get_by_test_id("prompt-input")).not_to_have_value("")
    assert page.get_by_test_id("prompt-input").input_value() in CODE_TASKS
    page.get_by_test_id("send").click()
    expect(page.get_by_test_id("vote-a")).to_be_enabled()

    outputs = {"python": "from python\n", "javascript": "from javascript\n"}
    for side in "ab":
        run = page.get_by_test_id(f"response-{side}").get_by_test_id("code-run")
        expect(run).to_have_count(1)
        run.get_by_test_id("code-run-button").click()
        expected = outputs[run.get_attribute("data-language")]
        expect(run.get_by_test_id("code-stdout")).to_have_text(expected, timeout=90_000)

    page.get_by_test_id("vote-tie").click()
    expect(page.get_by_test_id("model-name-a")).not_to_have_text("Model A")
    vote = Vote.objects.get()
    assert vote.code_ran is True and vote.winner == "tie"
    context.close()
    assert not violations, "\n".join(violations)
