"""The harness plumbing the packs need: staged fixtures per mission, a served pages folder.

Everything is real: fixtures are staged into real git repositories, the pages
server is a real subprocess on a real socket, and ``evalkit run`` spawns a real
agent (the probe) whose answer says what it found around it.
"""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.eval import staging
from evalkit.eval.suite import SuiteError, load_suite
from tests._ports import port_busy
from tests._stream_builders import mission, write_suite
from tests.packs.conftest import (
    PROBE,
    SUITES,
    answer_of,
    free_port,
    invoke,
    probe_suite,
    read_json,
    verdicts,
)

CODING_FIXTURES = SUITES / "coding" / "fixtures"
PAGES = SUITES / "research" / "fixtures"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def entries(answer: str) -> set[str]:
    """The working-directory entries a probe's answer lists."""
    line = next(line for line in answer.splitlines() if line.startswith("entries="))
    return set(line.partition("=")[2].split(","))


def fetch(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as page:
        return page.read().decode("utf-8")


# -- staging ---------------------------------------------------------------------------------


def test_one_fixture_repository_becomes_the_working_directory(tmp_path: Path) -> None:
    root = staging.stage(CODING_FIXTURES, tmp_path / "work", only="textkit")
    assert (root / ".git").is_dir() and (root / "textkit" / "slug.py").is_file()
    assert git(root, "log", "--format=%s") == "textkit: initial import"
    assert git(root, "status", "--porcelain") == ""


def test_the_whole_fixtures_folder_is_staged_with_its_repositories(tmp_path: Path) -> None:
    root = staging.stage(CODING_FIXTURES, tmp_path / "work")
    assert sorted(p.name for p in root.iterdir()) == ["ledger", "shapes", "stockroom", "textkit"]
    for name in ("ledger", "shapes"):
        assert git(root / name, "log", "--format=%s") == f"{name}: initial import"


def test_a_folder_not_named_fixtures_is_copied_as_it_is(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("x\n1\n")
    (data / "sub" / "b.txt").write_text("b")
    assert (staging.stage(data, tmp_path / "all") / "sub" / "b.txt").read_text() == "b"
    assert [p.name for p in staging.stage(data, tmp_path / "one", only="a.csv").iterdir()] == [
        "a.csv"]
    assert [p.name for p in staging.stage(data, tmp_path / "dir", only="sub").iterdir()] == [
        "b.txt"]


def _suite(tmp_path: Path, **top: object) -> Path:
    return probe_suite(tmp_path / "s.yaml", ["m0", "m1"], **top)


def test_fixture_for_is_checked_before_anything_runs(tmp_path: Path) -> None:
    cases = [
        ({"fixture_for": {"m0": "textkit"}}, "names no fixtures folder"),
        ({"fixtures": str(CODING_FIXTURES), "fixture_for": {"nope": "textkit"}},
         "fixture_for names mission(s) nope, which the suite does not have"),
        ({"fixtures": str(CODING_FIXTURES), "fixture_for": {"m0": "textkits"}},
         "fixture_for names textkits, which"),
        ({"fixtures": str(CODING_FIXTURES), "fixture_for": {"m0": "build.py"}},
         "fixture_for names build.py, which"),
        ({"fixtures": str(tmp_path / "absent")}, "does not exist"),
    ]
    for top, said in cases:
        suite = load_suite(_suite(tmp_path, **top))
        with pytest.raises(EvalkitError, match=said.replace("(", r"\(").replace(")", r"\)")):
            staging.fixture_plan(suite, suite.missions)
        out = tmp_path / "out"
        result = invoke("run", "--suite", tmp_path / "s.yaml", "--out", out, "--", *PROBE)
        assert result.exit_code == 2 and said in result.stderr, result.stderr
        assert not out.exists()  # refused before the output folder was made


def test_the_loader_type_checks_the_new_keys(tmp_path: Path) -> None:
    path = write_suite(tmp_path / "s.yaml", [mission("a")], fixture_for={"a": 3},
                       serve=["pages"], serve_port="8808")
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    problems = caught.value.problems
    assert any("'fixture_for'" in p and "entry 'a' must map a string to a string" in p
               for p in problems)
    assert any("'serve'" in p and "must be a string" in p for p in problems)
    assert any("'serve_port'" in p and "must be an integer" in p for p in problems)
    good = write_suite(tmp_path / "g.yaml", [mission("a")], fixture_for={"a": "x"},
                       serve="pages", serve_port=8808)
    assert load_suite(good).extras["fixture_for"] == {"a": "x"}


@pytest.mark.slow
def test_each_mission_runs_in_its_own_staged_repository(tmp_path: Path) -> None:
    path = _suite(tmp_path, fixtures=str(CODING_FIXTURES),
                  fixture_for={"m0": "textkit", "m1": "ledger"})
    out = tmp_path / "out"
    result = invoke("run", "--suite", path, "--out", out, "--", *PROBE)
    assert result.exit_code == 0, result.stderr
    assert "head=textkit: initial import" in answer_of(out / "m0")
    assert "head=ledger: initial import" in answer_of(out / "m1")
    assert {".git", ".gitignore", "README.md", "ledger", "pyproject.toml", "tests"} <= entries(
        answer_of(out / "m1"))
    whole = answer_of(out / "t0")  # no fixture_for: the whole folder, repositories inside
    assert {"ledger", "shapes", "stockroom", "textkit"} <= entries(whole)
    assert not {"build.py", "fixtures.json"} & entries(whole) and "head=" in whole.splitlines()
    work = (out / "m0" / "work").resolve()
    assert read_json(out / "m0" / "command.json")["cwd"] == str(work)
    assert git(work, "status", "--porcelain") == ""
    assert not (CODING_FIXTURES / "textkit" / ".git").exists()  # the committed tree untouched
    assert all(v["passed"] for v in verdicts(out).values())


# -- serving -----------------------------------------------------------------------------------


def _served_suite(tmp_path: Path, port: int, **top: object) -> Path:
    return _suite(tmp_path, fixtures=str(PAGES), serve="pages", serve_port=port, **top)


@pytest.mark.slow
def test_the_pages_server_runs_for_the_block_and_stops_after(tmp_path: Path) -> None:
    port = free_port()
    suite = load_suite(_served_suite(tmp_path, port))
    with staging.serving(suite) as served:
        assert served.url == f"http://127.0.0.1:{port}/"
        assert served.env == {"EVALKIT_ALLOWED_HOSTS": f"127.0.0.1:{port}",
                              "EVALKIT_PAGES_URL": served.url}
        assert "Fenmoor Water Board" in fetch(served.url)
        with pytest.raises(urllib.error.HTTPError) as missing:
            fetch(served.url + "annual-2024.html")
        assert missing.value.code == 404
    assert not port_busy(port)
    with staging.serving(load_suite(_suite(tmp_path))) as served:
        assert served.url is None and served.env == {}


@pytest.mark.slow
def test_a_busy_port_refuses_the_run_in_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        suite = load_suite(_served_suite(tmp_path, port))
        with pytest.raises(EvalkitError, match=rf"127\.0\.0\.1:{port}, and that port is busy"):
            with staging.serving(suite):
                pass
        out = tmp_path / "out"
        result = invoke("run", "--suite", tmp_path / "s.yaml", "--out", out, "--", *PROBE)
        assert result.exit_code == 2 and "port is busy" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_serve_refusals(tmp_path: Path) -> None:
    cases = [({"fixtures": str(PAGES), "serve": "ftp"}, "is not a server evalkit knows"),
             ({"serve_port": 8808}, "gives serve_port but not what to serve"),
             ({"serve": "pages"}, "serves the fixtures folder, and the suite has none"),
             ({"fixtures": str(PAGES), "serve": "pages", "serve_port": 70000}, "0..65535")]
    for top, said in cases:
        with pytest.raises(EvalkitError, match=said):
            staging.serve_spec(load_suite(_suite(tmp_path, **top)))


@pytest.mark.slow
def test_every_agent_of_a_served_run_reads_the_pages_and_only_that_host(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "out"
    result = invoke("run", "--suite", _served_suite(tmp_path, port), "--out", out, "--jobs", "2",
                    "--", *PROBE)
    assert result.exit_code == 0, result.stderr
    for key in ("m0", "t2", "h1"):
        said = answer_of(out / key)
        assert f"allowed=127.0.0.1:{port}" in said
        assert "title=Fenmoor Water Board — publications" in said
        assert "index.html" in said  # the pages were staged into its working directory too
    assert read_json(out / "run.json")["served"] == f"http://127.0.0.1:{port}/"
    assert not port_busy(port)  # stopped at the end of the run
