"""An adversarial review of the governance promises: each test is a concrete attack by a
hostile client of the sidecar, or by someone who can write the governance database,
that once got through (or must never get through).

Real parts throughout: the SQLite ledger, the gate server on OS pipes, Ed25519.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evalkit.gate.ledger import Ledger, LedgerError, action_digest
from tests.gate._ledger_kit import POLICY, Clock, governed

# -- the ledger: a column edited by hand, behind the chain's back ------------------------------


def _edit(book: Ledger, sql: str, *args: object) -> None:
    """Write the database directly, as someone with the file (not the API) would."""
    raw = sqlite3.connect(book.path)
    with raw:
        raw.execute(sql, args)
    raw.close()


def test_editing_a_completed_actions_result_is_caught_by_the_chain(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "gov.sqlite", clock=Clock())
    governed(book, "k", "noop", {"x": 1})
    book.start("k")
    book.complete("k", {"paid": 10})
    assert book.verify_chain()[0]
    _edit(book, "UPDATE actions SET result = ? WHERE key = 'k'", '{"paid":1000}')
    ok, _, problem = book.verify_chain()
    assert not ok and "result" in str(problem)


def test_editing_an_approved_actions_arguments_and_digest_never_executes(tmp_path: Path
                                                                        ) -> None:
    book = Ledger(tmp_path / "gov.sqlite", clock=Clock())
    governed(book, "k", "noop", {"to": "alice"})
    forged = {"to": "mallory"}
    _edit(book, "UPDATE actions SET arguments = ?, digest = ? WHERE key = 'k'",
          '{"to":"mallory"}', action_digest("noop", forged, POLICY.hash))
    try:
        won = book.start("k")
    except LedgerError as refused:
        assert "digest" in refused.message
    else:
        raise AssertionError(f"a row edited behind the chain was started: {won}")
    assert not book.verify_chain()[0]


def test_moving_a_holds_deadline_by_hand_is_caught(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "gov.sqlite", clock=Clock())
    held = governed(book, "k", "pay", {"amount": 5})
    _edit(book, "UPDATE actions SET deadline = ? WHERE key = 'k'", held.deadline + 10**6)
    ok, _, problem = book.verify_chain()
    assert not ok and "deadline" in str(problem)


# -- the sidecar: a client reaching for an action that is not its gate's -----------------------


def test_resume_never_starts_or_reads_an_action_decided_under_another_policy(tmp_path: Path
                                                                            ) -> None:
    """The ledger is shared (the state folder's governance.sqlite): the built-in runtime and
    other gates keep their actions in it. ``resume`` names only a key, so a hostile client
    could start an allowed action of another policy — and get its body sent to itself —
    or read another session's recorded result."""
    from tests.gate._sidecar import Sidecar

    with Sidecar(tmp_path) as gate:
        ran: list[dict] = []
        gate.client.register_tool("noop", lambda **kw: ran.append(kw) or "stolen")
        governed(gate.ledger, "foreign-allowed", "noop", {"secret": "alice"})
        governed(gate.ledger, "foreign-done", "noop", {"n": 2})
        gate.ledger.start("foreign-done")
        gate.ledger.complete("foreign-done", {"balance": 12345})
        stolen = gate.client.resume("foreign-allowed")
        read = gate.client.resume("foreign-done")
        assert ran == []
        assert gate.ledger.get("foreign-allowed").state == "allowed"
        for reply in (stolen, read):
            assert reply.phase == "rejected" and reply.kind == "conflict"
            assert reply.result is None


# -- secrets: what a tool returned or raised is stored redacted ---------------------------------

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


def _stored(tmp: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp.rglob("*") if p.is_file())


def test_a_secret_in_a_tools_result_or_error_never_lands_in_the_ledger(tmp_path: Path) -> None:
    from tests.gate._sidecar import Sidecar

    def boom() -> None:
        raise RuntimeError(f"the key {KEY} was refused")

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("echo", lambda **kw: {"token": KEY})
        gate.client.register_tool("boom", boom)
        live = gate.client.govern("echo", {"api_key": KEY}, idempotency_key="e1")
        failed = gate.client.govern("boom", {}, idempotency_key="b1")
        again = gate.client.govern("echo", {"api_key": KEY}, idempotency_key="e1")
    assert live.result == {"token": KEY}  # the client's own body made it: handed back as is
    assert KEY in str(failed.error)
    assert again.replayed and KEY not in str(again.result)  # the durable record is scrubbed
    assert KEY.encode() not in _stored(tmp_path)


# -- bad input: one sentence, a non-zero exit, never a traceback -------------------------------


def test_verify_certificates_of_a_file_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    """A file stands for its folder only when the folder is a run; a policy file in a plain
    folder was read as a run "without certificates", exit 0."""
    from tests._multiply import evalkit

    stray = tmp_path / "policy.yaml"
    stray.write_text("tools: {}\n", "utf-8")
    done = evalkit("verify", "--certificates", stray, env={"EVALKIT_HOME": str(tmp_path / "h")})
    assert done.returncode != 0
    assert "is not a run" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_bad_input_to_the_new_commands_is_one_sentence(tmp_path: Path) -> None:
    from tests._multiply import evalkit

    env = {"EVALKIT_HOME": str(tmp_path / "h")}
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [1,2\n", "utf-8")
    for args in (("gate", "serve", "--policy", tmp_path / "missing.yaml"),
                 ("gate", "serve", "--policy", bad),
                 ("runs", "show", "nonexistent"),
                 ("regrade", tmp_path, "--policy", bad),
                 ("gate", "approve", "ap_nope", "--decided-by", "x")):
        done = evalkit(*args, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0, args


# -- the line parser: anything a client writes gets one reply ----------------------------------

import json as _json  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from evalkit.gate import protocol as P  # noqa: E402

_FIELDS = ["type", "id", "idempotency_key", "tool", "arguments", "wait_ms", "step", "run_id",
           "correlation_id", "output", "error", "answer", "description"]
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=()), max_size=8)  # lone surrogates too
    | st.sampled_from(list(P.INBOUND)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3), max_leaves=8)
_NEAR_MESSAGES = st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=6).map(
    lambda d: _json.dumps(d).encode("utf-8", "surrogatepass"))
_LINES = st.binary(max_size=64) | _NEAR_MESSAGES


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_LINES)
def test_parse_inbound_accepts_or_refuses_every_line_and_never_crashes(line: bytes) -> None:
    try:
        message = P.parse_inbound(line)
    except P.ProtocolError as refused:
        assert refused.code in P.ERRORS
        P.dumps(refused.reply()).decode("utf-8")  # the reply is UTF-8 text
        return
    assert message["type"] in P.INBOUND
    P.dumps(message).decode("utf-8")  # whatever is accepted can be echoed as UTF-8


def test_a_lone_surrogate_is_refused_so_every_reply_is_utf8(tmp_path: Path) -> None:
    """``"\\ud800"`` is JSON's grammar but not Unicode text: accepted, it came back as bytes
    that are not UTF-8 — the id's reply was never read by the client, and a run_tool with
    it in the arguments went unanswered (outcome_unknown)."""
    from tests.gate._sidecar import Sidecar

    lines = [b'{"type":"govern","id":"\\ud800","idempotency_key":"k","tool":"add",'
             b'"arguments":{}}',
             b'{"type":"govern","id":"s3","idempotency_key":"k3","tool":"add",'
             b'"arguments":{"\\ud800":1}}',
             b'{"type":"register_tool","id":"r1","tool":"\\udc80"}']
    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda **kw: "ok")
        for line in lines:
            assert gate.raw(line)["code"] == "not_json"
        assert gate.ledger.get("k3") is None


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_LINES, min_size=1, max_size=40))
def test_the_live_gate_answers_every_fuzzed_line_and_keeps_serving(lines: list[bytes]
                                                                    ) -> None:
    import tempfile

    from tests.gate._sidecar import Sidecar

    with tempfile.TemporaryDirectory() as tmp, Sidecar(Path(tmp), tool_timeout=1) as gate:
        gate.client.register_tool("add", lambda **kw: "ok")
        for line in lines:
            line = line.replace(b"\n", b" ").replace(b"\r", b" ")
            if not line.strip():
                continue
            try:
                message = P.parse_inbound(line)
            except P.ProtocolError:
                message = None
            if message is not None and message["type"] == "shutdown":
                continue  # would end the session this test goes on using
            if message is not None and message["type"] in ("govern", "resume",
                                                            "register_tool"):
                continue  # a valid request: answered on its own id, not a stray reply
            reply = gate.raw(line)
            assert reply["type"] == "error" and reply["code"] in P.ERRORS
        assert gate.client.govern("add", {}, idempotency_key="after").phase == "completed"


# -- known limit: the chain has no anchor outside the database ---------------------------------

import pytest  # noqa: E402


@pytest.mark.xfail(strict=True, reason="the chain is not anchored outside the database: cutting "
                   "its tail and rolling the row back is consistent (needs an external "
                   "high-water mark, e.g. the ledger's last seq in the sealed recording)")
def test_cutting_the_chains_tail_to_roll_an_action_back_is_caught(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "gov.sqlite", clock=Clock())
    governed(book, "k", "noop", {"x": 1})
    decided = book.events("k")[-1]
    book.start("k")
    book.complete("k", "done")
    _edit(book, "DELETE FROM events WHERE seq > ?", decided.seq)
    _edit(book, "UPDATE actions SET state = 'allowed', result = NULL, kind = 'allowed', "
                "head = ? WHERE key = 'k'", decided.hash)
    assert not book.verify_chain()[0]  # today: ok, and start() would run it a second time


# -- bounded work: requests in flight ----------------------------------------------------------


@pytest.mark.slow
def test_requests_in_flight_are_bounded_and_the_rest_refused_at_once(tmp_path: Path) -> None:
    """Each waiting request holds a thread; a client sending requests without end (a held
    tool, the longest wait) would have the gate start threads until it could not, and a
    failing ``Thread.start`` would raise out of the serve loop, its run never sealed."""
    import time

    from tests.gate._sidecar import Sidecar

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda **kw: "ok")
        gate.server.max_in_flight = 3
        for n in range(5):
            gate.client.send_raw(_json.dumps({
                "type": "govern", "id": f"g{n}", "idempotency_key": f"k{n}", "tool": "send",
                "arguments": {}, "wait_ms": 1500}).encode())
        end = time.monotonic() + 10
        while len(gate.client.unmatched) < 5 and time.monotonic() < end:
            time.sleep(0.01)
        replies = {r["id"]: r for r in gate.client.unmatched}
        refused = [r for r in replies.values() if r["type"] == "error"]
        assert len(refused) == 2 and all("in flight" in r["message"] for r in refused)
        assert sum(r["type"] == "govern_result" for r in replies.values()) == 3
        assert gate.client.govern("add", {}, idempotency_key="after").phase == "completed"


@pytest.mark.slow
def test_a_governance_database_that_cannot_be_opened_is_one_sentence(tmp_path: Path) -> None:
    """``gate serve`` and ``gate approve`` open the database through ``db.connect``; a
    folder, a file that is not SQLite or a state folder that is a file gave
    'internal error … OperationalError' (exit 3)."""
    from tests._multiply import evalkit

    policy = tmp_path / "p.yaml"
    policy.write_text("tools:\n  add: {risk: 0, reversible: true}\n", "utf-8")
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("x" * 4096, "utf-8")
    a_file = tmp_path / "home-is-a-file"
    a_file.write_text("", "utf-8")
    cases = [(("gate", "serve", "--policy", policy, "--ledger", tmp_path), {}),
             (("gate", "serve", "--policy", policy, "--ledger", not_sqlite), {}),
             (("gate", "serve", "--policy", policy), {"EVALKIT_HOME": str(a_file)})]
    for args, env in cases:
        done = evalkit(*args, env={"EVALKIT_HOME": str(tmp_path / "h"), **env})
        assert done.returncode == 2, (args, done.stderr)
        assert "cannot open the action ledger" in done.stderr, done.stderr
        assert done.stderr.strip().count("\n") == 0


# -- certificates: a gate's run carries them under its seal ------------------------------------


@pytest.mark.slow
def test_a_gate_run_is_certified_at_close_and_its_seal_lists_the_certificates(tmp_path: Path
                                                                             ) -> None:
    """The sidecar's runs closed without certificates, so ``verify --certificates`` said
    only 'no certificates' (exit 0) for a governed run, and certificates issued later are
    outside the seal: one deleted went unnoticed."""
    from tests._multiply import evalkit
    from tests.gate._sidecar import Sidecar

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda a, b: a + b)
        gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="k1")
        gate.close(answer="3")
    (run,) = [p.parent for p in (tmp_path / "runs").rglob("events.jsonl")]
    done = evalkit("verify", "--certificates", run)  # the signer's own state folder
    assert done.returncode == 0 and "certified" in done.stdout, done.stdout + done.stderr
    (run / "certificates.jsonl").unlink()
    done = evalkit("verify", "--certificates", run)
    assert done.returncode == 1 and "tampered" in done.stdout, done.stdout


@pytest.mark.slow
def test_certificates_reissued_for_an_unsealed_run_are_not_shown_as_vouched_for(
        tmp_path: Path) -> None:
    """Strip a run's seal, rewrite its records, issue certificates again: they recompute
    (they are computed from what the records now say). verify said 'certified' like any
    sealed run's; it now says the records are unsealed, so nothing vouches for them."""
    from tests._multiply import evalkit
    from tests.gate._sidecar import Sidecar

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda a, b: a + b)
        gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="k1")
        gate.close(answer="3")
    (run,) = [p.parent for p in (tmp_path / "runs").rglob("events.jsonl")]
    (run / "manifest.json").unlink()
    (run / "certificates.jsonl").unlink()
    events = run / "events.jsonl"
    events.write_text(events.read_text("utf-8").replace('"3"', '"4"'), "utf-8")
    done = evalkit("verify", "--certificates", "--issue", run)
    assert "unsigned" in done.stdout
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("certified")]
    assert "unsealed" in line, line


def test_the_run_views_say_when_a_sealed_run_no_longer_matches_its_seal(tmp_path: Path
                                                                       ) -> None:
    """``runs list|show`` read the outcome off the stream and said ``sealed=true`` whenever a
    manifest was there: a sealed run rewritten to say 'answered' was shown as such."""
    from evalkit.store.runviews import run_record
    from tests.gate._sidecar import Sidecar

    with Sidecar(tmp_path) as gate:
        gate.client.register_tool("add", lambda a, b: a + b)
        gate.client.govern("add", {"a": 1, "b": 2}, idempotency_key="k1")
        gate.close()  # no answer: incomplete
    (run,) = [p.parent for p in (tmp_path / "runs").rglob("events.jsonl")]
    assert run_record(run).status == "incomplete"
    assert "tampered" not in run_record(run).metadata
    events = run / "events.jsonl"
    events.write_text(events.read_text("utf-8").replace('"outcome":"incomplete"',
                                                        '"outcome":"answered"'), "utf-8")
    forged = run_record(run)
    assert forged.metadata["sealed"] is True and "events.jsonl" in forged.metadata["tampered"]
