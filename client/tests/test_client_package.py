"""The client stands alone: importing it and every adapter loads neither Django nor any of the
trainers' libraries (a fresh interpreter, this checkout's package only), and it ships its
type information."""

import subprocess
import sys
import tomllib
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[1]


def test_the_client_and_its_adapters_import_nothing_outside_the_standard_library():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import arena_env, arena_env.adapters.trl, arena_env.adapters.atropos,"
        " arena_env.adapters.verifiers\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "outside = sorted(m for m in new - {'arena_env'}"
        " if m not in sys.stdlib_module_names and not m.startswith('_'))\n"
        "print(','.join(outside))\n"
    )
    result = subprocess.run(
        [sys.executable, "-s", "-c", code],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(CLIENT_DIR)},
    )
    assert result.stdout.strip() == ""


def test_the_package_declares_no_dependency_and_ships_py_typed():
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]
    assert project["name"] == "arena-env"
    assert project["dependencies"] == []
    assert (CLIENT_DIR / "arena_env" / "py.typed").is_file()
