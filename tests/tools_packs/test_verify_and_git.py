"""``verify`` (a real pytest subprocess) and ``git`` (real git) on staged fixture repositories."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evalkit.runtime.tools import Bwrap, ToolPlane
from evalkit.runtime.tools.coding import parse_pytest_summary
from evalkit.runtime.tools.sandbox import Sandbox
from tests.tools_packs.conftest import make_plane, needs_bwrap

pytestmark = pytest.mark.slow

SLUG_FIX = {"path": "textkit/slug.py", "old": 'r"[^a-z0-9]"', "new": 'r"[^a-z0-9]+"'}
PARSE_FIX = {"path": "ledger/parse.py", "old": "cleaned = cleaned[1:-1]",
             "new": "cleaned = \"-\" + cleaned[1:-1]"}
BALANCE_FIX = {"path": "ledger/statement.py", "old": "range(1, len(lines) - 1)",
               "new": "range(1, len(lines))"}


def counts(plane: ToolPlane, **arguments: object) -> tuple[int | None, dict[str, int | None], str]:
    """verify's exit code, its four counts, and the last line of its output."""
    result = plane.dispatch("verify", dict(arguments))
    s = result.structured
    assert s["exit_code"] == result.exit_code
    assert result.ok == (result.exit_code == 0)
    return (result.exit_code,
            {k: s[k] for k in ("passed", "failed", "errors", "skipped")},
            result.output.rstrip("\n").splitlines()[-1])


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout


# -- verify --------------------------------------------------------------------------


def sandboxes() -> list[object]:
    return ["none", pytest.param("bwrap", marks=needs_bwrap)]


def sandbox_of(name: str) -> Sandbox | None:
    return Bwrap() if name == "bwrap" else None


@pytest.mark.parametrize("sandbox", sandboxes())
def test_verify_reports_a_red_suite_then_a_green_one(staged: Callable[[str], Path],
                                                     sandbox: str) -> None:
    root = staged("textkit")
    plane = make_plane(root, sandbox_of(sandbox))
    red = plane.dispatch("verify", {})
    assert not red.ok and red.exit_code == 1
    assert red.structured["passed"] == 2 and red.structured["failed"] == 1
    assert (red.structured["errors"], red.structured["skipped"]) == (0, 0)
    last = red.output.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"1 failed, 2 passed in \d+\.\d+s", last)
    assert red.structured["summary"] == last and red.error == last
    assert "FAILED tests/test_slug.py::test_punctuation_collapses_to_one_hyphen" in red.output
    assert plane.dispatch("patch", SLUG_FIX).ok
    code, green, last = counts(plane)
    assert code == 0 and green == {"passed": 3, "failed": 0, "errors": 0, "skipped": 0}
    assert re.fullmatch(r"3 passed in \d+\.\d+s", last)
    # verify leaves the working tree as it found it: only the agent's edit shows
    assert git(root, "status", "--porcelain", "--ignored") == " M textkit/slug.py\n"


def test_verify_stays_red_until_both_files_are_fixed(staged: Callable[[str], Path]) -> None:
    plane = make_plane(staged("ledger"))
    assert counts(plane)[:2] == (1, {"passed": 2, "failed": 2, "errors": 0, "skipped": 0})
    assert plane.dispatch("patch", PARSE_FIX).ok
    assert counts(plane)[:2] == (1, {"passed": 3, "failed": 1, "errors": 0, "skipped": 0})
    assert plane.dispatch("patch", BALANCE_FIX).ok
    assert counts(plane)[:2] == (0, {"passed": 4, "failed": 0, "errors": 0, "skipped": 0})


def test_verify_the_other_way_round_is_still_red(staged: Callable[[str], Path]) -> None:
    plane = make_plane(staged("ledger"))
    assert plane.dispatch("patch", BALANCE_FIX).ok
    assert counts(plane)[:2] == (1, {"passed": 2, "failed": 2, "errors": 0, "skipped": 0})


def test_verify_the_green_fixtures(staged: Callable[[str], Path]) -> None:
    assert counts(make_plane(staged("stockroom")))[:2] == (
        0, {"passed": 3, "failed": 0, "errors": 0, "skipped": 0})
    assert counts(make_plane(staged("shapes")))[:2] == (
        0, {"passed": 4, "failed": 0, "errors": 0, "skipped": 0})


def test_verify_paths_and_keyword(staged: Callable[[str], Path]) -> None:
    plane = make_plane(staged("ledger"))
    assert counts(plane, paths=["tests/test_parse.py"])[:2] == (
        1, {"passed": 1, "failed": 1, "errors": 0, "skipped": 0})
    assert counts(plane, keyword="plain or empty")[:2] == (
        0, {"passed": 2, "failed": 0, "errors": 0, "skipped": 0})
    outside = plane.dispatch("verify", {"paths": ["../"]})
    assert not outside.ok and "leads out of the mission root" in outside.error
    missing = plane.dispatch("verify", {"paths": ["tests/test_nope.py"]})
    assert missing.error == "no such test path: 'tests/test_nope.py'"


def test_verify_counts_errors_and_skips(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mixed.py").write_text(
        "import pytest\n\n\ndef test_ok():\n    pass\n\n\n@pytest.mark.skip(reason='later')\n"
        "def test_later():\n    pass\n\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError\n"
        "\n\ndef test_uses_broken(broken):\n    pass\n")
    code, found, last = counts(make_plane(tmp_path))
    assert code == 1 and found == {"passed": 1, "failed": 0, "errors": 1, "skipped": 1}
    assert re.fullmatch(r"1 passed, 1 skipped, 1 error in \d+\.\d+s", last)
    (tmp_path / "tests" / "test_syntax.py").write_text("def broken(:\n")
    code, found, last = counts(make_plane(tmp_path))
    assert code == 2 and found["errors"] == 1 and re.fullmatch(r"1 error in \d+\.\d+s", last)


def test_verify_with_no_tests(tmp_path: Path) -> None:
    code, found, last = counts(make_plane(tmp_path))
    assert code == 5 and found == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    assert re.fullmatch(r"no tests ran in \d+\.\d+s", last)


def test_verify_is_bounded_in_time(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text("import time\n\n\ndef test_slow():\n"
                                           "    time.sleep(30)\n")
    began = time.monotonic()
    result = make_plane(tmp_path, timeout_s=2).dispatch("verify", {})
    assert time.monotonic() - began < 15
    assert not result.ok and result.exit_code is None
    assert result.structured["passed"] is None and result.structured["summary"] is None
    assert "[evalkit: no pytest summary line found; timed out]" in result.output
    assert "timed out after 2 s; killed" in result.output


def test_the_summary_parser() -> None:
    out = "..F\n=== short test summary info ===\nFAILED t.py::x\n1 failed, 2 passed in 0.03s\n"
    assert parse_pytest_summary(out) == ("1 failed, 2 passed in 0.03s",
                                         {"passed": 2, "failed": 1, "errors": 0, "skipped": 0})
    decorated = "==== 3 passed, 1 warning in 1.20s ====\n"
    assert parse_pytest_summary(decorated)[1] == {"passed": 3, "failed": 0, "errors": 0,
                                                  "skipped": 0}
    assert parse_pytest_summary("2 errors in 0.1s")[1]["errors"] == 2
    assert parse_pytest_summary("nothing here\n") == (None, {})


# -- git -----------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", sandboxes())
def test_git_status_diff_and_log(staged: Callable[[str], Path], sandbox: str) -> None:
    root = staged("textkit")
    plane = make_plane(root, sandbox_of(sandbox))
    clean = plane.dispatch("git", {"action": "status"})
    assert clean.ok and clean.output == "## main\n"
    assert plane.dispatch("patch", SLUG_FIX).ok
    assert plane.dispatch("patch", {"path": "NOTES.md", "old": "", "new": "todo\n"}).ok
    status = plane.dispatch("git", {"action": "status"})
    assert status.output == "## main\n M textkit/slug.py\n?? NOTES.md\n"
    diff = plane.dispatch("git", {"action": "diff"})
    assert diff.ok and diff.output.startswith("diff --git a/textkit/slug.py b/textkit/slug.py\n")
    assert '+    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")\n' in diff.output
    stat = plane.dispatch("git", {"action": "diff", "args": ["--stat"]})
    assert stat.output.splitlines()[-1].strip() == "1 file changed, 1 insertion(+), 1 deletion(-)"
    assert plane.dispatch("git", {"action": "diff", "args": ["--cached"]}).output == ""
    head = git(root, "rev-parse", "HEAD").strip()
    log = plane.dispatch("git", {"action": "log"})
    assert log.ok and log.output == (
        f"commit {head}\nAuthor: Evalkit Fixtures <fixtures@evalkit.invalid>\n"
        "Date:   Mon Jan 15 09:00:00 2024 +0000\n\n    textkit: initial import\n")
    short = plane.dispatch("git", {"action": "log", "args": ["--oneline", "-n", "1"]})
    assert short.output == f"{head[:7]} textkit: initial import\n"
    by_path = plane.dispatch("git", {"action": "log", "args": ["--format=%an|%s", "--",
                                                               "textkit/slug.py"]})
    assert by_path.output == "Evalkit Fixtures|textkit: initial import\n"


def test_git_refuses_write_actions_and_unsafe_arguments(staged: Callable[[str], Path]) -> None:
    root = staged("shapes")
    plane = make_plane(root)
    head = git(root, "rev-parse", "HEAD")
    for action in ("commit", "push", "checkout", "reset", "add", "config", "clean"):
        result = plane.dispatch("git", {"action": action, "args": ["-a", "-m", "x"]})
        assert not result.ok and result.error == (
            f"git {action} is refused: this tool only reads the repository "
            "(actions: status, diff, log)")
    unsafe = [
        ("diff", ["--output=../leak.txt"]), ("diff", ["--no-index", "/etc/hostname", "x"]),
        ("diff", ["--ext-diff"]), ("log", ["--exec-path=/tmp"]), ("diff", ["-O/etc/passwd"]),
        ("diff", ["-uO/etc/passwd"]), ("log", ["--output", "x"]), ("status", ["-c", "x=y"]),
    ]
    for action, args in unsafe:
        result = plane.dispatch("git", {"action": action, "args": args})
        assert not result.ok and "is refused: only read-only options" in result.error, args
    outside = plane.dispatch("git", {"action": "diff", "args": ["--", "../other"]})
    assert "leads out of the mission root" in outside.error
    absolute = plane.dispatch("git", {"action": "log", "args": ["/etc/passwd"]})
    assert "absolute path refused" in absolute.error
    value = plane.dispatch("git", {"action": "log", "args": ["--author", "--output=x"]})
    assert value.error == "git log: give --author's value attached, as --author=VALUE"
    assert git(root, "rev-parse", "HEAD") == head and not (root.parent / "leak.txt").exists()


def test_git_ignores_a_hostile_repository_config(staged: Callable[[str], Path]) -> None:
    root = staged("textkit")
    marker = root.parent / "ran.txt"
    with open(root / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = touch {marker}\n\tpager = touch {marker}\n"
                     f"[diff]\n\texternal = touch {marker}\n")
    (root / "README.md").write_text("changed\n")
    plane = make_plane(root)
    assert plane.dispatch("git", {"action": "status"}).ok
    assert plane.dispatch("git", {"action": "diff"}).output.startswith("diff --git")
    assert plane.dispatch("git", {"action": "log", "args": ["-p"]}).ok
    assert not marker.exists()


def test_git_never_reads_a_repository_above_the_root(staged: Callable[[str], Path]) -> None:
    inner = staged("shapes") / "shapes"  # a folder inside a repository, not a repository
    result = make_plane(inner).dispatch("git", {"action": "status"})
    assert not result.ok and "not a git repository" in result.error


def test_verify_does_not_pick_up_a_configuration_above_the_root(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -k no_such_test\n")
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_one.py").write_text("def test_one():\n    pass\n\n\n"
                                                "def test_two():\n    pass\n")
    plane = make_plane(root)
    assert counts(plane)[:2] == (0, {"passed": 2, "failed": 0, "errors": 0, "skipped": 0})
    assert counts(plane, keyword="not two")[:2] == (
        0, {"passed": 1, "failed": 0, "errors": 0, "skipped": 0})
    # a repository's own configuration is the repository's business
    (root / "pytest.ini").write_text("[pytest]\naddopts = -k two\n")
    assert counts(plane)[:2] == (0, {"passed": 1, "failed": 0, "errors": 0, "skipped": 0})


def test_host_plugins_load_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-xdist (a dev dependency): a plugin this host has and the repository does not ask for
    pytest.importorskip("xdist")
    (tmp_path / "test_plugin.py").write_text("def test_uses_a_plugin_fixture(worker_id):\n"
                                             "    assert worker_id == 'master'\n")
    plane = make_plane(tmp_path)
    monkeypatch.delenv("EVALKIT_VERIFY_PLUGINS", raising=False)
    code, found, _ = counts(plane)
    assert code == 1 and found["errors"] == 1  # fixture 'worker_id' not found
    for setting in ("auto", "xdist"):
        monkeypatch.setenv("EVALKIT_VERIFY_PLUGINS", setting)
        assert counts(plane)[:2] == (0, {"passed": 1, "failed": 0, "errors": 0, "skipped": 0})
