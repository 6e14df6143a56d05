"""Style counts of one answer, as LMArena counts them for style control.

LMArena (arena-hard-auto ``utils/add_markdown_info.py``; FastChat's arena pipeline) counts, per
answer: tokens, markdown headers h1-h6, list items (ordered, unordered) and bold spans
(``**`` and ``__``). Markdown elements are counted with line-anchored patterns after removing
the bodies of fenced code blocks; tokens are counted on the untouched text.

Two details of LMArena's code blocks removal are reproduced on purpose, since the counts must
equal theirs: a "block" is three backticks, a body without any backtick, three backticks; and
it is the body that is removed - every occurrence of it in the text, block by block - while the
fences stay.

Tokens use OpenAI's ``o200k_base`` encoding (what ``tiktoken.encoding_for_model("gpt-4o")``
gives, the encoder of LMArena's ``token_len``), offline from the ``bpe-openai`` package.
``cl100k_base`` counts are 13% higher than LMArena's on the 750 Arena-Hard v2.0 answers, so it
is not used.

Only that package's Rust extension (``bpe_openai._bindings``) is loaded, not its Python
package: importing ``bpe_openai`` decodes the vocabularies of all three of its encodings into
Python dicts (about 65 MB), and its ``Encoding`` copies one of them again and builds a
rank-to-bytes list (about 10 MB more), none of which a count needs. The extension's own
tokenizer (about 35 MB, plus the data it maps from its file) gives the same counts: the
wrapper's ``encode`` calls this very method after the same replacement of lone surrogates.
That is some 75 MB less in every process that counts (each web worker counts). Unlike the
wrapper, no length limit applies (it refuses a million characters or 200,000 tokens); LMArena's
tiktoken has none either.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from .schema import AnswerStyle

ENCODING_NAME = "o200k_base"

_FENCED_BODY = re.compile(r"```([^`]*)```")
_HEADERS = {f"h{k}": re.compile(rf"^#{{{k}}}\s", re.MULTILINE) for k in range(1, 7)}
_ORDERED = re.compile(r"^\s*\d+\.\s", re.MULTILINE)
_UNORDERED = re.compile(r"^\s*[-*+]\s", re.MULTILINE)
_BOLD_STARS = re.compile(r"\*\*[^*\n]+\*\*")
_BOLD_UNDERSCORES = re.compile(r"__[^_\n]+__")


_EXTENSION = "bpe_openai._bindings"


def _extension() -> Any:
    """``bpe_openai._bindings`` loaded from its file without running ``bpe_openai/__init__``
    (see the module docstring), registered under its own name so that a later import of the
    package finds this module rather than loading the file a second time."""
    if _EXTENSION in sys.modules:
        return sys.modules[_EXTENSION]
    package = importlib.util.find_spec("bpe_openai")  # a top-level spec: nothing is run
    if package is None or not package.submodule_search_locations:
        raise ImportError("the bpe-openai package is not installed")
    folder = Path(next(iter(package.submodule_search_locations)))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_bindings{suffix}"
        if path.is_file():
            break
    else:
        raise ImportError(f"no bpe_openai extension module in {folder}")
    loader = importlib.machinery.ExtensionFileLoader(_EXTENSION, str(path))
    spec = importlib.util.spec_from_file_location(_EXTENSION, path, loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[_EXTENSION] = module
    return module


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """The tokenizer, loaded on first use (about 0.2 s) and kept for the process."""
    return _extension().tokenizer_for_encoding(ENCODING_NAME)


def _utf8_safe(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot hold) replaced by U+FFFD, as
    ``bpe_openai.Encoding`` replaces them before encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def count_tokens(text: str) -> int:
    # Special-token text such as "<|endoftext|>" in an answer is ordinary text here (the
    # extension knows no special tokens), as ``encode(text, disallowed_special=())`` counts it.
    return int(_tokenizer().count(_utf8_safe(text)))


def strip_code_blocks(text: str) -> str:
    """Remove fenced code bodies the way LMArena does (see the module docstring)."""
    for body in _FENCED_BODY.findall(text):
        if body:
            text = text.replace(body, "")
    return text


def markdown_counts(text: str) -> dict[str, dict[str, int]]:
    """Header, list and bold counts of ``text`` after code bodies are removed."""
    prose = strip_code_blocks(text)
    return {
        "header_count": {name: len(rx.findall(prose)) for name, rx in _HEADERS.items()},
        "list_count": {
            "ordered": len(_ORDERED.findall(prose)),
            "unordered": len(_UNORDERED.findall(prose)),
        },
        "bold_count": {
            "**": len(_BOLD_STARS.findall(prose)),
            "__": len(_BOLD_UNDERSCORES.findall(prose)),
        },
    }


def style_counts(text: str) -> AnswerStyle:
    """``{"tokens", "header_count": {h1..h6}, "list_count": {ordered, unordered},
    "bold_count": {"**", "__"}}`` of one answer."""
    markdown = markdown_counts(text)
    return {
        "tokens": count_tokens(text),
        "header_count": markdown["header_count"],
        "list_count": markdown["list_count"],
        "bold_count": markdown["bold_count"],
    }
