"""The translation catalogues under locale/: complete, compiled and in step with the source.

Read without GNU gettext: a small reader of .po files, and Python's own ``gettext`` module for the
compiled .mo files (the machine serving the site reads those and nothing else). A .po with an
untranslated or fuzzy entry fails, so does a .mo that does not hold exactly the .po's
translations (not recompiled after an edit), and so does a string marked in the source that no
catalogue has (``make messages`` not run after a change).
"""

import ast
import gettext
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
LOCALE = ROOT / "locale"
CATALOGUES = sorted(LOCALE.glob("*/LC_MESSAGES/*.po"))
PYTHON_SOURCES = [
    path
    for folder in ("arena", "config", "ratings", "environment", "accounts")
    for path in (ROOT / folder).rglob("*.py")
    if "tests" not in path.relative_to(ROOT).parts and "migrations" not in path.parts
]
TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))
SCRIPTS = sorted(p for p in (ROOT / "static" / "js").glob("*.js"))
PYTHON_MARKERS = {"gettext", "gettext_lazy", "gettext_noop", "_"}
TEMPLATE_TRANSLATE = re.compile(r"""{%\s*(?:translate|trans)\s+(["'])(.*?)\1(.*?)%}""")
SCRIPT_GETTEXT = re.compile(r"""\bgettext\(\s*"((?:[^"\\]|\\.)*)"\s*\)""")
PLACEHOLDER = re.compile(r"%\(\w+\)[sd]|%[sd]")


@dataclass
class Entry:
    msgid: str = ""
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    line: int = 0

    @property
    def key(self) -> str:
        """The entry's key in a compiled catalogue (context and id, joined by EOT)."""
        return self.msgid if self.msgctxt is None else f"{self.msgctxt}\x04{self.msgid}"


def _unquote(text: str) -> str:
    text = text.strip()
    assert text.startswith('"') and text.endswith('"'), text
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), text[1:-1])


def read_po(path: Path) -> list[Entry]:
    """The entries of a .po file (obsolete ``#~`` entries left out), the header first."""
    entries: list[Entry] = []
    entry: Entry | None = None
    target: tuple[str, int] | None = None  # the field that continuation lines extend

    def start(number: int) -> Entry:
        entries.append(Entry(line=number))
        return entries[-1]

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#~"):
            continue
        after_msgstr = target is not None and target[0] == "msgstr"
        if line.startswith("#,"):
            if entry is None or after_msgstr:
                entry, target = start(number), None
            entry.flags |= {flag.strip() for flag in line[2:].split(",")}
            continue
        if line.startswith("#"):
            continue
        if line.startswith('"'):
            assert entry is not None and target is not None, f"{path}:{number}"
            name, index = target
            if name == "msgstr":
                entry.msgstr[index] += _unquote(line)
            else:
                setattr(entry, name, (getattr(entry, name) or "") + _unquote(line))
            continue
        keyword, _, rest = line.partition(" ")
        if keyword in ("msgctxt", "msgid") and (entry is None or after_msgstr):
            entry = start(number)
        assert entry is not None, f"{path}:{number}"
        match = re.fullmatch(r"msgstr\[(\d+)\]", keyword)
        if match or keyword == "msgstr":
            index = int(match.group(1)) if match else 0
            entry.msgstr[index] = _unquote(rest)
            target = ("msgstr", index)
        else:
            assert keyword in ("msgctxt", "msgid", "msgid_plural"), f"{path}:{number}: {line}"
            setattr(entry, keyword, _unquote(rest))
            target = (keyword, 0)
    return entries


def _id(path: Path) -> str:
    return str(path.relative_to(LOCALE))


def test_every_language_but_english_has_both_catalogues():
    assert CATALOGUES  # the glob sees the catalogues
    for code, _name in settings.LANGUAGES:
        if code == "en":
            continue
        for domain in ("django", "djangojs"):
            assert (LOCALE / code / "LC_MESSAGES" / f"{domain}.po").is_file(), (code, domain)


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_every_entry_is_translated_and_none_is_fuzzy(path):
    entries = read_po(path)
    header, messages = entries[0], entries[1:]
    assert header.msgid == "" and "fuzzy" not in header.flags
    assert len(messages) >= 5  # the reader found the entries
    untranslated = [e.msgid for e in messages if not all(e.msgstr.values()) or not e.msgstr]
    fuzzy = [e.msgid for e in messages if "fuzzy" in e.flags]
    assert untranslated == [] and fuzzy == []


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_every_translation_keeps_the_placeholders_of_its_message(path):
    for entry in read_po(path)[1:]:
        wanted = sorted(PLACEHOLDER.findall(entry.msgid))
        for text in entry.msgstr.values():
            assert sorted(PLACEHOLDER.findall(text)) == wanted, entry.msgid


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_the_compiled_catalogue_holds_exactly_the_translations_of_its_po(path):
    compiled = path.with_suffix(".mo")
    assert compiled.is_file(), f"{compiled} is missing: run make compilemessages"
    with compiled.open("rb") as handle:
        catalog = dict(gettext.GNUTranslations(handle)._catalog)  # type: ignore[attr-defined]
    expected: dict[object, str] = {}
    for entry in read_po(path)[1:]:
        if entry.msgid_plural is None:
            expected[entry.key] = entry.msgstr[0]
        else:
            expected |= {(entry.key, n): text for n, text in entry.msgstr.items()}
    catalog.pop("", None)  # the header
    assert catalog == expected, f"{compiled} is stale: run make compilemessages"


def _catalogued(domain: str) -> set[str]:
    return {
        entry.msgid for path in CATALOGUES if path.stem == domain for entry in read_po(path)[1:]
    }


def test_every_string_marked_in_python_and_templates_is_in_the_catalogues():
    marked: set[str] = set()
    for path in PYTHON_SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in PYTHON_MARKERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                marked.add(node.args[0].value)
    for path in TEMPLATES:
        # A template's "%" is looked up (and catalogued) doubled, as Django's Variable does it.
        marked |= {
            m.group(2).replace("%", "%%") for m in TEMPLATE_TRANSLATE.finditer(path.read_text())
        }
    assert len(marked) > 30  # the scan sees the services' messages and the templates
    assert sorted(marked - _catalogued("django")) == []


def test_every_string_marked_in_the_scripts_is_in_the_catalogues():
    marked = {
        _unquote(f'"{m.group(1)}"')
        for path in SCRIPTS
        for m in SCRIPT_GETTEXT.finditer(path.read_text())
    }
    assert len(marked) >= 5
    assert sorted(marked - _catalogued("djangojs")) == []


def test_the_reader_sees_a_fuzzy_and_an_untranslated_entry(tmp_path):
    po = tmp_path / "django.po"
    po.write_text(
        'msgid ""\nmsgstr ""\n"Language: fr\\n"\n\n'
        '#, fuzzy, python-format\nmsgid "Hello %(name)s"\nmsgstr "Bonjour %(name)s"\n\n'
        'msgctxt "nav"\nmsgid "Main"\nmsgid_plural "Mains"\nmsgstr[0] "Principale"\n'
        'msgstr[1] ""\n\n'
        'msgid ""\n"Two "\n"lines"\nmsgstr ""\n"Deux "\n"lignes"\n',
        encoding="utf-8",
    )
    header, fuzzy, plural, wrapped = read_po(po)
    assert header.msgstr == {0: "Language: fr\n"}
    assert fuzzy.flags == {"fuzzy", "python-format"} and fuzzy.msgstr == {0: "Bonjour %(name)s"}
    assert plural.key == "nav\x04Main" and plural.msgstr == {0: "Principale", 1: ""}
    assert wrapped.msgid == "Two lines" and wrapped.msgstr == {0: "Deux lignes"}
