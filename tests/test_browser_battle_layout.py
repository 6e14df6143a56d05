"""In Chromium at a desktop (1366x900) and a phone (390x844, touch): the battle page's layout.

Long answers are read whole on the page (no box inside it cuts them), the vote bar stays in the
viewport from the first line of the answers to the last, A and B face each other, key hints show
only with a keyboard and a fine pointer, the reveal names the models (in a live region too), and
a live battle brings its answers into view as they start. Each state is saved as a screenshot
under var/screenshots/ (test artefacts, not committed).
"""

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from playwright.sync_api import expect

from arena.models import Vote
from arena.tests.factories import ArenaModelFactory, CompletionFactory, PromptFactory
from arena.tests.fake_openai import FakeModel
from tests.helpers import csp_violations
from tests.test_browser_live import send_prompt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(django_settings.BASE_DIR) / "var" / "screenshots"

DEVICES = {
    "desktop": {"viewport": {"width": 1366, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True},
}

PARAGRAPH = (
    "The river rose slowly through the night, and by morning the lower fields were a sheet of "
    "grey water that reflected the low clouds and the tops of the fence posts."
)


def long_answer(model: str) -> str:
    """About three screens of markdown ending with a sentence unique to the model, with the
    things that widen a page: an unbroken word, a long code line and a table."""
    body = [f"Paragraph {n} of {model}'s answer. {PARAGRAPH}" for n in range(1, 25)]
    body.insert(5, "x" * 300)
    body.insert(9, "```python\nprint('" + "wide " * 60 + "')\n```")
    body.insert(
        12, "| col | " + " | ".join(f"heading {n}" for n in range(12)) + " |\n|---|" + "---|" * 12
    )
    body.append(f"The last sentence of {model}'s answer ends here.")
    return "\n\n".join(body)


@pytest.fixture(params=sorted(DEVICES))
def device(request, browser):
    """A page at the device's size (a touch screen for the phone), failing on CSP violations."""
    context = browser.new_context(**DEVICES[request.param])
    violations = csp_violations(context)
    page = context.new_page()
    yield request.param, page
    context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def assert_no_horizontal_overflow(page) -> None:
    width, inner = page.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
    assert width <= inner


def assert_vote_bar_in_viewport(page) -> None:
    box = page.get_by_test_id("vote-bar").bounding_box()
    height = page.viewport_size["height"]
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height, box


def clipped_answers(page) -> list[str]:
    """Answer containers, or anything inside the answers that scrolls or clips vertically,
    whose content is taller than their box."""
    return page.evaluate(
        """() => {
          const bad = [];
          const within = document.querySelectorAll('.sides, .side, .response, .sides *');
          within.forEach((el) => {
            const clips = getComputedStyle(el).overflowY !== 'visible';
            const answer = el.matches('.response');
            if ((clips || answer) && el.scrollHeight > el.clientHeight + 1) {
              bad.push(el.tagName + '.' + el.className + ' ' + el.scrollHeight + '>' + el.clientHeight);
            }
          });
          return bad;
        }"""
    )


def scroll_to(page, where: str) -> None:
    page.evaluate(
        """(where) => {
          const sides = document.getElementById('sides').getBoundingClientRect();
          const top = sides.top + window.scrollY;
          const y = {start: 0, middle: top + sides.height / 2 - innerHeight / 2,
                     end: document.scrollingElement.scrollHeight}[where];
          window.scrollTo({top: y, behavior: 'instant'});
        }""",
        where,
    )


CONTRAST = """(el) => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  let opacity = 1;
  for (let node = el; node; node = node.parentElement) opacity *= Number(getComputedStyle(node).opacity);
  const style = getComputedStyle(el);
  const [hi, lo] = [lum(style.color), lum(style.backgroundColor)].sort((x, y) => y - x);
  return {ratio: (hi + 0.05) / (lo + 0.05), opacity: opacity};
}"""


def test_a_long_pool_battle_reads_whole_with_the_vote_bar_at_hand(asgi_server, device):
    name, page = device
    prompt = PromptFactory(turns=["Describe the flood."])
    models = {
        key: ArenaModelFactory(display_name=f"{key} Deep/7", organization="Fenland")
        for key in ("Heron", "Osprey")
    }
    for key, model in models.items():
        CompletionFactory(prompt=prompt, model=model, turns=[long_answer(key)])

    page.goto(asgi_server.url + "/")
    # The terms dialog keeps a margin on each side, even on a phone.
    dialog = page.locator("#terms")
    expect(dialog).to_be_visible()
    box = dialog.bounding_box()
    width = page.viewport_size["width"]
    assert box["x"] >= 12 and box["x"] + box["width"] <= width - 12, box
    assert_no_horizontal_overflow(page)
    screenshot(page, f"battle-{name}-terms")
    page.get_by_test_id("terms-accept").click()
    expect(dialog).to_be_hidden()
    for side in "ab":
        expect(page.get_by_test_id(f"response-{side}")).to_contain_text(
            "ends here", use_inner_text=True
        )
    expect(page.get_by_test_id("vote-a")).to_be_enabled()

    # A and B side by side on a desktop, stacked on a phone, each labelled with its letter.
    a, b = (page.locator(f".side-{side}").bounding_box() for side in "ab")
    if name == "desktop":
        assert a["x"] + a["width"] <= b["x"] and abs(a["y"] - b["y"]) < 1
    else:
        assert a["y"] + a["height"] <= b["y"] and abs(a["x"] - b["x"]) < 1
    for side in "ab":
        expect(page.locator(f".side-{side} .side-badge")).to_have_text(side.upper())
    # The vote buttons: A on the left, B on the right, on one row; tie and both bad between them
    # (desktop) or below them (phone).
    vote = {
        k: page.get_by_test_id(f"vote-{k}").bounding_box() for k in ("a", "b", "tie", "bothbad")
    }
    assert vote["a"]["x"] + vote["a"]["width"] <= vote["b"]["x"]
    assert abs(vote["a"]["y"] - vote["b"]["y"]) < 1
    for middle in (vote["tie"], vote["bothbad"]):
        if name == "desktop":
            assert vote["a"]["x"] < middle["x"] < vote["b"]["x"]
        else:
            assert middle["y"] >= vote["a"]["y"] + vote["a"]["height"]
    # Key hints only with a keyboard and a fine pointer.
    hints = page.locator(".vote-bar kbd")
    assert hints.count() == 4
    for i in range(4):
        if name == "desktop":
            expect(hints.nth(i)).to_be_visible()
        else:
            expect(hints.nth(i)).to_be_hidden()

    assert clipped_answers(page) == []
    for where in ("start", "middle", "end"):
        scroll_to(page, where)
        assert_no_horizontal_overflow(page)
        assert_vote_bar_in_viewport(page)
        screenshot(page, f"battle-{name}-{where}")
    # At the end the bar sits below the answers, not over their last lines.
    dock = page.get_by_test_id("vote-dock").bounding_box()
    bottom = page.locator("#sides").bounding_box()
    assert bottom["y"] + bottom["height"] <= dock["y"] + 1
    for key in models:
        last = page.get_by_text(f"The last sentence of {key}'s answer ends here.")
        last.scroll_into_view_if_needed()
        expect(last).to_be_in_viewport()

    page.get_by_test_id("vote-b").click()
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("You preferred", use_inner_text=True)
    vote = Vote.objects.get()
    assert vote.winner == "model_b"
    battle = vote.battle
    chosen = battle.model_b.display_name
    assert f"You preferred {chosen}." in verdict.inner_text()
    link = verdict.locator(f'a[href="/models/{quote(chosen, safe="")}"]').first
    expect(link).to_have_text(chosen)
    expect(verdict.locator('a[href="/leaderboard"]')).to_be_visible()
    # The revealed names are read out: the verdict is a live region holding both of them.
    assert verdict.get_attribute("aria-live") == "polite"
    for model in models.values():
        assert model.display_name in verdict.inner_text()
    for side, model in (("a", battle.model_a), ("b", battle.model_b)):
        expect(page.locator(f'#model-name-{side} a[href^="/models/"]')).to_have_text(
            model.display_name
        )
    # The vote given stays legible on the disabled bar (WCAG AA: 4.5:1).
    contrast = page.get_by_test_id("vote-b").evaluate(CONTRAST)
    assert contrast["opacity"] == 1 and contrast["ratio"] >= 4.5, contrast
    assert_vote_bar_in_viewport(page)
    assert_no_horizontal_overflow(page)
    screenshot(page, f"battle-{name}-revealed")


@pytest.mark.parametrize(
    ("winner", "sentence"),
    [
        ("tie", "You called it a tie between {a} and {b}."),
        ("bothbad", "You found both {a} and {b} bad."),
    ],
)
def test_a_tie_or_both_bad_names_both_models(asgi_server, page, winner, sentence):
    prompt = PromptFactory(turns=["Hello?"])
    models = [ArenaModelFactory(), ArenaModelFactory()]
    for model in models:
        CompletionFactory(prompt=prompt, model=model, turns=["Hi."])
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    page.get_by_test_id(f"vote-{winner}").click()
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_contain_text("Thanks for voting", use_inner_text=True)
    vote = Vote.objects.get()
    expected = sentence.format(
        a=vote.battle.model_a.display_name, b=vote.battle.model_b.display_name
    )
    assert expected in verdict.inner_text()
    assert verdict.locator('a[href^="/models/"]').count() == 2


def test_a_live_battle_brings_its_answers_into_view_as_they_stream(
    asgi_server, device, fake_upstream, live_models
):
    name, page = device
    # Both sides stream until stopped: the page is looked at while they answer.
    for n in (1, 2):
        fake_upstream.models[f"upstream-quokka-{n}"] = FakeModel(fault="endless", delay=0.05)
    page.goto(asgi_server.url + "/")
    page.get_by_test_id("terms-accept").click()
    expect(page.locator("#terms")).to_be_hidden()
    placeholder = page.get_by_test_id("prompt-input").get_attribute("placeholder")
    assert "Ctrl" not in placeholder
    hint = page.get_by_test_id("send-key-hint")
    if name == "desktop":
        expect(hint).to_have_text(re.compile("Ctrl\\+Enter"))
        expect(hint).to_be_visible()
    else:
        expect(hint).to_be_hidden()
    answers = page.get_by_test_id("response-a")
    screenshot(page, f"live-{name}-prompt")

    send_prompt(page, "Tell me a long story")
    expect(page.get_by_test_id("side-status-b")).to_have_text("Answering…")
    # The answers come into view: their top in the upper half of the screen (on a phone the
    # form alone is taller than that), or as near it as the page scrolls.
    page.wait_for_function(
        """() => {
          const top = document.getElementById('sides').getBoundingClientRect().top;
          const bottom = scrollY + innerHeight >= document.scrollingElement.scrollHeight - 1;
          return top >= -1 && (top < innerHeight / 2 || bottom);
        }"""
    )
    expect(answers).to_contain_text("tok", use_inner_text=True)
    expect(answers).to_be_in_viewport()
    expect(page.get_by_test_id("vote-a")).to_be_disabled()
    assert_vote_bar_in_viewport(page)
    assert_no_horizontal_overflow(page)
    screenshot(page, f"live-{name}-streaming")

    page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("regenerate")).to_be_enabled()
