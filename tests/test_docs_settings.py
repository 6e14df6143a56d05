"""Every variable the settings read is in docs/configuration.md, so an operator looking for one
finds it there; and .env.example names only variables that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READ = re.compile(
    r"""(?:env(?:\.\w+)?|env_\w+|environ(?:\.get)?|getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']"""
)


def _settings_variables() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "config" / "settings").glob("*.py"):
        names |= set(READ.findall(path.read_text()))
    return names


def test_every_variable_the_settings_read_is_documented():
    documented = (ROOT / "docs" / "configuration.md").read_text()
    variables = _settings_variables()
    assert len(variables) > 60  # the reader found the settings' variables
    missing = sorted(v for v in variables if f"`{v}`" not in documented)
    assert missing == []


def test_the_example_environment_names_documented_variables_only():
    documented = (ROOT / "docs" / "configuration.md").read_text()
    example = (ROOT / ".env.example").read_text()
    names = re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE)
    assert "DJANGO_SECRET_KEY" in names
    assert [n for n in names if f"`{n}`" not in documented] == []
