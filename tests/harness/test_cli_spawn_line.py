"""``run`` and ``measure`` take only the options they know; a run that reached no agent says so.

Real commands end to end (click's runner in-process for the parser, real
agent processes spawned for the all-infrastructure cases).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness.conftest import invoke

#: An agent that never starts its mission: it says why on stderr and leaves.
SICK = [sys.executable, "-c", "import sys; sys.exit('cannot reach the endpoint at http://x/v1')"]


@pytest.mark.parametrize("command", ["run", "measure"])
def test_an_unknown_option_is_a_usage_error_not_the_agent(suite: Path, tmp_path: Path,
                                                          command: str) -> None:
    """``measure … --allow-failures`` used to run every trial with "--allow-failures" as the
    agent, all "could not start", and print "no detectable difference", exit 0."""
    out = tmp_path / "out"
    result = invoke(command, "--suite", suite, "--out", out, "--alow-failures", "--", "agent")
    assert result.exit_code == 2
    assert "No such option '--alow-failures'" in result.output
    assert not out.exists()  # refused before anything ran
    if command == "run":
        assert "Did you mean '--allow-failures'?" in result.output


@pytest.mark.slow
def test_the_agent_after_double_dash_keeps_its_own_options(suite: Path, tmp_path: Path) -> None:
    result = invoke("run", "--suite", suite, "--out", tmp_path / "out", "--quiet", "--",
                    *SICK[:2], "import sys; sys.exit(sys.argv[1])", "--its-own-flag")
    assert "No such option" not in result.output
    assert result.exit_code == 1


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "measure"])
def test_every_try_an_infrastructure_failure_exits_1_saying_why(suite: Path, tmp_path: Path,
                                                                command: str) -> None:
    extra = ["--allow-failures"] if command == "run" else ["--config", "direct"]
    result = invoke(command, "--suite", suite, "--out", tmp_path / "out", "--quiet", *extra,
                    "--", *SICK)
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: every one of the 8 tries was an infrastructure failure")
    assert last.endswith("first causes: cannot reach the endpoint at http://x/v1 "
                         "(`evalkit doctor` says what this machine lacks)")


#: An agent that writes a stream and gives up: a failure of the agent, not of the machine room.
GIVES_UP = """
import json, os, sys
fd = int(sys.argv[sys.argv.index("--events") + 1][3:])
for record in ({"event": "mission_started", "schema_version": 1, "objective": sys.argv[1],
                "catalogue": [], "gated": [], "max_steps": 0, "history": 0},
               {"event": "mission_finished", "outcome": "incomplete", "steps": 0,
                "max_steps": 0}):
    os.write(fd, (json.dumps(record) + "\\n").encode())
"""


@pytest.mark.slow
def test_a_run_whose_agent_was_reached_is_not_called_infrastructure(suite: Path,
                                                                    tmp_path: Path) -> None:
    result = invoke("run", "--suite", suite, "--out", tmp_path / "out", "--quiet",
                    "--allow-failures", "--", sys.executable, "-c", GIVES_UP)
    assert result.exit_code == 0, result.output
    assert "infrastructure failure" not in result.output
    halves = [line for line in result.output.splitlines() if " passed; " in line]
    assert halves and all(line.endswith(" failed, 0 missing, 0 infra errors") for line in halves)
