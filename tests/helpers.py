"""Assertions shared by the browser tests."""

# The two screens every layout is tested at: a desktop's, and a phone's with touch.
SIZES = {
    "desktop": {"viewport": {"width": 1366, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}


def assert_names_revealed(page, battle) -> None:
    """After the vote, each side's name slot shows that side's model."""
    for side, model in (("a", battle.model_a), ("b", battle.model_b)):
        assert page.get_by_test_id(f"model-name-{side}").inner_text().startswith(model.display_name)


def revealed_names(page) -> tuple[str, str]:
    """The model names shown on sides A and B after a vote (without their organization)."""
    return tuple(  # type: ignore[return-value]
        page.get_by_test_id(f"model-name-{side}").evaluate("el => el.firstChild.textContent")
        for side in "ab"
    )


# Chromium logs each violation to the console itself; the page's own securitypolicyviolation
# event is logged too, with the directive and the blocked source. Injected by the browser
# (DevTools), not by the page, so the policy does not block it.
_REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => console.error(
  "Content Security Policy violation: " + event.effectiveDirective + " blocked "
  + event.blockedURI + " at " + event.sourceFile + ":" + event.lineNumber
), true);
"""


def csp_violations(target) -> list[str]:
    """The Content-Security-Policy violations in ``target`` from now on, as they happen.

    ``target`` is a page or a browser context (all of its pages); call this before navigating.
    The browser fixtures fail a test that caused any (conftest.py), so the tests run under the
    policy production serves and cannot quietly rely on something it blocks.
    """
    seen: list[str] = []

    def on_console(message) -> None:
        if "Content Security Policy" in message.text:
            url = message.page.url if message.page is not None else "?"
            seen.append(f"{url}: {message.text} ({message.location})")

    target.add_init_script(_REPORT_VIOLATIONS)
    target.on("console", on_console)
    return seen


AXE = __import__("pathlib").Path(__file__).with_name("vendor") / "axe.min.js"
# The impacts a page state may not have: axe-core's own scale is minor, moderate, serious,
# critical; the last two are what keeps a screen-reader or keyboard user out.
AXE_BLOCKING = ("serious", "critical")


def axe_violations(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now, one line each.

    axe-core is evaluated in the page through DevTools, which the page's Content-Security-Policy
    does not govern, so the production policy stays in force for everything the page does."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    found = page.evaluate(
        """async () => {
          const result = await window.axe.run(document, {resultTypes: ["violations"]});
          return result.violations.map((v) => ({
            id: v.id, impact: v.impact, help: v.help,
            targets: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
          }));
        }"""
    )
    return [
        f"{v['impact']}: {v['id']} ({v['help']}) at {', '.join(v['targets'])}"
        for v in found
        if v["impact"] in AXE_BLOCKING
    ]
