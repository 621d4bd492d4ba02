"""The gate sidecar's protocol: strict lines, ids kept apart, bounded waits, holds and
their deadlines, signed approvals, one execution per key, a sealed and gradable run.

Real parts throughout (``tests/gate/_sidecar.py``): the server, the SQLite ledger, the
run store and its seal, Ed25519 decisions, the client over OS pipes. Only the clock
the deadlines are read from is a fake the tests move. The last tests spawn
``evalkit gate serve`` itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from evalkit.commands.gate import decide_file
from evalkit.gate import protocol as P
from evalkit.gate.client import Client, GateError
from evalkit.gate.ledger import Ledger
from evalkit.gate.server import iso
from evalkit.store.signing import Signer
from tests._multiply import ROOT, evalkit
from tests.gate._sidecar import POLICY, T0, Sidecar

# -- strict lines ------------------------------------------------------------------------------

BAD_LINES = [
    (b'{"type":"govern","id":"a1","idempotency_key":"k","tool":"add","arguments":{},'
     b'"extra":1}', "unknown_key", "a1"),
    (b'{"type":"govern","id":"a2","idempotency_key":"k","tool":"add",'
     b'"arguments":{"x":NaN}}', "not_json", None),
    (b'{"type":"govern","id":"a3","idempotency_key":"k","tool":"add",'
     b'"arguments":{"x":Infinity}}', "not_json", None),
    (b'{"type":"govern","idempotency_key":"k","tool":"add","arguments":{}}', "missing_key",
     None),
    (b'{"type":"govern","id":7,"idempotency_key":"k","tool":"add","arguments":{}}',
     "wrong_type", None),
    (b'{"type":"govern","id":"a6","idempotency_key":"k","tool":"add","arguments":[]}',
     "wrong_type", "a6"),
    (b'{"type":"govern","id":"a7","idempotency_key":"k","tool":"add","arguments":{},'
     b'"step":true}', "wrong_type", "a7"),
    (b'{"type":"resume","id":"a8","idempotency_key":"k","wait_ms":60001}', "out_of_range",
     "a8"),
    (b'{"type":"govern","id":"a9","id":"b9","idempotency_key":"k","tool":"add",'
     b'"arguments":{}}', "not_json", None),
    (b'{"type":"launch","id":"a10"}', "unknown_type", "a10"),
    (b'[1,2]', "not_an_object", None),
    (b'{"type":"govern", "id": "a12"', "not_json", None),
    (b'{"type":"govern","id":"","idempotency_key":"k","tool":"add","arguments":{}}',
     "out_of_range", ""),
]


def test_every_malformed_line_is_one_error_and_the_gate_keeps_serving(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda a, b: a + b)
        for line, code, request_id in BAD_LINES:
            reply = gate.raw(line)
            assert (reply["type"], reply["code"]) == ("error", code), line
            assert reply["id"] == request_id, line
        oversized = b'{"type":"shutdown","id":"x","answer":"' + b"a" * P.MAX_LINE_BYTES + b'"}'
        reply = gate.raw(oversized)
        assert (reply["code"], reply["id"]) == ("line_too_long", None)
        result = gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="still")
        assert (result.phase, result.result) == ("completed", 3)
    errors = [r for r in gate.records() if r["event"] == "governance" and r["what"] == "error"]
    assert [e["kind"] for e in errors] == [code for _, code, _ in BAD_LINES] + ["line_too_long"]


def test_parse_refuses_numbers_no_double_holds() -> None:
    with pytest.raises(P.ProtocolError) as refused:
        P.parse_inbound(b'{"type":"shutdown","id":"s","answer":1e400}')
    assert refused.value.code == "not_json"


# -- ids ---------------------------------------------------------------------------------------


def test_concurrent_governs_each_get_their_own_reply(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("echo", lambda n: {"n": n})
        barrier = threading.Barrier(12)
        got: dict[int, object] = {}

        def call(n: int) -> None:
            barrier.wait()
            got[n] = gate.client.govern("echo", {"n": n}, idempotency_key=f"echo-{n}")

        threads = [threading.Thread(target=call, args=(n,)) for n in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(got) == list(range(12))
    for n, result in got.items():
        assert result.idempotency_key == f"echo-{n}" and result.result == {"n": n}


def test_an_answer_with_another_requests_id_is_refused_as_mixed(tmp_path: Path) -> None:
    release, ran = threading.Event(), []

    def slow() -> str:
        ran.append(1)
        release.wait(10)
        return "done"

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("slow", slow)
        box: dict[str, object] = {}
        caller = threading.Thread(target=lambda: box.update(
            r=gate.client.govern("slow", {}, idempotency_key="slow-1")))
        caller.start()
        while not ran:
            time.sleep(0.005)
        mixed = gate.raw(b'{"type":"tool_result","id":"not-the-govern","correlation_id":"c-1",'
                         b'"output":"forged"}')
        assert mixed["code"] == "mixed_ids"
        unknown = gate.raw(b'{"type":"tool_result","id":"x","correlation_id":"c-99",'
                           b'"output":1}')
        assert unknown["code"] == "unknown_correlation"
        release.set()
        caller.join(30)
    assert box["r"].result == "done"  # the forged answer completed nothing


# -- bounded waits -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_body_that_never_answers_is_outcome_unknown_and_never_runs_again(tmp_path: Path
                                                                         ) -> None:
    runs: list[int] = []

    def stuck() -> None:
        runs.append(1)
        time.sleep(3)

    with Sidecar(tmp_path, tool_timeout=0.3) as gate:
        gate.client.register_tool("slow", stuck)
        started = time.monotonic()
        first = gate.client.govern("slow", {}, idempotency_key="stuck")
        assert time.monotonic() - started < 2.5
        again = gate.client.govern("slow", {}, idempotency_key="stuck")
    assert (first.phase, first.kind) == ("failed", "outcome_unknown")
    assert Ledger(tmp_path / "governance.sqlite").get("stuck").state == "outcome_unknown"
    assert (again.phase, again.kind, again.replayed) == ("failed", "outcome_unknown", True)
    assert runs == [1]


@pytest.mark.slow
def test_a_resume_waits_no_longer_than_it_asked(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        held = gate.client.govern("send", {"to": "a"}, idempotency_key="wait")
        started = time.monotonic()
        again = gate.client.resume("wait", wait_ms=300)
        took = time.monotonic() - started
        with pytest.raises(GateError) as refused:
            gate.client.resume("wait", wait_ms=P.MAX_WAIT_MS + 1)
    assert held.phase == again.phase == "pending_approval"
    assert 0.25 < took < 3.0
    assert refused.value.code == "out_of_range"


# -- holds, deadlines, approvals ---------------------------------------------------------------


def _approval_id(gate: Sidecar) -> str:
    (request,) = (gate.tmp / "approvals").glob("ap_*.json")
    return request.stem


def test_the_deadline_is_fixed_at_the_hold_and_read_from_the_injected_clock(tmp_path: Path
                                                                           ) -> None:
    sent: list[str] = []
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("send", lambda to: sent.append(to))
        held = gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        gate.clock.advance(300)
        again = gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        gate.clock.advance(301)
        expired = gate.client.resume("mail")
    assert held.deadline == again.deadline == iso(T0 + 600)
    assert (held.phase, held.kind) == ("pending_approval", "requires_approval")
    assert (expired.phase, expired.kind) == ("rejected", "expired") and sent == []


def test_a_signed_approval_releases_the_call_once(tmp_path: Path) -> None:
    sent: list[str] = []
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("send", lambda to: sent.append(to) or f"sent to {to}")
        gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        decide_file(_approval_id(gate), decided_by="ops", approve=True,
                    approvals_dir=tmp_path / "approvals",
                    ledger_path=tmp_path / "governance.sqlite")
        done = gate.client.resume("mail", wait_ms=1000)
        again = gate.client.resume("mail")
    assert (done.phase, done.kind, done.result, done.replayed) == (
        "completed", "approved", "sent to a", False)
    assert (again.phase, again.replayed) == ("completed", True) and sent == ["a"]


def test_a_signed_no_refuses_the_call(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("send", lambda to: pytest.fail("the body ran"))
        gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        decide_file(_approval_id(gate), decided_by="ops", approve=False,
                    approvals_dir=tmp_path / "approvals",
                    ledger_path=tmp_path / "governance.sqlite")
        refused = gate.client.resume("mail", wait_ms=1000)
    assert (refused.phase, refused.kind) == ("rejected", "refused")


def test_a_decision_signed_by_an_untrusted_key_releases_nothing(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("send", lambda to: pytest.fail("the body ran"))
        gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        decide_file(_approval_id(gate), decided_by="mallory", approve=True,
                    approvals_dir=tmp_path / "approvals", signer=Signer.generate(),
                    ledger_path=tmp_path / "governance.sqlite")
        still = gate.client.resume("mail", wait_ms=100)
    assert still.phase == "pending_approval"
    checked = [r for r in gate.records() if r.get("what") == "approval_checked"]
    assert checked and "not validly signed" in checked[0]["detail"]


def test_a_late_approval_is_recorded_and_never_promotes(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("send", lambda to: pytest.fail("the body ran"))
        gate.client.govern("send", {"to": "a"}, idempotency_key="late")
        gate.client.govern("send", {"to": "b"}, idempotency_key="later")
        gate.clock.advance(601)
        # One expires before its decision arrives, the other has its decision waiting.
        assert gate.client.resume("late").kind == "expired"
        # `evalkit gate approve` refuses an action no longer held; a decision signed anyway
        # (by hand, or by a tool that did not look) lands in the file.
        for path in sorted((tmp_path / "approvals").glob("ap_*.json")):
            _sign_into(path)
        first = gate.client.resume("late", wait_ms=200)
        second = gate.client.resume("later", wait_ms=200)
    assert (first.phase, first.kind) == (second.phase, second.kind) == ("rejected", "expired")
    late = [r for r in gate.records() if r.get("what") == "late_approval"]
    assert {r["key"] for r in late} == {"late", "later"}
    assert all(e.event != "decision" for e in gate_events(tmp_path))


def _sign_into(path: Path) -> None:
    from evalkit.gate.approval import sign_decision
    from evalkit.store.signing import local_signer

    record = json.loads(path.read_text())
    record["decision"] = sign_decision(local_signer(), approval_id=record["id"],
                                       digest=record["digest"], verdict="approve",
                                       decided_by="ops")
    path.write_text(json.dumps(record))


def gate_events(tmp_path: Path) -> list:
    from evalkit.gate.ledger import Ledger

    with Ledger(tmp_path / "governance.sqlite") as ledger:
        return ledger.events()


# -- one execution per key ---------------------------------------------------------------------


def test_a_retried_govern_runs_the_body_once(tmp_path: Path) -> None:
    count = Counter()
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda a, b: count.update(["add"]) or a + b)
        first = gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="once")
        second = gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="once")
        other = gate.client.govern("add", {"a": 9, "b": 2}, idempotency_key="once")
    assert (first.result, first.replayed) == (3, False)
    assert (second.result, second.replayed) == (3, True)
    assert (other.phase, other.kind) == ("rejected", "conflict")
    assert count["add"] == 1


@pytest.mark.slow
def test_concurrent_duplicates_run_once_and_all_get_the_same_outcome(tmp_path: Path) -> None:
    count = Counter()

    def add(a: int, b: int) -> int:
        count.update(["add"])
        time.sleep(0.2)
        return a + b

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", add)
        barrier = threading.Barrier(8)
        results: list = []

        def call() -> None:
            barrier.wait()
            results.append(gate.client.govern("add", {"a": 2, "b": 3}, idempotency_key="dup"))

        threads = [threading.Thread(target=call) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert count["add"] == 1
    assert {(r.phase, r.kind, r.result) for r in results} == {("completed", "allowed", 5)}
    assert sum(not r.replayed for r in results) == 1


# -- the recording -----------------------------------------------------------------------------

SUITE = """\
name: governed
tools: [add]
missions:
  - key: governed
    flag: chaining
    prompt: What is 1 plus 2?
    expects_outcome: answered
    expects_tools: [add]
    answer_must_match: ['\\b3\\b']
    because: a foreign framework's governed call, graded from the gate's recording
"""


@pytest.mark.slow
def test_shutdown_seals_a_run_that_verifies_and_scores(tmp_path: Path) -> None:
    with Sidecar(tmp_path, suite_key="governed") as gate:
        gate.client.register_tool("add", lambda a, b: a + b)
        gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="k1", step=0)
        gate.client.govern("nope", {}, idempotency_key="k2", step=1)
        closed = gate.close(answer="1 and 2 make 3")
    assert closed["outcome"] == "answered" and closed["run_id"] == gate.recording.run_id
    from evalkit.contract import conforms

    records = gate.records()
    assert all(conforms(r) == [] for r in records)
    events = [r["event"] for r in records]
    assert events[0] == "mission_started" and events[-2:] == ["answer", "mission_finished"]
    results = [r for r in records if r["event"] == "tool_result"]
    assert [(r["tool"], r["ok"]) for r in results] == [("add", True), ("nope", False)]
    verified = evalkit("verify", gate.runs)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "1 verified, 0 unsigned, 0 tampered" in verified.stderr
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE, "utf-8")
    scored = evalkit("score", "--suite", suite, "--runs", gate.runs, "--report",
                     tmp_path / "rep")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    (verdict,) = json.loads((tmp_path / "rep" / "report.json").read_text())["verdicts"]
    assert verdict["key"] == "governed" and verdict["passed"] is True
    (events_file,) = gate.runs.rglob("events.jsonl")
    events_file.write_bytes(events_file.read_bytes().replace(b'"ok":true', b'"ok":false'))
    tampered = evalkit("verify", gate.runs)
    assert tampered.returncode != 0 and "1 tampered" in tampered.stderr


def test_a_run_closed_while_a_hold_stands_is_awaiting_approval(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        closed = gate.close()
    assert closed["outcome"] == "awaiting_approval"
    assert [r["event"] for r in gate.records()].count("gate_requested") == 1


# -- the command -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_bad_policy_file_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("tools: {x: {risk: 9, reversible: true}}\n")
    done = evalkit("gate", "serve", "--policy", policy, "--runs", "none",
                   "--ledger", tmp_path / "l.sqlite")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_spawned_sidecar_governs_and_closes(tmp_path: Path) -> None:
    import yaml

    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    with Client(policy, ledger=tmp_path / "l.sqlite", runs=tmp_path / "runs",
                env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}) as gate:
        assert gate.register_tool("add", lambda a, b: a + b) is True
        assert gate.register_tool("unlisted", lambda: 1) is False
        assert gate.govern("add", {"a": 20, "b": 22}, idempotency_key="k").result == 42
        assert gate.govern("unlisted", {}).kind == "unknown_tool"
    assert gate.closed["outcome"] == "incomplete"


# -- the one schema ----------------------------------------------------------------------------


def test_the_policy_kinds_are_the_protocols_under_their_outcomes_phase() -> None:
    from evalkit.gate.policy import KINDS

    phase = {"allowed": "completed", "denied": "rejected", "held": "pending_approval"}
    assert {k: P.KINDS[k][0] for k in KINDS} == {k: phase[o] for k, o in KINDS.items()}
    assert set(P.PHASES) == {p for p, _ in P.KINDS.values()}


def test_the_generated_block_is_rewritten_and_nothing_else(tmp_path: Path) -> None:
    from evalkit.gate import protocol_doc

    doc = tmp_path / "GOVERNANCE.md"
    doc.write_text(f"# Before\n\n{protocol_doc.BEGIN}\nstale\n{protocol_doc.END}\n\nAfter\n")
    assert protocol_doc.main([str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Before\n") and text.endswith(f"{protocol_doc.END}\n\nAfter\n")
    assert "stale" not in text
    for name in [*P.INBOUND, *P.OUTBOUND, *P.KINDS, *P.ERRORS]:
        assert f"`{name}`" in text, name
    assert protocol_doc.main([str(tmp_path / "missing.md")]) == 2


@pytest.mark.slow
def test_a_gate_killed_mid_call_leaves_the_action_unknown_and_never_reruns_it(tmp_path: Path
                                                                            ) -> None:
    import os
    import signal

    import yaml

    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    effects = tmp_path / "effects.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    options = {"ledger": tmp_path / "l.sqlite", "runs": tmp_path / "runs", "env": env}

    def add(a: int, b: int) -> int:
        with open(effects, "a") as out:
            out.write("add\n")
        time.sleep(30)  # the gate is killed while the body runs
        return a + b

    first = Client(policy, **options)
    first.register_tool("add", add)
    box: dict[str, object] = {}

    def call() -> None:
        try:
            first.govern("add", {"a": 1, "b": 2}, idempotency_key="crash")
        except GateError as gone:
            box["gone"] = gone

    caller = threading.Thread(target=call)
    caller.start()
    end = time.monotonic() + 30
    while not effects.exists():
        assert time.monotonic() < end
        time.sleep(0.01)
    os.kill(first._process.pid, signal.SIGKILL)
    caller.join(30)
    first.close()
    assert "gone" in box
    with Client(policy, **options) as second:
        second.register_tool("add", add)
        result = second.govern("add", {"a": 1, "b": 2}, idempotency_key="crash")
    assert (result.phase, result.kind) == ("failed", "outcome_unknown")
    assert effects.read_text() == "add\n"


def test_approving_an_unknown_hold_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    done = evalkit("gate", "approve", "ap_0123456789abcdef", "--decided-by", "ops",
                   "--approvals", tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"Error: no held call has approval id ap_0123456789abcdef "
                                   f"(in {tmp_path})")


def test_a_hold_is_decided_once(tmp_path: Path) -> None:
    with Sidecar(tmp_path) as gate:
        gate.client.govern("send", {"to": "a"}, idempotency_key="mail")
        approval_id = _approval_id(gate)
    decide_file(approval_id, decided_by="ops", approve=False,
                approvals_dir=tmp_path / "approvals", ledger_path=tmp_path / "governance.sqlite")
    from evalkit.errors import EvalkitError

    with pytest.raises(EvalkitError, match="decided once"):
        decide_file(approval_id, decided_by="ops", approve=True,
                    approvals_dir=tmp_path / "approvals",
                    ledger_path=tmp_path / "governance.sqlite")


def test_the_committed_governance_doc_holds_the_current_protocol() -> None:
    from evalkit.gate import protocol_doc

    doc = ROOT / "docs" / "GOVERNANCE.md"
    text = doc.read_text("utf-8") if doc.exists() else ""
    if protocol_doc.BEGIN not in text:
        pytest.skip("docs/GOVERNANCE.md has no generated protocol block yet")
    assert protocol_doc.rewrite(text) == text, (
        "regenerate it: python -m evalkit.gate.protocol_doc docs/GOVERNANCE.md")


def test_a_client_whose_gate_cannot_start_says_so_at_once(tmp_path: Path) -> None:
    import os

    policy = tmp_path / "p.yaml"
    policy.write_text("tools: {x: {risk: 9, reversible: true}}\n")
    started = time.monotonic()
    with pytest.raises(GateError, match="did not say ready"):
        Client(policy, ledger=tmp_path / "l.sqlite", runs="none",
               env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.monotonic() - started < 30


def test_a_request_file_rewritten_to_show_something_else_is_never_signed(tmp_path: Path
                                                                        ) -> None:
    from evalkit.errors import EvalkitError

    with Sidecar(tmp_path) as gate:
        gate.client.govern("send", {"to": "everyone@example.com"}, idempotency_key="mail")
        (path,) = (tmp_path / "approvals").glob("ap_*.json")
        record = json.loads(path.read_text())
        record["arguments"] = {"to": "me@example.com"}  # what a person would be shown
        path.write_text(json.dumps(record))
        with pytest.raises(EvalkitError, match="does not match the ledger"):
            decide_file(path.stem, decided_by="ops", approve=True,
                        approvals_dir=tmp_path / "approvals",
                        ledger_path=tmp_path / "governance.sqlite")
        assert gate.client.resume("mail").phase == "pending_approval"
