"""How a mission is spawned and what is written down about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.eval.runner import Job, command_line, refusal, secret_values, strip_url, withhold


def job(spawn: list[str], flags: tuple[str, ...] = ()) -> Job:
    return Job(key="k", objective="What is {runs}?", spawn=tuple(spawn), flags=flags,
               out="/out/k", timeout_s=1, cwd="/")


def test_the_objective_is_appended_first_unless_the_spawn_line_places_it() -> None:
    assert command_line(job(["agent", "--x"], ("--gate-tool", "t")), 7) == [
        "agent", "--x", "What is {runs}?", "--events", "fd:7", "--gate-tool", "t"]
    placed = command_line(job(["agent", "--task={objective}", "--store", "{runs}"]), 5)
    # One pass: the objective's own braces are never substituted.
    assert placed == ["agent", "--task=What is {runs}?", "--store", "/out/k/runs",
                      "--events", "fd:5"]


@pytest.mark.parametrize(("url", "shown"), [
    ("https://u:p4ss@host/mcp", "https://[REDACTED]@host/mcp"),
    ("http://host:8080/mcp?key=abc&x", "http://host:8080/mcp?key=[REDACTED]&x"),
    ("http://host/v1", "http://host/v1"),
    ("CMD --url wss://tok@h/s#frag", "CMD --url wss://[REDACTED]@h/s#[REDACTED]"),
])
def test_urls_lose_userinfo_and_query_values(url: str, shown: str) -> None:
    assert strip_url(url) == shown


def test_withhold_hides_credential_flags_urls_and_what_the_redactor_knows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_PASSWORD", "pw-1234567")
    argv = ["agent", "--api-key", "k-123456", "--token=t-abcdef", "--mcp-url",
            "https://a:b@h/m?sig=zzz", "--mcp-stdio", "srv --auth Bearer abcdefghij",
            "--model", "pw-1234567", "--keyless"]
    shown = withhold(argv)
    assert shown == ["agent", "--api-key", "[REDACTED]", "--token=[REDACTED]", "--mcp-url",
                     "https://[REDACTED]@h/m?sig=[REDACTED]", "--mcp-stdio",
                     "srv --auth Bearer [REDACTED]", "--model", "[REDACTED]", "--keyless"]
    assert set(secret_values(argv)) >= {"k-123456", "t-abcdef", "a:b", "b", "zzz"}


def test_a_secret_flag_keeps_its_name_and_makes_the_value_known(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANTED_DSN", "dsn-value-123456")
    argv = ["agent", "--secret", "PLANTED_DSN", "--secret=PLANTED_DSN", "--secret", "UNSET_X",
            "--dsn", "dsn-value-123456", "--passwd", "p-123456"]
    assert secret_values(argv) == ["dsn-value-123456", "p-123456"]
    assert withhold(argv) == ["agent", "--secret", "PLANTED_DSN", "--secret=PLANTED_DSN",
                              "--secret", "UNSET_X", "--dsn", "[REDACTED]", "--passwd",
                              "[REDACTED]"]


def test_a_refusal_is_exit_2_with_no_record_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "stderr.txt").write_text("Error: --swarm is not available yet.\n")
    assert refusal({"exit_code": 2, "events_bytes": 0}, tmp_path) == (
        "Error: --swarm is not available yet.")
    assert refusal({"exit_code": 2, "events_bytes": 10}, tmp_path) is None
    assert refusal({"exit_code": 1, "events_bytes": 0}, tmp_path) is None
    (tmp_path / "stderr.txt").write_text("Error: No such option: --swarm\n")
    assert refusal({"exit_code": 2, "events_bytes": 0}, tmp_path) is not None
    (tmp_path / "stderr.txt").write_text("Error: --model is required\n")
    assert refusal({"exit_code": 2, "events_bytes": 0}, tmp_path) is None


def test_stop_all_winds_up_every_running_agent(tmp_path: Path) -> None:
    import threading
    import time

    from evalkit.eval import runner
    from tests.harness.conftest import FOREIGN

    hang = Job(key="k", objective="o", spawn=(*FOREIGN, "--hang"), flags=(),
               out=str(tmp_path / "k"), timeout_s=60, cwd=str(tmp_path))
    got: list[dict] = []
    worker = threading.Thread(target=lambda: got.extend(runner.execute([hang])))
    worker.start()
    deadline = time.monotonic() + 20
    while not (tmp_path / "k" / "events.jsonl").exists() or \
            not (tmp_path / "k" / "events.jsonl").read_text().count("\n") >= 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    runner.stop_all()
    worker.join(15)
    assert not worker.is_alive()
    assert got[0]["timed_out"] is False and got[0]["exit_code"] < 0


SECRET = "k-s3cret-123456"


def _agent(tmp_path: Path, code: str, **job: object) -> Job:
    import sys

    fields: dict = {"timeout_s": 60, **job}
    return Job(key="k", objective="o", spawn=(sys.executable, "-c", code), flags=(),
               out=str(tmp_path / "k"), cwd=str(tmp_path), secrets=(SECRET,), **fields)


def _until(check: object, what: str, seconds: float = 30) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)


def test_what_the_agent_prints_is_on_disk_scrubbed_while_it_still_runs(tmp_path: Path) -> None:
    import threading

    from evalkit.eval.runner import run_mission

    go = tmp_path / "go"
    code = ("import os, sys, time\n"
            f"print('the key is {SECRET}, said at the start', flush=True)\n"
            "print('Authorization: Bearer abcdefgh12345678', file=sys.stderr, flush=True)\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
            "sys.stdout.buffer.write(b'bytes kept as they came: \\xff\\xfe\\n')\n")
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(run_mission(_agent(tmp_path, code))))
    worker.start()
    stdout, stderr = tmp_path / "k" / "stdout.txt", tmp_path / "k" / "stderr.txt"
    try:
        _until(lambda: stdout.exists() and b"said at the start" in stdout.read_bytes(),
               "the first line")
        _until(lambda: b"Authorization" in stderr.read_bytes(), "the stderr line")
        # Mid-mission: the line is there, its credential is not — on the disk, not just at the end.
        assert stdout.read_bytes() == b"the key is [REDACTED], said at the start\n"
        assert stderr.read_bytes() == b"Authorization: [REDACTED]\n"
    finally:
        go.touch()
        worker.join(30)
    assert not worker.is_alive() and done[0]["exit_code"] == 0
    assert stdout.read_bytes() == (b"the key is [REDACTED], said at the start\n"
                                   b"bytes kept as they came: \xff\xfe\n")


@pytest.mark.slow
def test_a_process_left_behind_holding_the_pipes_does_not_hold_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal
    import threading

    from evalkit.eval import runner

    monkeypatch.setattr(runner, "DRAIN_GRACE_S", 0.2)
    pid_file = tmp_path / "straggler.pid"
    # The agent starts a process in a session of its own (out of reach of the group kill)
    # that keeps its stdout and the event pipe, says something, and sleeps; the agent
    # itself exits at once.
    code = ("import subprocess, sys\n"
            "events = int(next(a for a in sys.argv if a.startswith('fd:'))[3:])\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; print(\"left behind\", "
            "flush=True); time.sleep(120)'], start_new_session=True, pass_fds=(events,))\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            f"print('agent: {SECRET}', flush=True)\n")
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(runner.run_mission(_agent(tmp_path, code))))
    worker.start()
    try:
        worker.join(60)
        assert not worker.is_alive(), "the run waited on a pipe its agent's straggler held"
    finally:
        _until(pid_file.exists, "the straggler's pid")
        _until(lambda: pid_file.read_text().strip(), "the straggler's pid")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        worker.join(30)
    assert done[0]["exit_code"] == 0
    text = (tmp_path / "k" / "stdout.txt").read_text()
    assert "agent: [REDACTED]" in text and "left behind" in text and SECRET not in text


def test_a_disk_that_fills_while_writing_stdout_never_leaves_a_credential_raw(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    import errno
    import os

    from evalkit.eval import runner

    real_open = builtins.open

    class Full:
        """stdout.txt on a disk with 100 bytes left."""

        def __init__(self, file: object) -> None:
            self.file, self.room = file, 100

        def write(self, data: bytes) -> int:
            if len(data) > self.room:
                self.file.write(data[:self.room])  # type: ignore[attr-defined]
                self.room = 0
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.room -= len(data)
            return self.file.write(data)  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self.file, name)

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()  # type: ignore[attr-defined]

    def opener(path: object, *args: object, **kwargs: object) -> object:
        file = real_open(path, *args, **kwargs)  # type: ignore[call-overload]
        return Full(file) if str(path).endswith("stdout.txt") else file

    monkeypatch.setattr(runner, "open", opener, raising=False)
    # Far more than a pipe holds: the agent must not block on a pipe no one writes down.
    said = f"the key is {SECRET}, and a long line after it\n" * 5000
    code = (f"import sys\nfor _ in range(5000): sys.stdout.write({said[:said.index(chr(10)) + 1]!r})\n"
            "print('done', file=sys.stderr)")
    with pytest.raises(OSError, match="No space left"):
        runner.run_mission(_agent(tmp_path, code, timeout_s=30))
    kept = (tmp_path / "k" / "stdout.txt").read_bytes()
    assert kept == said.replace(SECRET, "[REDACTED]").encode()[:100]
    assert SECRET.encode() not in kept
    assert (tmp_path / "k" / "stderr.txt").read_text() == "done\n"  # the other pipes drained
