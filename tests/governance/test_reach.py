"""Governance state out of the agent's reach, even when an operator puts it in the root.

The run store, audit log, approvals and signing key default to the state folder
outside any mission root. Here they are deliberately put *inside* the mission
root (``EVALKIT_RUNS=.evalkit/runs``) and the agent tries to read and rewrite
them through ``fs`` and through sandboxed code — and to find a descriptor of
them among its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.store.layout import runs_root
from evalkit.store.state import state_home
from tests.governance.conftest import (
    answer,
    call,
    clean_env,
    cli,
    needs_bwrap,
    read_jsonl,
    write_script,
)

PROBE = r"""
echo "listing: $(ls -A .evalkit | tr '\n' ' ')"
echo "runs: $(ls -A .evalkit/runs 2>&1 | wc -l)"
cat "$EVALKIT_HOME/keys/evalkit.key" >/dev/null 2>&1 && echo "KEY READ" || echo "key hidden"
for fd in /proc/self/fd/*; do echo "fd $(readlink "$fd")"; done
echo forged > .evalkit/approvals/ap_0000000000000000.json 2>&1 || echo "approvals unwritable"
mkdir -p .evalkit/runs/run_forged 2>&1 || echo "runs unwritable"
"""


def test_the_state_folder_defaults_outside_the_mission_root(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "me")}
    assert state_home(env) == tmp_path / "me" / ".local" / "state" / "evalkit"
    assert runs_root(env) == state_home(env) / "runs"
    xdg = {**env, "XDG_STATE_HOME": str(tmp_path / "xdg")}
    assert state_home(xdg) == tmp_path / "xdg" / "evalkit"
    assert state_home({**xdg, "EVALKIT_HOME": str(tmp_path / "home")}) == tmp_path / "home"
    assert state_home({**env, "XDG_STATE_HOME": "relative"}) == state_home(env)


def _inside(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    inside = tmp_path / ".evalkit"
    return clean_env(tmp_path, EVALKIT_HOME=str(home), EVALKIT_RUNS=str(inside / "runs"),
                     EVALKIT_AUDIT=str(inside / "audit"),
                     EVALKIT_APPROVALS=str(inside / "approvals"))


def _mission(tmp_path: Path, name: str, steps: list, *flags: str) -> list[dict]:
    script = write_script(tmp_path.parent / f"{name}.json", steps)
    done = cli(tmp_path, "mission", "do it", "--script", str(script), "--profile", "dev",
               "--events", str(tmp_path.parent / f"{name}.jsonl"), *flags, env=_inside(tmp_path))
    assert done.returncode == 0, done.stderr
    return read_jsonl(tmp_path.parent / f"{name}.jsonl")


@pytest.mark.slow
def test_fs_refuses_and_hides_state_put_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    first = _mission(root, "first", [call("fs", action="write", path="a.txt", content="x"),
                                     answer("ok")])
    run_id = first[0]["run_id"]
    assert (root / ".evalkit" / "runs" / run_id / "events.jsonl").is_file()
    records = _mission(root, "second", [
        call("fs", action="list", path="."),
        call("fs", action="read", path=f".evalkit/runs/{run_id}/events.jsonl"),
        call("fs", action="write", path=f".evalkit/runs/{run_id}/events.jsonl", content="{}"),
        call("fs", action="write", path=".evalkit/approvals/ap_0000000000000000.json",
             content="{}"),
        call("fs", action="list", path=".evalkit"),
        answer("done")])
    results = [r for r in records if r["event"] == "tool_result"]
    assert results[0]["output"].split("\n") == [".evalkit/", "a.txt", "notes.txt"]
    for refused in results[1:4]:
        assert not refused["ok"] and "evalkit's own state" in refused["error"], refused
    assert results[4]["output"] == "(empty directory)"  # runs/, audit/, approvals/ left out
    assert not (root / ".evalkit" / "approvals" / "ap_0000000000000000.json").exists()
    sealed = root / ".evalkit" / "runs" / run_id / "events.jsonl"
    assert json.loads(sealed.read_text().splitlines()[0])["record"]["event"] == "mission_started"


@pytest.mark.slow
@needs_bwrap
def test_sandboxed_code_cannot_see_state_keys_or_descriptors_of_them(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _mission(root, "first", [answer("ok")])
    (root / ".evalkit" / "approvals").mkdir(parents=True, exist_ok=True)
    records = _mission(root, "probe", [call("run_shell_command", command=PROBE), answer("done")])
    assert records[0]["sandbox"] == "bwrap"
    said = next(r for r in records if r["event"] == "tool_result")["output"]
    assert "runs: 0" in said, said  # the store is an empty cover inside the sandbox
    assert "key hidden" in said and "KEY READ" not in said
    fds = [line.split(" ", 1)[1] for line in said.splitlines() if line.startswith("fd ")]
    assert fds and not any(".evalkit" in fd or str(tmp_path / "home") in fd for fd in fds), fds
    assert "approvals unwritable" in said and "runs unwritable" in said
    assert not (root / ".evalkit" / "runs" / "run_forged").exists()
    assert not (root / ".evalkit" / "approvals" / "ap_0000000000000000.json").exists()
