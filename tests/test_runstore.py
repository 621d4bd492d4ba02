from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.store import layout
from evalkit.store.runstore import RunStore, RunWriter


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def events_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / layout.EVENTS_FILE).read_text("utf-8").splitlines()]


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    """A real child process running ``code``; it prints one line once it is ready."""
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True)


HOLDER = """
import sys, time
from pathlib import Path
from evalkit.store.runstore import RunStore
writer = RunStore(Path(sys.argv[1])).create({"objective": "hold"})
print(writer.run_id, flush=True)
time.sleep(60)
"""

APPENDER = """
import sys
from pathlib import Path
from evalkit.store.runstore import RunStore
writer = RunStore(Path(sys.argv[1])).create({"objective": "crash"})
print(writer.run_id, flush=True)
while True:
    writer.append({"event": "tool_result", "output": "x" * 20000})
"""


def test_create_lays_out_a_run(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    with store.create({"objective": "count files", "flags": ["--x"]}) as writer:
        assert layout.is_run_id(writer.run_id)
        assert writer.path == store.path_of(writer.run_id)
        assert writer.append({"event": "step_started", "index": 1}) == 1
        meta = json.loads((writer.path / layout.META_FILE).read_text("utf-8"))
        assert meta["run_id"] == writer.run_id
        assert meta["meta"] == {"objective": "count files", "flags": ["--x"]}
        assert meta["last_seq"] == 0 and meta["created_at"].endswith("Z")
    assert store.run_ids() == [writer.run_id]
    [event] = events_of(writer.path)
    assert event["seq"] == 1 and event["at"].endswith("Z")
    assert event["record"] == {"event": "step_started", "index": 1}


def test_seq_is_gap_free_across_threads(tmp_path: Path) -> None:
    with RunStore(tmp_path).create({}) as writer:
        def worker(n: int) -> None:
            for i in range(100):
                writer.append({"event": "x", "who": n, "i": i})

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = events_of(writer.path)
    assert [e["seq"] for e in events] == list(range(1, 801))
    for n in range(8):
        assert [e["record"]["i"] for e in events if e["record"]["who"] == n] == list(range(100))


def test_kill_9_mid_write_leaves_at_most_a_torn_last_line(tmp_path: Path) -> None:
    child = spawn(APPENDER, str(tmp_path))
    assert child.stdout is not None
    run_id = child.stdout.readline().strip()
    events = tmp_path / run_id / layout.EVENTS_FILE
    deadline = time.monotonic() + 20
    while (not events.exists() or events.stat().st_size < 500_000) and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    lines = events.read_bytes().split(b"\n")
    complete, last = lines[:-1], lines[-1]
    seqs = [json.loads(line)["seq"] for line in complete]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 5
    if last:  # torn: never parses as a whole record
        with pytest.raises(ValueError):
            json.loads(last)
    # The lock died with the process; a new writer cuts any torn tail and continues.
    store = RunStore(tmp_path)
    assert not store.is_live(run_id)
    with RunWriter(store.path_of(run_id)) as writer:
        assert writer.append({"event": "after"}) == len(seqs) + 1
    assert [e["seq"] for e in events_of(tmp_path / run_id)] == list(range(1, len(seqs) + 2))


def test_a_writer_that_writes_nothing_leaves_the_run_as_it_found_it(tmp_path: Path) -> None:
    """A refused ``--resume`` opens the run's writer and closes it unused: the seal, the
    certificates and even a crash's torn tail stay; the first write drops the seal and cuts
    the tail (``test_kill_9_mid_write...``), so the numbering goes on from the last line."""
    from evalkit.store.signing import Signer

    signer = Signer.generate()
    store = RunStore(tmp_path, durable=False, signer=signer)
    with store.create({"objective": "x"}) as writer:
        writer.append({"event": "first"})
    run = tmp_path / writer.run_id
    (run / layout.CERTIFICATES_FILE).write_text("{}\n")  # as a closing runtime leaves them
    files = {f.name: f.read_bytes() for f in run.iterdir() if f.name != layout.LOCK_FILE}
    assert layout.MANIFEST_FILE in files
    RunWriter(run, durable=False, signer=signer).close()
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.name != layout.LOCK_FILE} == files
    # The seal is checked again at the first write: what changed since the open is not sealed.
    events = run / layout.EVENTS_FILE
    with RunWriter(run, durable=False, signer=signer) as held:
        events.write_bytes(events.read_bytes().replace(b"first", b"forged"))
        with pytest.raises(EvalkitError, match="cannot be continued: recording altered"):
            held.append({"event": "second"})
    assert (run / layout.MANIFEST_FILE).exists()  # the evidence stays
    events.write_bytes(events.read_bytes().replace(b"forged", b"first"))

    # An unsealed run with a torn tail: left torn by an unused writer, cut by a used one.
    (run / layout.MANIFEST_FILE).unlink()
    events.write_bytes(events.read_bytes() + b'{"seq": 2, "at"')
    torn = events.read_bytes()
    RunWriter(run, durable=False).close()
    assert events.read_bytes() == torn
    with RunWriter(run, durable=False) as again:
        assert again.append({"event": "second"}) == 2
    assert [e["seq"] for e in events_of(run)] == [1, 2]
    assert not (run / layout.CERTIFICATES_FILE).exists()  # they were of the closed run


def test_lock_blocks_a_second_writer_until_the_holder_dies(tmp_path: Path) -> None:
    child = spawn(HOLDER, str(tmp_path))
    assert child.stdout is not None
    try:
        run_id = child.stdout.readline().strip()
        store = RunStore(tmp_path)
        assert store.is_live(run_id)
        with pytest.raises(EvalkitError, match="another live process"):
            RunWriter(store.path_of(run_id))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert not store.is_live(run_id)
    with RunWriter(store.path_of(run_id)) as writer:
        assert writer.append({"event": "x"}) == 1


@pytest.mark.slow
def test_lock_is_released_on_close_and_blocks_within_a_process(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    writer = store.create({})
    assert store.is_live(writer.run_id)
    with pytest.raises(EvalkitError):
        RunWriter(writer.path)
    code = ("import sys\nfrom evalkit.store.runstore import RunStore\n"
            "print(RunStore(sys.argv[1]).is_live(sys.argv[2]))")
    probe = [sys.executable, "-c", code, str(tmp_path), writer.run_id]
    assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "True"
    writer.close()
    writer.close()  # twice is fine
    assert not store.is_live(writer.run_id)
    assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "False"
    with pytest.raises(EvalkitError, match="closed"):
        writer.append({"event": "late"})


@pytest.mark.slow
def test_meta_is_replaced_atomically(tmp_path: Path) -> None:
    writer = RunStore(tmp_path).create({"objective": "o"})
    meta_path = writer.path / layout.META_FILE
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            seen.append(json.loads(meta_path.read_bytes())["meta"].get("n", -1))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(200):
            writer.append({"event": "x"})
            writer.update_meta(n=n, padding="p" * 5000)
    finally:
        stop.set()
        thread.join()
    meta = json.loads(meta_path.read_bytes())
    assert meta["meta"]["objective"] == "o" and meta["meta"]["n"] == 199
    assert meta["last_seq"] == 200 and meta["updated_at"] >= meta["created_at"]
    assert seen and seen == sorted(seen)  # never a torn or stale-then-new file
    writer.close()
    assert sorted(p.name for p in writer.path.iterdir()) == [layout.EVENTS_FILE, layout.LOCK_FILE,
                                                              layout.META_FILE]


def test_model_and_tool_lines_are_canonical_json(tmp_path: Path) -> None:
    request = {"messages": [{"role": "user", "content": "héllo ✓ 12,481"}], "extra": {"t": 0.5}}
    reply = {"content": "ok", "tool_calls": [], "usage": {"prompt_tokens": 3}}
    catalogue = [{"name": "sh", "description": "run a command"}]
    with RunStore(tmp_path).create({}) as writer:
        assert writer.record_model_call("mission", request, reply) == 1
        assert writer.record_model_call("plain", request, reply) == 2
        writer.record_catalogue(catalogue)
        result = {"exit_code": 0, "stdout": "3\n", "stderr": "", "structured": None}
        assert writer.record_tool_call("sh", {"cmd": "ls | wc -l"}, result) == 1
    model_lines = (writer.path / layout.MODEL_FILE).read_bytes().splitlines()
    first = json.loads(model_lines[0])
    assert model_lines[0] == canonical({"call": 1, "at": first["at"], "kind": "mission",
                                        "request": request, "reply": reply})
    assert json.loads(model_lines[1])["call"] == 2
    tool_lines = (writer.path / layout.TOOLS_FILE).read_bytes().splitlines()
    cat, call = (json.loads(line) for line in tool_lines)
    assert tool_lines[0] == canonical({"call": 0, "at": cat["at"], "catalogue": catalogue})
    assert tool_lines[1] == canonical({"call": 1, "at": call["at"], "tool": "sh",
                                       "arguments": {"cmd": "ls | wc -l"}, "result": result})


def test_planted_secrets_never_reach_any_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    env_secret = "plain-env-secret-value-77"
    monkeypatch.setenv("EVALKIT_TEST_API_KEY", env_secret)
    secrets = [env_secret, "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
               "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAIOSFODNN7EXAMPLE",
               "eyJhbGciOiJIUzI1NiJ9.payload.sig"]
    text = " | ".join(["key " + env_secret, secrets[1], secrets[2], secrets[3],
                       "Authorization: Bearer " + secrets[4]])
    with RunStore(tmp_path).create({"objective": text, "flags": [f"--api-key={secrets[1]}"]}) as w:
        w.append({"event": "answer", "text": text, "outcome": "answered"})
        w.record_model_call("mission", {"messages": [{"content": text}], "extra": {}},
                            {"content": text, "tool_calls": [], "usage": {}})
        w.record_catalogue([{"name": "sh", "description": text}])
        w.record_tool_call("sh", {"cmd": f"curl -H 'Authorization: Bearer {secrets[4]}'"},
                           {"exit_code": 0, "stdout": text, "stderr": text, "structured": None})
        w.update_meta(note=text)
    blob = b"".join(p.read_bytes() for p in w.path.iterdir())
    for secret in secrets:
        assert secret.encode() not in blob
    assert b"[REDACTED]" in blob
    assert "Authorization: [REDACTED]" in (w.path / layout.TOOLS_FILE).read_text("utf-8")


@pytest.mark.parametrize("bad", ["../x", "run_../..", "run_ok/../../x", "", "nope", "run_missing"])
def test_path_of_refuses_bad_and_unknown_ids(tmp_path: Path, bad: str) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(EvalkitError, match="^no such run: "):
        RunStore(tmp_path).path_of(bad)
    with pytest.raises(EvalkitError, match="^no such run: "):
        RunStore(tmp_path).is_live(bad)


def test_run_ids_lists_only_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "absent")
    assert store.run_ids() == []
    store = RunStore(tmp_path)
    ids = []
    for _ in range(3):
        with store.create({}) as writer:
            ids.append(writer.run_id)
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "run_file").write_text("")
    assert store.run_ids() == sorted(ids)


class _FsyncSpy:
    """Stands in for ``os.fsync``: notes each file's size when it was made durable."""

    def __init__(self, real, fail_on: str | None = None) -> None:
        self.real, self.fail_on = real, fail_on
        self.durable: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        name = Path(f"/proc/self/fd/{fd}").resolve().name
        if name == self.fail_on:
            raise OSError(5, "Input/output error")
        self.real(fd)
        with self.lock:
            self.durable[name] = os.fstat(fd).st_size


def _write_some(writer: RunWriter) -> None:
    writer.record_catalogue([{"name": "echo"}])
    for n in range(5):
        writer.record_model_call("mission", {"messages": [{"role": "user", "content": "x" * n}]},
                                 {"content": "y"})
        writer.append({"event": "step_started", "step": n + 1})
        writer.record_tool_call("echo", {"text": "hi"}, {"exit_code": 0, "stdout": "hi"})


def test_every_line_is_durable_when_the_writer_closes(tmp_path: Path, monkeypatch) -> None:
    spy = _FsyncSpy(os.fsync)
    monkeypatch.setattr(os, "fsync", spy)
    writer = RunStore(tmp_path).create({"objective": "o"})
    _write_some(writer)
    # An events line is durable before append returns, whatever the call logs are doing.
    events = writer.path / layout.EVENTS_FILE
    assert spy.durable[layout.EVENTS_FILE] == events.stat().st_size
    writer.close()
    for name in (layout.EVENTS_FILE, layout.MODEL_FILE, layout.TOOLS_FILE):
        assert spy.durable[name] == (writer.path / name).stat().st_size, name


def test_a_failed_call_log_fsync_is_reported_not_swallowed(tmp_path: Path,
                                                            monkeypatch) -> None:
    monkeypatch.setattr(os, "fsync", _FsyncSpy(os.fsync, fail_on=layout.MODEL_FILE))
    writer = RunStore(tmp_path).create({"objective": "o"})
    writer.record_model_call("mission", {"messages": []}, {"content": "y"})
    with pytest.raises(EvalkitError, match="cannot record to .*model.jsonl: Input/output error"):
        writer.close()
    # The line itself was written, and the lock is released all the same.
    assert (writer.path / layout.MODEL_FILE).read_text().count("\n") == 1
    RunWriter(writer.path).close()


def test_a_store_that_is_not_durable_never_fsyncs(tmp_path: Path, monkeypatch) -> None:
    spy = _FsyncSpy(os.fsync)
    monkeypatch.setattr(os, "fsync", spy)
    with RunStore(tmp_path, durable=False).create({"objective": "o"}) as writer:
        _write_some(writer)
    assert spy.durable == {}
