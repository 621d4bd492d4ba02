"""Gates and durable approvals: requested in a mission, decided outside it, spent once."""

from __future__ import annotations

import ast
import json
import re
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalkit.runtime
from evalkit.commands.approvals import approvals as approvals_group
from evalkit.commands.approvals import approve
from evalkit.errors import EvalkitError
from evalkit.runtime.governance import ApprovalStore
from evalkit.store import layout
from evalkit.store.runstore import RunStore
from tests.governance.conftest import (
    STUB,
    RunGoverned,
    answer,
    call,
    clean_env,
    cli,
    read_jsonl,
    write_script,
)

SUBMIT = {"asset_id": "asset.7f3a", "value": 3}


def new_request(store: ApprovalStore, **overrides: object) -> dict:
    fields = {"tool": "mcp.submit", "arguments": SUBMIT, "objective": "submit it",
              "run_id": None, "runs_root": None, "index": 0, "reason": "gated"}
    fields.update(overrides)
    return store.request(**fields)  # type: ignore[arg-type]


# -- the store ---------------------------------------------------------------------------------


def test_a_request_is_a_durable_pending_record(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "approvals")
    record = new_request(store, run_id="run_x")
    assert re.fullmatch(r"ap_[0-9a-f]{16}", record["id"])
    on_disk = json.loads((tmp_path / "approvals" / f"{record['id']}.json").read_text())
    assert on_disk == record
    for key in ("tool", "arguments", "objective", "run_id", "state", "created_at",
                "decided_by", "note"):
        assert key in on_disk
    assert on_disk["state"] == "pending" and on_disk["arguments"] == SUBMIT
    assert [r["id"] for r in store.list()] == [record["id"]]


def test_a_request_is_decided_once_and_never_by_nobody(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path)
    record = new_request(store)
    for nobody in ("", "   "):
        with pytest.raises(EvalkitError, match="signed by nobody"):
            approve(store, record["id"], decided_by=nobody)
        with pytest.raises(EvalkitError, match="signed by nobody"):
            store.refuse(record["id"], decided_by=nobody)
    decided = approve(store, record["id"], decided_by="dana", note="queue drained")
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "approved", "dana", "queue drained")
    for again in (lambda: approve(store, record["id"], decided_by="bob"),
                  lambda: store.refuse(record["id"], decided_by="bob")):
        with pytest.raises(EvalkitError, match="already approved by dana; a request is "
                                               "decided once"):
            again()
    other = new_request(store)
    assert store.refuse(other["id"], decided_by="bob")["state"] == "refused"
    with pytest.raises(EvalkitError, match="already refused by bob"):
        approve(store, other["id"], decided_by="dana")


def test_two_people_deciding_at_once_cannot_both_win(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path)
    record = new_request(store)
    outcomes: list[str] = []

    def decide(who: str) -> None:
        try:
            approve(store, record["id"], decided_by=who)
            outcomes.append("won")
        except EvalkitError:
            outcomes.append("lost")

    threads = [threading.Thread(target=decide, args=(f"p{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]


def test_an_approval_is_spent_exactly_once_for_exactly_its_call(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path)
    record = new_request(store)
    with pytest.raises(EvalkitError, match="has not been decided yet"):
        store.spend(record["id"], run_id="run_a", tool="mcp.submit", arguments=SUBMIT)
    approve(store, record["id"], decided_by="dana")
    with pytest.raises(EvalkitError, match="other arguments"):
        store.spend(record["id"], run_id="run_a", tool="mcp.submit",
                    arguments={**SUBMIT, "value": 4})
    with pytest.raises(EvalkitError, match="other arguments"):
        store.spend(record["id"], run_id="run_a", tool="mcp.echo", arguments=SUBMIT)
    spent = store.spend(record["id"], run_id="run_a", tool="mcp.submit",
                        arguments=dict(reversed(list(SUBMIT.items()))))
    assert spent["state"] == "spent" and spent["spent_by"] == "run_a"
    with pytest.raises(EvalkitError, match="already spent by run run_a"):
        store.spend(record["id"], run_id="run_b", tool="mcp.submit", arguments=SUBMIT)


def test_unknown_and_malformed_ids(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path)
    with pytest.raises(EvalkitError, match="no such approval request"):
        store.get("ap_0123456789abcdef")
    with pytest.raises(EvalkitError, match="is not an approval id"):
        store.get("../../etc/passwd")


# -- reconcile: pending requests whose run is gone ------------------------------------------------


def test_reconcile_abandons_only_requests_whose_run_is_gone(tmp_path: Path) -> None:
    runs = RunStore(tmp_path / "runs")
    store = ApprovalStore(tmp_path / "approvals")

    def run_that(outcome: str | None, *, keep_open: bool = False) -> str:
        writer = runs.create({"objective": "x"})
        if outcome is not None:
            writer.update_meta(outcome=outcome)
        if keep_open:
            held.append(writer)
        else:
            writer.close()
        return writer.run_id

    held: list = []
    standing = new_request(store, run_id=run_that("awaiting_approval"), runs_root=runs.root)
    crashed = new_request(store, run_id=run_that(None), runs_root=runs.root)
    finished = new_request(store, run_id=run_that("incomplete"), runs_root=runs.root)
    live = new_request(store, run_id=run_that(None, keep_open=True), runs_root=runs.root)
    deleted_id = run_that("awaiting_approval")
    deleted = new_request(store, run_id=deleted_id, runs_root=runs.root)
    (runs.root / deleted_id / layout.META_FILE).unlink()
    for name in (runs.root / deleted_id).iterdir():
        name.unlink()
    (runs.root / deleted_id).rmdir()
    unrecorded = new_request(store)
    decided = new_request(store, run_id=run_that(None), runs_root=runs.root)
    approve(store, decided["id"], decided_by="dana")

    abandoned = store.reconcile()
    assert sorted(abandoned) == sorted([crashed["id"], finished["id"], deleted["id"]])
    states = {r["id"]: r["state"] for r in store.list()}
    assert states[standing["id"]] == "pending" and states[live["id"]] == "pending"
    assert states[unrecorded["id"]] == "pending" and states[decided["id"]] == "approved"
    assert "no longer exists" in store.get(deleted["id"])["abandoned_why"]
    assert store.reconcile() == []
    for writer in held:
        writer.close()


# -- no code path in a mission can approve ----------------------------------------------------------


def _runtime_sources() -> list[Path]:
    return sorted(Path(evalkit.runtime.__file__).parent.rglob("*.py"))


@pytest.mark.slow
def test_no_code_in_the_runtime_writes_the_approved_state() -> None:
    """Every "approved" literal under evalkit/runtime is only ever compared against."""
    sources = _runtime_sources()
    assert any(p.name == "approvals.py" for p in sources)
    offenders = []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and node.value == "approved"):
                continue
            parent = parents.get(node)
            while isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
                parent = parents.get(parent)
            if not isinstance(parent, ast.Compare):
                offenders.append(f"{path}:{node.lineno}")
        # and the spellings of a write, whatever the code around them
        for pattern in (r"""["']state["']\s*[:=]\s*["']approved""", r"""state\s*=\s*["']approved""",
                        r"""\bAPPROVED\s*="""):
            for match in re.finditer(pattern, text):
                offenders.append(f"{path}:{text.count(chr(10), 0, match.start()) + 1}")
    assert offenders == [], f"a writer of the approved state inside the runtime: {offenders}"


def test_the_only_writer_of_approved_is_the_decision_command() -> None:
    source = Path(__file__).parents[2] / "evalkit" / "commands" / "approvals.py"
    assert 'state="approved"' in source.read_text(encoding="utf-8")


# -- in a mission -------------------------------------------------------------------------------------
# Built-in tools only (no MCP server to start): ``fs`` writes are the gated call, so whether the
# call really ran is a file on disk.

WRITE = {"action": "write", "path": "out.txt", "content": "approved text"}


def test_a_gated_call_ends_the_run_awaiting_approval(governed: RunGoverned) -> None:
    done = governed([call("run_shell_command", command="echo before"), call("fs", **WRITE),
                     answer("never")],
                    profile="dev", gate_tools=["fs"], servers=0, objective="write the file")
    assert done.started["gated"] == ["fs"]
    assert done.names[-3:] == ["step_started", "gate_requested", "mission_finished"]
    gate = done.events("gate_requested")[0]
    assert gate["tool"] == "fs" and gate["arguments"] == WRITE and gate["index"] == 1
    assert "gated" in gate["reason"] and not (done.root / "out.txt").exists()
    assert done.records[-1]["outcome"] == "awaiting_approval"
    assert len(done.events("tool_call")) == 1
    record = done.approvals.get(gate["approval_id"])
    assert record["state"] == "pending" and record["run_id"] == done.outcome.run_id
    assert record["objective"] == "write the file" and record["arguments"] == WRITE
    assert done.audit[-1]["verdict"] == "denied" and "gated" in done.audit[-1]["reason"]
    meta = json.loads((done.run_dir / "meta.json").read_text())["meta"]
    assert meta["outcome"] == "awaiting_approval"
    assert done.approvals.reconcile() == []  # its run ended at the gate: still standing


def test_an_approval_admits_exactly_its_call_once(governed: RunGoverned, tmp_path: Path) -> None:
    first = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    approval_id = first.events("gate_requested")[0]["approval_id"]
    approve(first.approvals, approval_id, decided_by="dana")
    # other arguments are not covered: a new request, and the run stops there
    other = governed([call("fs", **{**WRITE, "content": "something else"})], profile="dev",
                     gate_tools=["fs"], servers=0, approval_id=approval_id)
    assert other.outcome.outcome == "awaiting_approval"
    assert other.events("gate_requested")[0]["approval_id"] != approval_id
    assert first.approvals.get(approval_id)["state"] == "approved"
    # the approved call runs once; the same call again is gated again
    root = tmp_path / "write-root"
    root.mkdir()
    ran = governed([call("fs", **WRITE), call("fs", **WRITE), answer("x")], profile="dev",
                   gate_tools=["fs"], servers=0, approval_id=approval_id, root=root)
    assert len(ran.results()) == 1 and ran.results()[0]["ok"]
    assert (root / "out.txt").read_text() == "approved text"
    assert ran.events("gate_requested")[0]["approval_id"] != approval_id
    spent = first.approvals.get(approval_id)
    assert spent["state"] == "spent" and spent["spent_by"] == ran.outcome.run_id
    assert ran.audit[0]["approval_id"] == approval_id and ran.audit[0]["verdict"] == "allowed"
    with pytest.raises(EvalkitError, match="already spent"):
        governed([answer("x")], profile="dev", gate_tools=["fs"], servers=0,
                 approval_id=approval_id)


def test_an_approval_widens_a_closed_set_by_exactly_one_tool(governed: RunGoverned) -> None:
    from evalkit.runtime.governance.skills import parse_manifest

    manifest = parse_manifest("---\nname: reader\nallowed_tools: [mission_result]\n---\n")
    first = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    approval_id = first.events("gate_requested")[0]["approval_id"]
    approve(first.approvals, approval_id, decided_by="dana")
    done = governed([call("fs", **WRITE), answer("x")], manifest=manifest, profile="dev",
                    approval_id=approval_id, servers=0)
    assert done.started["catalogue"] == ["fs", "mission_result"]
    assert done.started["gated"] == ["fs"]
    assert done.results()[0]["ok"] and done.outcome.outcome == "answered"
    with pytest.raises(EvalkitError, match="--gate-tool fs: not in the skill's closed tool set"):
        governed([answer("x")], manifest=manifest, profile="dev", gate_tools=["fs"], servers=0)
    # the seed's shape: the resumed command repeats --gate-tool beside --approval
    second = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    again = second.events("gate_requested")[0]["approval_id"]
    approve(second.approvals, again, decided_by="dana")
    done = governed([call("fs", **WRITE), answer("x")], manifest=manifest, profile="dev",
                    gate_tools=["fs"], approval_id=again, servers=0)
    assert done.results()[0]["ok"]


def test_door_refusals_for_approvals_and_gates(governed: RunGoverned) -> None:
    first = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    pending = first.events("gate_requested")[0]["approval_id"]

    def door(**options: object) -> None:
        governed([answer("x")], servers=0, **{"profile": "dev", **options})

    with pytest.raises(EvalkitError, match="has not been decided yet"):
        door(approval_id=pending)
    first.approvals.refuse(pending, decided_by="bob")
    with pytest.raises(EvalkitError, match="was refused by bob"):
        door(approval_id=pending)
    with pytest.raises(EvalkitError, match="no such approval request"):
        door(approval_id="ap_00000000000000ff")
    with pytest.raises(EvalkitError, match="switches it off"):
        door(approval_id=pending, approvals=False)
    with pytest.raises(EvalkitError, match="does not offer mcp.nope"):
        door(gate_tools=["mcp.nope"])
    # an approved request whose call needs a scope this run lacks: refused at the door
    second = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    write_id = second.events("gate_requested")[0]["approval_id"]
    approve(second.approvals, write_id, decided_by="dana")
    with pytest.raises(EvalkitError, match="fs.write needs --profile dev"):
        door(approval_id=write_id, profile="safe")


def test_a_scope_denial_comes_before_the_gate(governed: RunGoverned) -> None:
    done = governed([call("run_python_code", code="print(1)"), answer("x")],
                    gate_tools=["run_python_code"], servers=0)
    assert not done.events("gate_requested") and done.approvals.list() == []
    assert done.results()[0]["error"] == \
        "denied under profile 'safe': python.exec needs --profile dev"


def test_with_approvals_off_a_gate_still_stops_the_run(governed: RunGoverned,
                                                       tmp_path: Path) -> None:
    done = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0,
                    approvals=False)
    assert done.records[-1]["outcome"] == "awaiting_approval"
    assert done.events("gate_requested")[0]["approval_id"].startswith("ap_")
    assert not (tmp_path / "approvals").exists()


# -- the command -----------------------------------------------------------------------------------


def test_the_approvals_command(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "ap")
    one, two = new_request(store), new_request(store, tool="mcp.echo", arguments={"text": "x"})
    runner = CliRunner()
    env = {"EVALKIT_APPROVALS": str(tmp_path / "ap")}
    listed = runner.invoke(approvals_group, ["list"], env=env)
    assert listed.exit_code == 0 and one["id"] in listed.output and two["id"] in listed.output
    shown = runner.invoke(approvals_group, ["show", one["id"]], env=env)
    assert json.loads(shown.output) == store.get(one["id"])
    nobody = runner.invoke(approvals_group, ["approve", one["id"], "--decided-by", " "], env=env)
    assert nobody.exit_code != 0 and store.get(one["id"])["state"] == "pending"
    missing = runner.invoke(approvals_group, ["approve", one["id"]], env=env)
    assert missing.exit_code == 2 and "--decided-by" in missing.output
    said = runner.invoke(approvals_group, ["approve", one["id"], "--decided-by", "dana",
                                           "--note", "ok"], env=env)
    assert said.exit_code == 0 and f"--approval {one['id']}" in said.output
    refused = runner.invoke(approvals_group, ["refuse", two["id"], "--decided-by", "bob"], env=env)
    assert refused.exit_code == 0 and store.get(two["id"])["state"] == "refused"
    only = runner.invoke(approvals_group, ["list", "--state", "approved", "--json"], env=env)
    assert [r["id"] for r in json.loads(only.output)] == [one["id"]]
    off = runner.invoke(approvals_group, ["list"], env={"EVALKIT_APPROVALS": "off"})
    assert off.exit_code != 0


@pytest.mark.slow
def test_the_approval_round_trip_across_three_processes(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("mcp.list_assets"),
                                                call("mcp.submit", **SUBMIT),
                                                answer("submitted: rcpt-0001")])
    # submit writes: the run may make the call, and the gate makes a person decide it
    mission = ["mission", "submit the value for asset.7f3a", "--script", str(script),
               "--mcp-stdio", STUB, "--gate-tool", "mcp.submit", "--grant", "mcp.write"]
    # 1. the request
    asked = cli(tmp_path, *mission, "--events", "asked.jsonl")
    assert asked.returncode == 0, asked.stderr
    records = read_jsonl(tmp_path / "asked.jsonl")
    assert records[-1]["outcome"] == "awaiting_approval"
    approval_id = records[-2]["approval_id"]
    assert f"evalkit approvals approve {approval_id}" in asked.stdout
    assert records[0]["gated"] == ["mcp.submit"]
    # 2. the decision, from another process
    listed = cli(tmp_path, "approvals", "list", "--state", "pending")
    assert approval_id in listed.stdout
    nobody = cli(tmp_path, "approvals", "approve", approval_id, "--decided-by", "")
    assert nobody.returncode == 2 and "signed by nobody" in nobody.stderr
    decided = cli(tmp_path, "approvals", "approve", approval_id, "--decided-by", "dana",
                  "--note", "queue drained")
    assert decided.returncode == 0, decided.stderr
    # 3. the resumed mission, admitted once
    ran = cli(tmp_path, *mission, "--approval", approval_id, "--events", "ran.jsonl")
    assert ran.returncode == 0, ran.stderr
    records = read_jsonl(tmp_path / "ran.jsonl")
    assert records[-1]["outcome"] == "answered"
    submitted = [r for r in records if r["event"] == "tool_result" and r["tool"] == "mcp.submit"]
    assert len(submitted) == 1 and submitted[0]["ok"]
    record = json.loads((tmp_path / "approvals" / f"{approval_id}.json").read_text())
    assert record["state"] == "spent" and record["decided_by"] == "dana"
    assert record["spent_by"] == records[0]["run_id"]
    audit = read_jsonl(Path(records[0]["audit_ref"]))
    assert [(a["tool"], a["verdict"]) for a in audit] == [("mcp.list_assets", "allowed"),
                                                          ("mcp.submit", "allowed")]
    # a second use of the spent approval is refused at the door, before any event
    again = cli(tmp_path, *mission, "--approval", approval_id, "--events", "again.jsonl")
    assert again.returncode == 2 and "already spent" in again.stderr
    assert not (tmp_path / "again.jsonl").exists() or not read_jsonl(tmp_path / "again.jsonl")
    again_decided = cli(tmp_path, "approvals", "approve", approval_id, "--decided-by", "eve")
    assert again_decided.returncode == 2 and "decided once" in again_decided.stderr


@pytest.mark.slow
def test_a_pending_request_whose_run_died_is_abandoned_on_the_way_into_a_mission(
        tmp_path: Path) -> None:
    runs = RunStore(tmp_path / "runs")
    writer = runs.create({"objective": "x"})  # a run that never finished, no longer held
    writer.close()
    store = ApprovalStore(tmp_path / "approvals")
    orphan = new_request(store, run_id=writer.run_id, runs_root=runs.root)
    script = write_script(tmp_path / "s.json", [answer("x")])
    done = cli(tmp_path, "mission", "x", "--script", str(script),
               env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "marked abandoned" in done.stderr and orphan["id"] in done.stderr
    assert store.get(orphan["id"])["state"] == "abandoned"


# -- forgery: a record rewritten on disk is refused at execution ---------------------------------


def _forge(store: ApprovalStore, approval_id: str, **changes: object) -> None:
    """Rewrite a request's file as an agent with write access to the folder would."""
    path = store.path_of(approval_id)
    record = json.loads(path.read_text())
    for key, value in changes.items():
        if value is _DROP:
            record.pop(key, None)
        else:
            record[key] = value
    path.write_text(json.dumps(record))


_DROP = object()


def _listed(store: ApprovalStore) -> dict[str, str]:
    """``evalkit approvals list --json``: id -> the state shown (invalid when forged)."""
    done = CliRunner().invoke(approvals_group, ["list", "--json"],
                              env={"EVALKIT_APPROVALS": str(store.root)})
    assert done.exit_code == 0, done.output
    return {r["id"]: ("invalid" if r.get("invalid") else r["state"])
            for r in json.loads(done.output)}


def test_a_gate_carries_the_digest_of_the_call_it_stops(governed: RunGoverned) -> None:
    from evalkit.runtime.governance.approvals import request_digest
    from evalkit.store.signing import call_digest

    done = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    gate = done.events("gate_requested")[0]
    assert gate["digest"] == request_digest("fs", WRITE) == call_digest("fs", WRITE)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", gate["digest"])
    assert done.approvals.get(gate["approval_id"])["digest"] == gate["digest"]


@pytest.mark.parametrize("forgery", ["state", "decider", "arguments", "other key"])
def test_a_forged_approval_is_refused_at_execution_audited_and_listed_invalid(
        governed: RunGoverned, tmp_path: Path, forgery: str) -> None:
    from evalkit.store.signing import Signer

    asked = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    approval_id = asked.events("gate_requested")[0]["approval_id"]
    store = asked.approvals
    evil = {**WRITE, "content": "what nobody approved"}
    if forgery == "state":  # pending rewritten to approved, by nobody's decision
        _forge(store, approval_id, state="approved", decided_by="dana")
        call_args, said = WRITE, "carries no signed decision"
    elif forgery == "decider":
        approve(store, approval_id, decided_by="dana")
        _forge(store, approval_id, decided_by="the-boss")
        call_args, said = WRITE, "names another decider"
    elif forgery == "arguments":  # approved, then the arguments swapped for others
        approve(store, approval_id, decided_by="dana")
        _forge(store, approval_id, arguments=evil)
        call_args, said = evil, "decided for other arguments"
    else:  # the agent signs its own yes with a key of its own
        approve(store, approval_id, decided_by="dana", key=Signer.generate())
        call_args, said = WRITE, "not trusted here"
    assert _listed(store)[approval_id] == "invalid"

    root = tmp_path / "exec-root"
    root.mkdir()
    ran = governed([call("fs", **call_args), answer("done")], profile="dev", gate_tools=["fs"],
                   servers=0, approval_id=approval_id, root=root)
    assert not (root / "out.txt").exists()  # the call never ran
    denied = [r for r in ran.results() if r["tool"] == "fs"]
    assert denied and not denied[0]["ok"] and said in denied[0]["error"]
    assert denied[0]["error"].startswith("denied: ")
    assert [(a["tool"], a["verdict"]) for a in ran.audit][:1] == [("fs", "denied")]
    assert said in ran.audit[0]["reason"]
    assert store.get(approval_id)["state"] != "spent"


def test_the_decision_command_refuses_a_request_rewritten_before_anyone_decided(
        tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "ap")
    record = new_request(store)
    _forge(store, record["id"], arguments={"asset_id": "asset.0000", "value": 999})
    assert _listed(store)[record["id"]] == "invalid"
    with pytest.raises(EvalkitError, match="record was altered"):
        approve(store, record["id"], decided_by="dana")
    assert store.get(record["id"])["state"] == "pending"


def test_a_decision_is_signed_over_the_digest(tmp_path: Path) -> None:
    from evalkit.runtime.governance.approvals import decision_problem

    store = ApprovalStore(tmp_path / "ap")
    record = approve(store, new_request(store)["id"], decided_by="dana", note="fine")
    decision = record["decision"]
    assert decision["digest"] == record["digest"] and decision["decided_by"] == "dana"
    assert decision["verdict"] == "approve" and decision["signature"]
    assert decision_problem(record) is None
    assert decision_problem(record, arguments={**SUBMIT, "value": 4}) is not None
    denied = CliRunner().invoke(approvals_group, ["deny", new_request(store)["id"],
                                                  "--decided-by", "bob"],
                                env={"EVALKIT_APPROVALS": str(store.root)})
    assert denied.exit_code == 0 and "refused by bob" in denied.output
