"""A product module past LIMIT lines says, at the top of its docstring, why it stays one module.

A long module is sometimes the simplest shape (one formula's private pieces, one API contract),
and sometimes two concepts that grew together. Either way the choice is written down where the
next reader starts: a paragraph opening with MARKER in the module's docstring, right after its
summary. Tests and migrations are not product code and are left out."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = (
    "answer_style",
    "arena",
    "ratings",
    "environment",
    "redteam",
    "accounts",
    "config",
    "client",
)
LEFT_OUT = {"tests", "migrations"}
LIMIT = 500
MARKER = "Why one module:"


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if not LEFT_OUT & set(path.relative_to(ROOT).parts)
    )


def reason_near_the_top(docstring: str) -> bool:
    """MARKER opens the docstring's second paragraph (the first after the summary)."""
    paragraphs = [p.strip() for p in docstring.split("\n\n") if p.strip()]
    return len(paragraphs) > 1 and paragraphs[1].startswith(MARKER)


def test_every_long_product_module_says_why_it_stays_one_module():
    long = {
        path: path.read_text(encoding="utf-8")
        for path in product_modules()
        if len(path.read_text(encoding="utf-8").splitlines()) > LIMIT
    }
    assert long, "no product module is over the limit: the check reads nothing"
    unexplained = sorted(
        str(path.relative_to(ROOT))
        for path, text in long.items()
        if not reason_near_the_top(ast.get_docstring(ast.parse(text)) or "")
    )
    assert unexplained == []


def test_the_check_tells_a_reason_at_the_top_from_none_or_one_further_down():
    assert reason_near_the_top(f"Summary.\n\n{MARKER} one concept.\n\nMore.")
    assert not reason_near_the_top("Summary.\n\nMore.")
    assert not reason_near_the_top(f"Summary.\n\nMore.\n\n{MARKER} one concept.")
    assert not reason_near_the_top("")
