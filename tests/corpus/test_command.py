"""``evalkit record-corpus`` itself: what it records, what it refuses, what it keeps safe."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.eval.corpus import TITLE, plan, record_corpus, relativise, variants
from evalkit.eval.suite import load_suite
from evalkit.forkserver import client
from tests.corpus.conftest import SUITES


def _copy_stub(tmp_path: Path) -> Path:
    suites = tmp_path / "suites"
    shutil.copytree(SUITES / "stub", suites / "stub")
    return suites


def test_the_plan_is_every_suite_with_good_first_then_each_other_variant() -> None:
    found = [(t.folder, t.variant) for t in plan(SUITES)]
    assert found == [(s, v) for s in ("analyst", "coding", "research", "stub")
                     for v in ("good", "bad")]


def test_variants_come_from_the_agents_folder(tmp_path: Path) -> None:
    suites = _copy_stub(tmp_path)
    agents = suites / "stub" / "agents"
    shutil.copy(agents / "chaining.bad.yaml", agents / "chaining.sloppy.yaml")
    (agents / "not-a-mission.other.yaml").write_text("[]\n", encoding="utf-8")
    (agents / "notes.txt").write_text("not an agent\n", encoding="utf-8")
    assert variants(load_suite(suites / "stub")) == ["good", "bad", "sloppy"]


def test_relativise_names_the_interpreter_python_and_paths_by_the_repository(
        tmp_path: Path) -> None:
    root = tmp_path / "repo"
    capture = {"argv": [sys.executable, "--script", f"{root}/suites/s/agents/k.yaml",
                        "--mcp-stdio", f"{sys.executable} -m evalkit.planes.stub"],
               "cwd": str(root), "wall_s": 1.5, "elsewhere": "/opt/x"}
    assert relativise(capture, root) == {
        "argv": ["python", "--script", "suites/s/agents/k.yaml", "--mcp-stdio",
                 "python -m evalkit.planes.stub"],
        "cwd": ".", "wall_s": 1.5, "elsewhere": "/opt/x"}


def test_an_unknown_suite_and_a_folder_that_is_not_a_corpus_are_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["record-corpus", "--suites", str(SUITES), "--suite", "nope",
                                "--out", str(tmp_path / "c")])
    assert done.exit_code == 2
    assert "no shipped suite named nope" in done.output
    assert "analyst, coding, research, stub" in done.output
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("mine\n", encoding="utf-8")
    done = runner.invoke(main, ["record-corpus", "--suites", str(SUITES), "--suite", "stub",
                                "--out", str(busy)])
    assert done.exit_code == 2
    assert "holds something that is not a recorded corpus" in done.output
    assert sorted(p.name for p in busy.iterdir()) == ["thesis.tex"]


@pytest.mark.slow
def test_a_recording_that_fails_puts_the_previous_one_back(tmp_path: Path) -> None:
    suites = _copy_stub(tmp_path)
    missions = suites / "stub" / "missions.yaml"
    data = yaml.safe_load(missions.read_text(encoding="utf-8"))
    for m in data["missions"]:
        m["split"] = "train"  # no held-out half: `evalkit run` refuses the suite
    missions.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    out = tmp_path / "recordings"
    (out / "stub" / "good").mkdir(parents=True)
    (out / "stub" / "good" / "kept.txt").write_text("before\n", encoding="utf-8")
    (out / "README.md").write_text(TITLE + "\n", encoding="utf-8")
    with pytest.raises(EvalkitError, match=r"recording stub/good failed \(evalkit run exited 1\)"):
        record_corpus(out, write=lambda report, folder: None, suites_dir=suites)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "README.md", "stub", "stub/good", "stub/good/kept.txt"]


@pytest.mark.slow
def test_the_corpus_library_never_imports_the_runtime() -> None:
    code = ("import sys, evalkit.eval.corpus, evalkit.commands.corpus\n"
            "print(sorted(m for m in sys.modules if m.startswith(('evalkit.runtime', 'mcp', "
            "'openai'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.spawns  # no session server named: the corpus starts its own
def test_every_recording_run_forks_from_one_server(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """Each ``evalkit run`` is told the corpus's fork server (``SOCKET_ENV``) instead of
    starting and importing one of its own: the one this process's environment names, else
    one started for the regeneration and stopped after it; none when forking is off."""
    monkeypatch.setenv(client.SOCKET_ENV, "/somewhere/socket")
    with client.named_to_children() as told:
        assert told == {client.SOCKET_ENV: "/somewhere/socket"}
    monkeypatch.delenv(client.SOCKET_ENV)
    with client.named_to_children() as told:
        [(name, address)] = told.items()
        assert name == client.SOCKET_ENV
        asked = client.ForkServer(address=address)
        forked = asked.fork([sys.executable, "-m", "evalkit.cli", "--version"],
                            stdout=subprocess.DEVNULL, cwd=tmp_path)
        assert forked is not None and forked.wait(30) == 0, asked.last_refusal
    assert not Path(address).exists()  # stopped, its folder gone
    monkeypatch.setenv("EVALKIT_FORKSERVER", "off")
    with client.named_to_children() as told:
        assert told == {"EVALKIT_FORKSERVER": "off"}
