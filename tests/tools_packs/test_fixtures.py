"""The packs' fixtures: staged for real, and the figures in them pinned.

The figures asserted here are the ones missions and grounding grammars can
rely on; a change to a fixture file that moves one of them fails here first.
"""

from __future__ import annotations

import csv
import filecmp
import importlib.util
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from evalkit.errors import EvalkitError
from evalkit.planes.fixtures import GIT_DATE, GIT_EMAIL, GIT_NAME, stage_fixtures
from evalkit.runtime.prompts import RESULT_VIEW_CHARS
from evalkit.runtime.tools.research import html_to_text
from tests.tools_packs.conftest import ANALYST, CODING, RESEARCH

REPOS = ["ledger", "shapes", "stockroom", "textkit"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coding_fixtures_build",
                                                  CODING / "fixtures" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- staging ---------------------------------------------------------------------------


@pytest.mark.slow
def test_staging_the_coding_pack_makes_real_reproducible_repositories(tmp_path: Path) -> None:
    first = stage_fixtures(CODING, tmp_path / "one")
    second = stage_fixtures(CODING, tmp_path / "two")
    assert sorted(p.name for p in first.iterdir()) == REPOS  # no build.py, no fixtures.json
    for name in REPOS:
        repo = first / name
        assert (repo / ".git").is_dir()
        assert git(repo, "status", "--porcelain", "--ignored") == ""
        assert git(repo, "log", "--format=%an <%ae>|%aI|%cI|%s") == (
            f"{GIT_NAME} <{GIT_EMAIL}>|{GIT_DATE}|{GIT_DATE}|{name}: initial import\n")
        assert git(repo, "branch", "--show-current") == "main\n"
        head = git(repo, "rev-parse", "HEAD")
        assert git(second / name, "rev-parse", "HEAD") == head  # same tree, same commit
        alone = stage_fixtures(CODING, tmp_path / f"only-{name}", only=name)
        assert git(alone, "rev-parse", "HEAD") == head
        tracked = git(repo, "ls-files").split()
        committed = sorted(p.relative_to(CODING / "fixtures" / name).as_posix()
                           for p in (CODING / "fixtures" / name).rglob("*")
                           if p.is_file() and not {"__pycache__", ".ruff_cache",
                                                    ".pytest_cache"} & set(p.parts))
        assert sorted(tracked) == committed


@pytest.mark.slow
def test_build_py_matches_the_committed_trees_and_builds_the_same_commits(tmp_path: Path) -> None:
    build = load_build()
    assert build.differences() == []
    assert sorted(build.REPOS) == REPOS
    script = CODING / "fixtures" / "build.py"
    checked = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    made = subprocess.run([sys.executable, str(script), str(tmp_path / "built")],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    built = dict(line.split() for line in made.stdout.splitlines())
    staged = stage_fixtures(CODING, tmp_path / "staged")
    assert built == {name: git(staged / name, "rev-parse", "HEAD").strip() for name in REPOS}


def test_build_py_notices_drift(tmp_path: Path) -> None:
    build = load_build()
    for name in REPOS:
        build.write_tree(name, tmp_path / name)
    assert build.differences(tmp_path) == []
    (tmp_path / "textkit" / "textkit" / "slug.py").write_text("changed\n")
    (tmp_path / "shapes" / "extra.py").write_text("")
    (tmp_path / "ledger" / "README.md").unlink()
    assert build.differences(tmp_path) == ["ledger/README.md: missing",
                                           "shapes/extra.py: not in build.py",
                                           "textkit/textkit/slug.py: differs from build.py"]


def test_staging_plain_packs_copies_their_files(tmp_path: Path) -> None:
    for pack in (ANALYST, RESEARCH):
        dest = stage_fixtures(pack, tmp_path / pack.name)
        compared = filecmp.dircmp(pack / "fixtures", dest)
        assert compared.left_only == compared.right_only == compared.diff_files == []
        assert not (dest / ".git").exists()
    one = stage_fixtures(ANALYST, tmp_path / "one", only="sales.csv")
    assert [p.name for p in one.iterdir()] == ["sales.csv"]


def test_staging_refusals(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    with pytest.raises(EvalkitError, match="exists and is not empty"):
        stage_fixtures(ANALYST, busy)
    with pytest.raises(EvalkitError, match="has no fixtures/ folder"):
        stage_fixtures(tmp_path, tmp_path / "dest")
    with pytest.raises(EvalkitError, match=r"no fixture 'returns.csv' in .* \(there are: "
                                           r"sales.csv, server.log, visits.csv\)"):
        stage_fixtures(ANALYST, tmp_path / "dest", only="returns.csv")
    for name in ("build.py", "fixtures.json", "../analyst", ""):
        with pytest.raises(EvalkitError, match="is not a fixture to stage"):
            stage_fixtures(CODING, tmp_path / "dest2", only=name)


# -- analyst: the figures ----------------------------------------------------------------


def test_sales_figures() -> None:
    rows = list(csv.DictReader((ANALYST / "fixtures" / "sales.csv").open()))
    totals = {r["order_id"]: int(r["units"]) * int(r["unit_price"]) for r in rows}
    assert len(rows) == 48 and sum(totals.values()) == 35528
    values = list(totals.values())
    q1, _, q3 = statistics.quantiles(values, n=4)
    iqr_outliers = sorted(k for k, v in totals.items() if v > q3 + 1.5 * (q3 - q1))
    mean, sd = statistics.mean(values), statistics.stdev(values)
    z_outliers = sorted(k for k, v in totals.items() if (v - mean) / sd > 3)
    assert iqr_outliers == z_outliers == ["SO-1012", "SO-1028", "SO-1041"]
    assert [totals[k] for k in iqr_outliers] == [8320, 9120, 9600]
    assert max(v for k, v in totals.items() if k not in iqr_outliers) == 572
    assert sum(v for k, v in totals.items() if k not in iqr_outliers) == 8488
    assert statistics.median(values) == 151
    by_region: Counter[str] = Counter()
    for r in rows:
        by_region[r["region"]] += totals[r["order_id"]]
    assert dict(by_region) == {"North": 12301, "West": 10960, "East": 10669, "South": 1598}


def test_visits_figures() -> None:
    rows = list(csv.DictReader((ANALYST / "fixtures" / "visits.csv").open()))
    assert len(rows) == 24 and len({r["store"] for r in rows}) == 8
    assert sum(int(r["visitors"]) for r in rows) == 30550
    assert sum(int(r["revenue"]) for r in rows) == 305820
    revenue: Counter[str] = Counter()
    visitors: Counter[str] = Counter()
    for r in rows:
        revenue[r["region"]] += int(r["revenue"])
        visitors[r["month"]] += int(r["visitors"])
    assert dict(revenue) == {"North": 87060, "South": 77710, "East": 69000, "West": 72050}
    assert dict(visitors) == {"2024-01": 9850, "2024-02": 9600, "2024-03": 11100}


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (INFO|WARN|ERROR) "
                      r"(GET|POST|PUT|DELETE) (/\S*) (\d{3}) (\d+)ms$")


def test_server_log_figures() -> None:
    lines = (ANALYST / "fixtures" / "server.log").read_text().splitlines()
    parsed = [LOG_LINE.match(line) for line in lines]
    good = [m for m in parsed if m]
    assert len(lines) == 84 and len(good) == 78
    assert [n for n, m in enumerate(parsed, start=1) if not m] == [8, 20, 34, 47, 59, 72]
    assert Counter(m[2] for m in good) == {"INFO": 69, "WARN": 5, "ERROR": 4}
    assert Counter(m[5] for m in good) == {"200": 39, "201": 30, "404": 5, "500": 3, "503": 1}
    ms = [int(m[6]) for m in good]
    assert sum(ms) == 13152 and statistics.median(ms) == 87 and max(ms) == 1988
    assert round(statistics.mean(ms), 1) == 168.6
    slowest = max(good, key=lambda m: int(m[6]))
    assert slowest[0] == "2024-03-14T10:12:33Z ERROR GET /health 500 1988ms"
    assert sum("ERROR" in line for line in lines) == 5  # one of them is unparseable


# -- research: the pages ------------------------------------------------------------------


def page_text(name: str) -> str:
    path = RESEARCH / "fixtures" / name
    return html_to_text(path.read_text(encoding="utf-8"), f"http://127.0.0.1:8000/{name}")


def test_research_pages() -> None:
    pages = sorted(p.name for p in (RESEARCH / "fixtures").iterdir())
    assert pages == ["annual-2022.html", "annual-2023.html", "appendix-sites-2023.html",
                     "index.html", "inspection-log-2023.html"]
    index = page_text("index.html")
    assert "(http://127.0.0.1:8000/annual-2024.html)" in index  # linked, and not there
    texts = {name: page_text(name) for name in pages}
    assert [n for n, t in texts.items() if "1,284" in t] == ["appendix-sites-2023.html"]
    assert "[monitoring appendix](http://127.0.0.1:8000/appendix-sites-2023.html)" in texts[
        "annual-2023.html"]
    log = texts["inspection-log-2023.html"]
    assert log.count("27,365") == 1 and log.index("27,365") > 2 * RESULT_VIEW_CHARS
    assert [n for n, t in texts.items() if "27,365" in t] == ["inspection-log-2023.html"]
    assert log.count("Visit ") == 96
