"""docs/GUIDE.md, executed: every block a newcomer is told to run is run here, in order.

The guide's fenced blocks say what they are in their info string:

- ``yaml file=PATH`` / ``python file=PATH``: a file the reader writes; written here;
- ``bash``: commands the reader types; run by bash in one fresh folder, in order,
  with ``evalkit`` on PATH, each block expected to exit 0;
- ``bash env``: the endpoint settings; the test exports the same names, pointed at a
  chat-completions server on a real socket (tests/runtime/chat_server.py) that
  answers the one mission as a model would; ``bash env=openai``: the same, as the
  ``openai`` client reads them (step 8's recorded agent);
- ``bash install``: the one block not run (the test runs in the installed evalkit);
  checked to install an extra that exists.

So the page cannot drift from the program: a renamed flag, a changed default, a
command that stops working on a one-mission suite, fails here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.extras import EXTRAS
from tests.runtime.chat_server import ChatServer

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "GUIDE.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(info.strip(), body) for info, body in FENCE.findall(GUIDE.read_text("utf-8"))]


def _shim(folder: Path) -> Path:
    """A bin folder whose ``evalkit`` and ``python`` are this interpreter and this checkout."""
    folder.mkdir()
    (folder / "evalkit").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} '
                                    '-m evalkit.cli "$@"\n')
    (folder / "evalkit").chmod(0o755)
    (folder / "python").symlink_to(sys.executable)
    return folder


def test_the_guide_says_what_each_block_is():
    kinds = [info.split()[0] if info else "" for info, _ in blocks()]
    assert set(kinds) <= {"bash", "yaml", "python"}, kinds
    assert sum(info == "bash install" for info, _ in blocks()) == 1
    install = next(body for info, body in blocks() if info == "bash install")
    extras = re.findall(r"evalkit\[(\w+)\]", install)
    assert extras and set(extras) <= set(EXTRAS)


@pytest.mark.parametrize("agent", ["my_agent.py", "openai_agent.py"])
def test_the_example_agent_is_the_one_the_guide_shows(agent):
    shown = next(body for info, body in blocks() if info == f"python file={agent}")
    assert shown == (ROOT / "examples" / agent).read_text("utf-8")
    assert len(shown.splitlines()) <= 41


@pytest.mark.slow
def test_every_command_of_the_guide_runs_in_a_fresh_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "suites").symlink_to(ROOT / "suites")  # step 7 measures the shipped stub suite
    bin_dir = _shim(tmp_path / "bin")
    key = "sk-guide-test-key-00000000000000"
    with ChatServer() as server:
        # Step 4's mission, answered as a model would: the tool, then the answer.
        server.reply('{"tool": "mcp.multiply", "arguments": {"a": 17, "b": 23}}')
        server.reply('{"answer": "17 times 23 is 391."}')
        # Step 8's recorded openai agent, under run and then by hand: a native tool call,
        # then the answer, each time.
        for _ in range(2):
            server.reply(tool_calls=[{"id": "call_1", "type": "function", "function": {
                "name": "multiply", "arguments": '{"a": 17, "b": 23}'}}])
            server.reply("17 times 23 is 391.")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
               "PYTHONPATH": str(ROOT), "EVALKIT_HOME": str(tmp_path / "state")}
        ran = []
        for info, body in blocks():
            if info.startswith(("yaml file=", "python file=")):
                target = work / info.split("file=", 1)[1]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(body, encoding="utf-8")
            elif info == "bash env=openai":
                names = re.findall(r"\b(OPENAI_\w+)=", body)
                assert names == ["OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"]
                env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=key,
                           OPENAI_MODEL="my-model")
            elif info == "bash env":
                names = re.findall(r"\b(EVALKIT_\w+)=", body)
                assert names == ["EVALKIT_API_BASE", "EVALKIT_MODEL", "EVALKIT_API_KEY"]
                env.update(EVALKIT_API_BASE=server.base_url, EVALKIT_MODEL="my-model",
                           EVALKIT_API_KEY=key)
            elif info == "bash":
                done = subprocess.run(["bash", "-e", "-c", body], cwd=work, env=env,
                                      capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, (body, done.stdout, done.stderr)
                assert "Traceback" not in done.stderr
                ran.append((body, done))
        assert len(server.requests) == 6  # steps 4 and 8 (twice); step 8's replay did not
    said = {body.split()[1]: done for body, done in ran}
    assert "too small for a held-out half" in said["check"].stdout
    assert "[1/1] PASS  times" in said["run"].stderr
    assert (work / "runs" / "mine" / "report.html").is_file()
    report = (work / "runs" / "mine" / "report.html").read_text("utf-8")
    assert "called calc.multiply" in report and "17 times 23 is 391." in report
    live = (work / "runs" / "live" / "report.json").read_text("utf-8")
    assert '"passed": true' in live
    for path in (work / "runs").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert (work / "runs" / "compare" / "matrix.json").is_file()
    recorded = (work / "runs" / "recorded" / "report.json").read_text("utf-8")
    assert '"passed": true' in recorded
    (run,) = (work / "runs" / "recorded" / "times" / "runs").iterdir()
    assert len((run / "model.jsonl").read_text("utf-8").splitlines()) == 2
    assert len(list((work / "recs" / "times").iterdir())) == 1
    assert '"passed": true' in (work / "runs" / "replayed" / "report.json").read_text("utf-8")
    for path in (work / "recs").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    # The guide's run commands run again as they are (--overwrite).
    again = next(body for body, _ in ran if body.startswith("evalkit run --suite my-suite "
                                                            "--out runs/mine"))
    assert subprocess.run(["bash", "-e", "-c", again], cwd=work, env=env,
                          capture_output=True, timeout=120).returncode == 0


def test_other_pages_point_to_the_one_exit_code_table():
    for page in ("README.md", "EVAL.md", "docs/MEASURE.md"):
        assert "GUIDE.md#exit-codes" in (ROOT / page).read_text("utf-8"), page
