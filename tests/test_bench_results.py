"""Every benchmark keeps its runs as dated files, and the pages about them link to real files.

bench/README.md holds the method; bench/results/<YYYY-MM-DD>-<bench>.md|.txt the recorded runs
(``make bench-record`` writes the ``.txt`` ones). A benchmark is a ``bench/*.py`` script (one
with a ``__main__`` block; ``bench/shape.py`` is a helper the others import).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
RESULT_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9_-]+)\.(md|txt)$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Recorded by hand before ``make bench-record`` wrote a header.
WITHOUT_HEADER = {"2026-12-02-reward-model.txt"}


def benchmark_scripts() -> list[Path]:
    return sorted(
        path
        for path in BENCH.glob("*.py")
        if re.search(r"^if __name__ == .__main__.:", path.read_text(), flags=re.M)
    )


def result_files() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_file())


def local_links(page: Path) -> list[tuple[str, Path]]:
    """Each relative link of a Markdown page, resolved against the page's folder."""
    links = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        links.append((target, (page.parent / target.split("#", 1)[0]).resolve()))
    return links


def test_the_benchmarks_are_found() -> None:
    names = {path.stem for path in benchmark_scripts()}
    assert {"ratings", "stability", "votes", "reward_model"} <= names
    assert "shape" not in names


@pytest.mark.parametrize("script", benchmark_scripts(), ids=lambda path: path.stem)
def test_each_benchmark_has_a_dated_results_file(script: Path) -> None:
    wanted = {script.stem, script.stem.replace("_", "-")}
    found = [
        path.name
        for path in result_files()
        if (match := RESULT_NAME.match(path.name)) and match.group(2) in wanted
    ]
    assert found, f"no bench/results/<YYYY-MM-DD>-{script.stem}.md or .txt for {script.name}"


def test_results_files_are_named_by_a_real_date_and_a_benchmark() -> None:
    for path in result_files():
        match = RESULT_NAME.match(path.name)
        assert match, f"{path.name} is not <YYYY-MM-DD>-<bench>.md or .txt"
        datetime.date.fromisoformat(match.group(1))


def test_recorded_runs_start_with_their_header() -> None:
    for path in result_files():
        if path.suffix == ".txt" and path.name not in WITHOUT_HEADER:
            header = path.read_text().splitlines()[:2]
            assert header[0].startswith("# command: "), path.name
            assert re.match(r"# date: .*; machine: \d+ cores.*; commit: [0-9a-f]{7,}", header[1]), (
                path.name
            )


@pytest.mark.parametrize("page", ["bench/README.md", "docs/benchmarks.md"])
def test_benchmark_pages_link_only_to_files_that_exist(page: str) -> None:
    links = local_links(ROOT / page)
    assert links
    missing = [target for target, path in links if not path.exists()]
    assert not missing, f"{page} links to missing files: {missing}"


def test_the_readme_links_to_the_latest_results_of_each_benchmark() -> None:
    linked = {path for _, path in local_links(BENCH / "README.md")}
    latest: dict[str, Path] = {}
    for path in result_files():
        match = RESULT_NAME.match(path.name)
        assert match
        bench = match.group(2).replace("_", "-")
        if bench not in latest or path.name > latest[bench].name:
            latest[bench] = path
    unlinked = sorted(path.name for path in latest.values() if path.resolve() not in linked)
    assert not unlinked, f"bench/README.md does not link to {unlinked}"
