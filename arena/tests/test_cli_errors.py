"""Command-line errors are one line on standard error, never a traceback; progress bars
appear on a terminal only."""

import io
import json
import subprocess

import pytest
from django.core.management import CommandError, call_command

from arena.models import ArenaModel, Completion, Prompt
from arena.services.pool import PROMPT_CATEGORIES
from arena.tests.cli import ROOT, assert_one_line_error, manage, manage_argv, manage_env

GOOD = {"prompt": "What is 2+2?", "model": "my-model", "completion": "4"}


def write_lines(tmp_path, lines: list[str]):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def good(**fields) -> str:
    return json.dumps({**GOOD, **fields})


@pytest.mark.django_db(transaction=True)
def test_export_into_a_missing_folder_is_one_line_naming_the_folder(tmp_path):
    missing = tmp_path / "no-such-folder"
    result = manage("export_votes", "--format=trl", "-o", str(missing / "votes.jsonl"))
    assert_one_line_error(result, "--output", f"the folder {missing} does not exist")
    assert not missing.exists()


@pytest.mark.django_db(transaction=True)
def test_export_into_a_closed_pipe_exits_quietly():
    call_command("load_demo", verbosity=0)  # megabytes of JSONL: more than a pipe buffer holds
    export = subprocess.Popen(
        manage_argv("export_votes", "--format=arena"),
        cwd=ROOT,
        env=manage_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = export.stdout.readline()  # what `| head -1` reads before it exits
    export.stdout.close()
    _, stderr = export.communicate(timeout=120)
    assert json.loads(first)["question_id"]
    assert stderr.decode() == ""  # no BrokenPipeError, no traceback, no summary
    assert export.returncode == 1


@pytest.mark.django_db
def test_import_reports_every_bad_line_by_its_number_and_imports_nothing(tmp_path):
    path = write_lines(
        tmp_path,
        [
            good(category="coding", language="en-US"),
            "{not json",
            good(category="poetry"),
            "",
            good(language="english"),
            good(category="Math", language="zh-hant"),
            good(prompt=""),
        ],
    )
    with pytest.raises(CommandError) as failed:
        call_command("import_pool", str(path))
    lines = str(failed.value).splitlines()
    assert lines[0] == f"{path}: 4 malformed lines; nothing was imported."
    assert [line.split(":")[0] for line in lines[1:]] == ["line 2", "line 3", "line 5", "line 7"]
    assert "not valid JSON" in lines[1]
    assert f"'category' 'poetry' is not one of {', '.join(PROMPT_CATEGORIES)}." in lines[2]
    assert "'language' 'english' is not a language tag" in lines[3]
    assert "'prompt' must be a non-empty string" in lines[4]
    assert not (Prompt.objects.exists() or Completion.objects.exists())
    assert not ArenaModel.objects.exists()


@pytest.mark.django_db
def test_category_and_language_are_stored_in_their_canonical_case(tmp_path):
    path = write_lines(
        tmp_path,
        [
            good(category="Math", language="zh-hant-tw", prompt_id="1"),
            good(prompt="Hi", language="ES-419", prompt_id="2"),
        ],
    )
    call_command("import_pool", str(path), stdout=io.StringIO())
    stored = dict(Prompt.objects.values_list("external_id", "language"))
    assert stored == {"1": "zh-Hant-TW", "2": "es-419"}
    assert Prompt.objects.get(external_id="1").category == "math"
    assert Prompt.objects.get(external_id="2").category == ""  # optional


@pytest.mark.django_db
def test_a_prompt_id_given_other_turns_in_the_same_file_is_reported_with_the_rest(tmp_path):
    path = write_lines(
        tmp_path,
        [good(prompt_id="q1"), good(prompt_id="q1", prompt="Another"), good(category="x")],
    )
    with pytest.raises(CommandError) as failed:
        call_command("import_pool", str(path))
    assert [line.split(":")[0] for line in str(failed.value).splitlines()[1:]] == [
        "line 2",
        "line 3",
    ]
    assert not Prompt.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"prompt": "a\\ud800b", "model": "m", "completion": "x"}',
            "line 2: 'prompt' holds an unpaired surrogate",
        ),
        (
            '{"prompt": "a\\u0000b", "model": "m", "completion": "x"}',
            "line 2: 'prompt' holds a NUL character",
        ),
        (
            '{"prompt": "a", "model": "m\\u0000", "completion": "x"}',
            "line 2: 'model' holds a NUL character",
        ),
        (
            '{"prompt": "a", "model": "\\udc80m", "completion": "x"}',
            "line 2: 'model' holds an unpaired surrogate",
        ),
    ],
)
def test_a_nul_or_lone_surrogate_is_a_one_line_error_naming_the_line(tmp_path, line, expected):
    path = write_lines(tmp_path, [good(), line])
    result = manage("import_pool", str(path))
    assert_one_line_error(result, str(path), expected, "Nothing was imported.")
    assert not Prompt.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_invalid_utf8_is_reported_by_line(tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_bytes(good().encode() + b"\n" + b'{"prompt": "caf\xe9"}\n')
    result = manage("import_pool", str(path))
    assert_one_line_error(result, "line 2: not UTF-8 text")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.django_db
@pytest.mark.parametrize("stderr", [Terminal, io.StringIO])
def test_progress_bars_appear_on_a_terminal_only(tmp_path, monkeypatch, stderr):
    stream = stderr()
    monkeypatch.setattr("sys.stderr", stream)
    path = write_lines(tmp_path, [good(prompt=f"Question {n}?") for n in range(5)])
    call_command("import_pool", str(path), stdout=io.StringIO())
    shown = stream.getvalue()
    if stderr is Terminal:
        assert shown.count("checking lines") >= 1 and shown.count("writing the pool") >= 1
    else:
        assert shown == ""
