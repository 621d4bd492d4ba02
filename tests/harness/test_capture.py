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


def test_a_disk_that_fills_while_scrubbing_leaves_what_the_agent_printed_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from evalkit.eval.runner import run_mission
    from tests._disk import fills_on, leftovers

    said = "the key is k-s3cret-123456, and a long line after it\n" * 50
    agent = Job(key="k", objective="o", spawn=(sys.executable, "-c",
                                               f"import sys; sys.stdout.write({said!r})"),
                flags=(), out=str(tmp_path / "k"), timeout_s=60, cwd=str(tmp_path),
                secrets=("k-s3cret-123456",))
    fills_on(monkeypatch, "stdout.txt")
    with pytest.raises(OSError, match="No space left"):
        run_mission(agent)
    assert (tmp_path / "k" / "stdout.txt").read_text() == said  # not scrubbed, but not lost
    assert leftovers(tmp_path / "k") == []
