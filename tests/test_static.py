"""Static files build with the storage production serves them from (whitenoise's manifest)."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "static" / "vendor"
SOURCE_MAP = re.compile(r"[#@]\s*sourceMappingURL=(\S+)")
PYODIDE_FILES = (
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
)
MODULE_IMPORT = re.compile(
    r"""^import\s.*?\sfrom\s*["'](\.[^"']+)["'];""", re.MULTILINE | re.DOTALL
)


def test_no_vendored_file_names_a_source_map_that_is_not_shipped():
    scripts = sorted(VENDOR.glob("*.js")) + sorted(VENDOR.glob("*.css"))
    assert scripts
    for path in scripts:
        for name in SOURCE_MAP.findall(path.read_text(encoding="utf-8")):
            assert (path.parent / name).exists(), f"{path.name} names {name}, which is not shipped"


def test_vendored_pyodide_is_the_recorded_bytes_and_nothing_more():
    folder = VENDOR / "pyodide"
    recorded = {}
    for line in (folder / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split()
        recorded[name] = digest
    assert sorted(recorded) == sorted(PYODIDE_FILES)
    for name, digest in recorded.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert "sourceMappingURL" not in (folder / "pyodide.mjs").read_text(encoding="utf-8")
    assert {p.name for p in folder.iterdir()} == {
        *PYODIDE_FILES,
        "SHA256SUMS",
        "LICENSE.pyodide",
        "LICENSE.python",
    }


def test_collectstatic_with_production_settings_writes_hashed_files_and_a_manifest(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY="collectstatic-only-" + "x" * 40,
        DJANGO_ALLOWED_HOSTS="localhost",
        # Placeholders, as in the Dockerfile: collectstatic connects to neither.
        DATABASE_URL="postgres://build@localhost:1/build",
        REDIS_URL="redis://localhost:1/0",
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr

    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
    for name in (
        "css/arena.css",
        "js/battle.js",
        "vendor/purify.min.js",
        "vendor/markdown-it.min.js",
    ):
        hashed = manifest[name]
        assert hashed != name and re.search(r"\.[0-9a-f]{12}\.", hashed), hashed
        assert (tmp_path / "static" / hashed).is_file()
        assert (tmp_path / "static" / (hashed + ".gz")).is_file()  # whitenoise's compression

    # The ES modules import each other by their hashed names, so that each is cached for good
    # and a module reached from two pages (or two imports) is one URL, run once.
    imports = {}
    for name in (
        "js/live.js",
        "js/battle.js",
        "js/mixed.js",
        "js/challenge.js",
        "js/render.js",
        "js/leaderboard.js",
        "js/i18n.js",
        "js/language.js",
        "js/reactions.js",
        "js/share.js",
        "js/attach.js",
        "js/run.js",
        "js/pyworker.js",
    ):
        text = (tmp_path / "static" / manifest[name]).read_text(encoding="utf-8")
        imports[name] = MODULE_IMPORT.findall(text)
    assert imports == {
        "js/live.js": [
            "./" + Path(manifest["js/battle.js"]).name,
            "./" + Path(manifest["js/i18n.js"]).name,
            "./" + Path(manifest["js/render.js"]).name,
            "./" + Path(manifest["js/attach.js"]).name,
        ],
        "js/battle.js": [
            "./" + Path(manifest["js/challenge.js"]).name,
            "./" + Path(manifest["js/i18n.js"]).name,
            "./" + Path(manifest["js/mixed.js"]).name,
            "./" + Path(manifest["js/reactions.js"]).name,
            "./" + Path(manifest["js/render.js"]).name,
            "./" + Path(manifest["js/run.js"]).name,
            "./" + Path(manifest["js/share.js"]).name,
        ],
        "js/mixed.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/challenge.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/render.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/leaderboard.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/i18n.js": [],
        "js/language.js": [],
        "js/reactions.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/share.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/attach.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/run.js": ["./" + Path(manifest["js/i18n.js"]).name],
        "js/pyworker.js": [],
    }
    # Pyodide's module is loaded by its hashed name; it fetches the rest from its own folder
    # by their plain names, which collectstatic keeps beside the hashed copies.
    assert manifest["vendor/pyodide/pyodide.mjs"] != "vendor/pyodide/pyodide.mjs"
    for name in PYODIDE_FILES:
        assert (tmp_path / "static" / "vendor" / "pyodide" / name).is_file()
