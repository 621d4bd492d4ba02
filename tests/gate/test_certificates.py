"""Certificates that recompute: each theorem on a passing and a violating run, tampering
found by ``evalkit verify --certificates`` naming the theorem, the runtime issuing them
before the seal, and recompute(issue(run)) holding for generated streams."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.cli import main
from evalkit.gate.approval import request_digest
from evalkit.gate.certificates import (
    HOLDS,
    THEOREMS,
    VIOLATED,
    certify_all,
    check,
    issue,
    recompute,
    runs_under,
)
from evalkit.store.runstore import RunWriter
from evalkit.store.seal import VERIFIED, Checker
from evalkit.store.signing import Signer, Trust
from tests._stream_builders import answer, call, finished, good_run, started, step, write_stream
from tests.governance.conftest import answer as say
from tests.governance.conftest import call as ask
from tests.governance.conftest import governed  # noqa: F401 (the fixture)
from tests.governance.test_control import Pipe, on

RUN = "run_20261205-000000-cafe0001"
WRITE = {"action": "write", "path": "out.txt", "content": "gated text"}


def make_run(tmp_path: Path, records: list[dict[str, Any]], name: str = RUN) -> Path:
    run = tmp_path / name
    write_stream(run / "events.jsonl", records)
    return run


def verdicts(run: Path) -> dict[str, str]:
    return {c["theorem"]: c["verdict"] for c in issue(run)}


def verify(*args: str) -> Any:
    return CliRunner().invoke(main, ["verify", "--certificates", *args])


def gate(index: int, tool: str, arguments: dict[str, Any], *, approval_id: str = "ap_00000000000000a1",
         digest: str | None = None) -> dict[str, Any]:
    return {"event": "gate_requested", "index": index, "tool": tool, "arguments": arguments,
            "reason": f"{tool} is gated", "approval_id": approval_id,
            "digest": digest if digest is not None else request_digest(tool, arguments)}


def gated_run(*, with_gate: bool = True, executions: int = 1,
              gate_arguments: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    records = [started(gated=["fs"], catalogue=["fs"]), step(1)]
    if with_gate:
        records.append(gate(1, "fs", gate_arguments or WRITE))
    for _ in range(executions):
        records += call(1, "fs", WRITE, output="wrote 10 bytes")
    return [*records, step(2), answer("Done: wrote 10 bytes."), finished()]


def circling_run() -> list[dict[str, Any]]:
    records = [started()]
    for i in range(1, 5):
        records += [step(i), *call(i, "mcp.add", {"a": 2, "b": 3})]
    return [*records, step(5), answer("The sum is 5."), finished(steps=5)]


# -- each theorem, holding and violated ---------------------------------------------------------


def test_a_plain_run_holds_every_theorem_and_verifies(tmp_path: Path) -> None:
    run = make_run(tmp_path, good_run())
    assert verdicts(run) == dict.fromkeys(THEOREMS, HOLDS)
    assert recompute(run) == []
    done = verify(str(run))
    assert done.exit_code == 0, done.output
    assert f"certified  {run} (3 certificates; every theorem holds)" in done.output


def test_stagnation_is_violated_by_a_run_going_in_circles(tmp_path: Path) -> None:
    run = make_run(tmp_path, circling_run())
    cert = {c["theorem"]: c for c in issue(run)}["stagnation_windowed"]
    assert cert["verdict"] == VIOLATED
    assert cert["evidence"]["first"] == {"signal": "repeat", "step": 3, "threshold": 3}
    assert cert["parameters"] == {"thresholds": {"repeat": 3, "rejected": 3,
                                                 "oscillation": 4, "idle": 4}}
    assert recompute(run) == []  # violated, and honestly so: the certificate holds up
    done = verify("--json", str(run))
    assert done.exit_code == 0
    said = json.loads(done.output.splitlines()[-1])
    assert said["certificates"] == "certified" and said["problems"] == []
    assert said["verdicts"]["stagnation_windowed"] == VIOLATED
    assert "(3 certificates; violated: stagnation_windowed)" in verify(str(run)).output


def test_a_gated_call_needs_a_gate_asking_for_exactly_it(tmp_path: Path) -> None:
    assert verdicts(make_run(tmp_path, gated_run(), "run_a"))[
        "no_irreversible_without_approval"] == HOLDS
    for name, records, why in (
            ("run_b", gated_run(with_gate=False), "executed with no gate_requested"),
            ("run_c", gated_run(gate_arguments={**WRITE, "content": "other"}),
             "asked for exactly this call"),
            ("run_d", gated_run(executions=2), "already used")):
        cert = {c["theorem"]: c for c in issue(make_run(tmp_path, records, name))}[
            "no_irreversible_without_approval"]
        assert cert["verdict"] == VIOLATED, name
        assert why in cert["evidence"]["calls"][-1]["why"], name


def test_a_gate_whose_digest_is_not_of_its_own_call_vouches_for_nothing(tmp_path: Path) -> None:
    forged = gated_run(with_gate=False)
    forged.insert(2, gate(1, "fs", {"action": "read", "path": "x"},
                          digest=request_digest("fs", WRITE)))
    assert verdicts(make_run(tmp_path, forged))["no_irreversible_without_approval"] == VIOLATED


def test_a_refused_call_of_a_gated_tool_is_no_execution(tmp_path: Path) -> None:
    records = gated_run(with_gate=False, executions=0)
    records[2:2] = [{"event": "tool_call", "index": 1, "tool": "fs", "arguments": WRITE},
                    {"event": "tool_result", "index": 1, "tool": "fs", "arguments": WRITE,
                     "ok": False, "exit_code": None, "output": "", "truncated": False,
                     "error": "denied: bob refused this call to fs", "handle": "r1"}]
    cert = {c["theorem"]: c for c in issue(make_run(tmp_path, records))}[
        "no_irreversible_without_approval"]
    assert (cert["verdict"], cert["evidence"]["gated_executions"]) == (HOLDS, 0)


def test_figures_traced_uses_the_grounding_figures_check(tmp_path: Path) -> None:
    held = make_run(tmp_path, good_run(text="The sum is 5."), "run_a")
    untraced = make_run(tmp_path, good_run(text="The sum is 5, or 1,234 in all."), "run_b")
    assert verdicts(held)["figures_traced"] == HOLDS
    cert = {c["theorem"]: c for c in issue(untraced)}["figures_traced"]
    assert cert["verdict"] == VIOLATED and cert["evidence"]["untraced"] == ["1,234"]
    no_answer = make_run(tmp_path, [started(), step(1), finished("incomplete")], "run_c")
    assert verdicts(no_answer)["figures_traced"] == HOLDS


def test_the_caveat_grounding_appended_is_not_read_as_the_answer(tmp_path: Path) -> None:
    caveat = "Caveat: fewer citations than required: figures (at least 2, 1 cited)."
    records = good_run(text=f"The sum is 5.\n\n{caveat}")
    records.insert(-2, {"event": "grounding", "ran": True, "grounded": False,
                        "verified": False, "repairs": 1, "repairing": False, "caveat": caveat,
                        "unsupported": [], "silent": [], "uncited": ["figures"], "checks": []})
    assert verdicts(make_run(tmp_path, records))["figures_traced"] == HOLDS


# -- tampering ---------------------------------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _rewrite(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def _broken(run: Path) -> str:
    done = verify(str(run))
    assert done.exit_code == 1, done.output
    return done.output


def test_a_byte_changed_in_a_tool_result_breaks_its_certificates(tmp_path: Path) -> None:
    run = make_run(tmp_path, good_run())
    issue(run)
    events = run / "events.jsonl"
    events.write_text(events.read_text().replace('"output": "5"', '"output": "6"'))
    out = _broken(run)
    assert "certificate broken" in out
    assert "figures_traced: the events records it was computed from (lines 1,4,6) changed; " \
           "they now give 'violated'" in out
    assert "stagnation_windowed: the events records" in out


def test_a_removed_gate_breaks_the_approval_certificate(tmp_path: Path) -> None:
    run = make_run(tmp_path, gated_run())
    issue(run)
    events = run / "events.jsonl"
    _rewrite(events, [e for e in _lines(events) if e["record"]["event"] != "gate_requested"])
    out = _broken(run)
    assert "no_irreversible_without_approval: the events records it was computed from " \
           "(lines 1,3,5) are now lines 1,4; they now give 'violated'" in out


def test_an_edited_parameter_or_verdict_breaks_that_certificate(tmp_path: Path) -> None:
    run = make_run(tmp_path, circling_run())
    issue(run)
    certs = run / "certificates.jsonl"
    pristine = _lines(certs)
    lifted = json.loads(json.dumps(pristine))
    lifted[0]["parameters"]["thresholds"]["repeat"] = 30  # now the circling never fires
    lifted[0]["verdict"], lifted[0]["evidence"] = HOLDS, {"firings": 0}
    _rewrite(certs, lifted)
    assert "stagnation_windowed: parameters" in _broken(run)
    flipped = json.loads(json.dumps(pristine))
    flipped[2]["verdict"] = VIOLATED
    _rewrite(certs, flipped)
    out = _broken(run)
    assert "figures_traced: verdict 'violated' does not follow: the records give 'holds'" in out
    assert "stagnation_windowed" not in out
    _rewrite(certs, pristine[1:])  # the violated certificate dropped
    assert "stagnation_windowed: no certificate was issued for it" in _broken(run)
    _rewrite(certs, [*pristine, {**pristine[0], "theorem": "always_fine"}])
    assert "always_fine: no such theorem" in _broken(run)
    _rewrite(certs, pristine)
    assert verify(str(run)).exit_code == 0


def test_verify_says_which_runs_have_no_certificates_and_issue_writes_them(
        tmp_path: Path) -> None:
    run = make_run(tmp_path, good_run())
    done = verify(str(tmp_path))
    assert done.exit_code == 0 and f"no certificates  {run}" in done.output
    done = verify("--issue", str(tmp_path))
    assert done.exit_code == 0 and f"certified  {run}" in done.output
    assert (run / "certificates.jsonl").is_file()
    plain = CliRunner().invoke(main, ["verify", str(run)])
    assert "certif" not in plain.output  # without the flag, verify is as it was
    refused = CliRunner().invoke(main, ["verify", "--issue", str(run)])
    assert refused.exit_code != 0 and "give both" in refused.output


# -- issued as the run closes, under its seal ---------------------------------------------------


def test_a_writer_issues_before_its_seal_so_the_seal_lists_them(tmp_path: Path) -> None:
    signer = Signer.generate()
    run = tmp_path / RUN
    run.mkdir()
    writer = RunWriter(run, durable=False, signer=signer)
    for record in good_run():
        writer.append(record)
    writer.before_seal = issue
    writer.close()
    manifest = json.loads((run / "manifest.json").read_text())
    assert "certificates.jsonl" in manifest["files"]
    trust = Trust()
    trust.add(signer.public_raw, "this test")
    assert Checker(trust).folder(run)[0].word == VERIFIED
    certs = run / "certificates.jsonl"
    certs.write_text(certs.read_text().replace('"holds"', '"violated"', 1))
    check_, problems = Checker(trust).folder(run)
    assert check_.tampered and "certificates.jsonl line 1 differs" in problems[0]
    # Writing to the reopened run drops its seal and its certificates: the next close issues
    # them anew. A writer closed without writing leaves the run as it found it.
    certs.write_text(certs.read_text().replace('"violated"', '"holds"', 1))
    files = {f.name: f.read_bytes() for f in run.iterdir() if f.name != "lock"}
    RunWriter(run, durable=False, signer=signer).close()
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.name != "lock"} == files
    reopened = RunWriter(run, durable=False, signer=signer)
    assert certs.exists() and (run / "manifest.json").exists()
    reopened.append(good_run()[-1])
    assert not certs.exists() and not (run / "manifest.json").exists()
    reopened.close()


def test_the_runtime_certifies_a_governed_run_as_it_closes(governed: Any) -> None:  # noqa: F811
    pipe = Pipe()

    def decide(gate: dict[str, Any]) -> None:
        pipe.send({"control": "gate_decision", "approval_id": gate["approval_id"],
                   "approve": True, "decided_by": "dana"})

    try:
        done = governed([ask("fs", **WRITE), say("Wrote 10 bytes.")], profile="dev",
                        servers=0, gate_tools=["fs"], gate_wait=20, control=pipe.channel,
                        observer=on("gate_requested", decide))
    finally:
        pipe.close()
    assert done.results()[0]["ok"] and (done.root / "out.txt").read_text() == "gated text"
    lines = (done.run_dir / "certificates.jsonl").read_text().splitlines()
    certs = {c["theorem"]: c for c in map(json.loads, lines)}
    assert list(certs) == list(THEOREMS)
    assert all(c["run_id"] == done.run_dir.name for c in certs.values())
    approval = certs["no_irreversible_without_approval"]
    assert (approval["verdict"], approval["evidence"]["gated_executions"]) == (HOLDS, 1)
    assert recompute(done.run_dir) == []


# -- recompute(issue(records)) always holds ------------------------------------------------------

_TOOLS = st.sampled_from(["fs", "mcp.add", "mcp.echo"])
_ARGS = st.fixed_dictionaries({"a": st.integers(0, 3)})


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [started(gated=draw(st.sampled_from([[], ["fs"]])))]
    for i in range(1, draw(st.integers(0, 7)) + 1):
        records.append(step(i))
        for _ in range(draw(st.integers(0, 2))):
            tool, arguments = draw(_TOOLS), draw(_ARGS)
            if draw(st.booleans()):
                records.append(gate(i, tool, arguments,
                                    approval_id=f"ap_{draw(st.integers(0, 3)):016x}"))
            if draw(st.booleans()):
                records.append({"event": "reply_rejected", "index": i, "problem": "no"})
            else:
                records += call(i, tool, arguments, output=str(draw(st.integers(0, 9))))
    if draw(st.booleans()):
        records.append(answer(f"It is {draw(st.integers(0, 12))}."))
    return [*records, finished()]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_recompute_of_what_was_issued_always_holds(records: list[dict[str, Any]]) -> None:
    numbered = {"events": list(enumerate(records, start=1)), "tools": []}
    certs = json.loads(json.dumps(certify_all(numbered, RUN)))  # as read back from the file
    assert check(certs, numbered, RUN) == []


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.data())
def test_a_changed_input_record_breaks_every_certificate_that_read_it(
        records: list[dict[str, Any]], data: st.DataObject) -> None:
    numbered = {"events": list(enumerate(records, start=1)), "tools": []}
    certs = json.loads(json.dumps(certify_all(numbered, RUN)))
    at = data.draw(st.integers(0, len(records) - 1))
    changed = [dict(r) for r in records]
    changed[at]["tampered"] = True  # one more key: a byte added to that line
    found = check(certs, {"events": list(enumerate(changed, start=1)), "tools": []}, RUN)
    readers = {name for name, theorem in THEOREMS.items()
               if theorem.select("events", records[at])}
    assert {f.theorem for f in found} == readers
    assert all(") changed; " in f.why for f in found)


def test_a_deleted_catalogue_is_named(tmp_path: Path) -> None:
    run = make_run(tmp_path, good_run())
    (run / "tools.jsonl").write_text(json.dumps({"call": 0, "catalogue": [
        {"name": "mcp.add", "code": False}]}) + "\n")
    issue(run)
    (run / "tools.jsonl").unlink()
    assert [str(f) for f in recompute(run)] == [
        "figures_traced: the tools records it was computed from are gone"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_run_folder_that_refuses_the_file_is_one_sentence(tmp_path: Path) -> None:
    run = make_run(tmp_path, good_run())
    run.chmod(0o555)
    try:
        done = verify("--issue", str(run))
    finally:
        run.chmod(0o755)
    assert done.exit_code != 0
    assert f"cannot write the certificates of {run}" in done.output
    assert "Traceback" not in done.output


def test_a_harness_mission_folder_is_not_counted_beside_the_run_it_captured() -> None:
    """`evalkit run` files the run under the mission folder and keeps the piped capture
    beside it: one run, one line (the committed corpus is laid out so)."""
    corpus = Path(__file__).resolve().parents[2] / "recordings" / "stub" / "good"
    found = runs_under(corpus)
    missions = sorted(p for p in corpus.iterdir() if p.is_dir())
    assert len(found) == len(missions) > 0
    assert all(run.parent.name == "runs" for run in found)
