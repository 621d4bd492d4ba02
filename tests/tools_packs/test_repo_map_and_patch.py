"""``repo_map`` and ``patch`` on real staged repositories and scratch roots."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from evalkit.runtime.tools import ToolResult
from evalkit.runtime.tools.coding import occurrences
from tests.tools_packs.conftest import make_plane

# -- repo_map ----------------------------------------------------------------------


def test_repo_map_lists_files_and_python_symbols(staged: Callable[[str], Path]) -> None:
    root = staged("shapes")
    (root / "shapes" / "__pycache__").mkdir()
    (root / "shapes" / "__pycache__" / "geometry.cpython-311.pyc").write_bytes(b"\x00junk")
    result = make_plane(root).dispatch("repo_map", {})
    assert result.ok and result.exit_code == 0
    out = result.output
    assert ".git/" not in out and "__pycache__" not in out
    files = [f["path"] for f in result.structured["files"]]
    assert files == [".gitignore", "README.md", "pyproject.toml", "shapes/__init__.py",
                     "shapes/geometry.py", "shapes/plots.py", "shapes/report.py",
                     "tests/test_geometry.py", "tests/test_report.py"]
    assert result.structured["total_files"] == 9
    assert "shapes/geometry.py\n  Point  [L7]\n  def calc_area(points: list[Point])  [L10]\n" \
           "  def perimeter(points: list[Point])  [L18]\n" in out
    assert "  class Plot\n    def area(self)  [L15]" in out.replace("  [L11]", "")
    plots = next(f for f in result.structured["files"] if f["path"] == "shapes/plots.py")
    assert [(s["name"], s["kind"], s["line"], s["depth"]) for s in plots["symbols"]] == [
        ("Plot", "class", 11, 0), ("area", "method", 15, 1)]


def test_repo_map_in_a_git_repository_follows_gitignore(staged: Callable[[str], Path]) -> None:
    root = staged("textkit")
    (root / "out").mkdir()
    (root / "out" / "junk.py").write_text("JUNK = 1\n")
    (root / ".gitignore").write_text((root / ".gitignore").read_text() + "out/\n")
    (root / "textkit" / "extra.py").write_text("def new_helper():\n    pass\n")
    (root / "README.md").unlink()
    result = make_plane(root).dispatch("repo_map", {})
    assert [f["path"] for f in result.structured["files"]] == [
        ".gitignore", "pyproject.toml", "tests/test_slug.py", "textkit/__init__.py",
        "textkit/extra.py", "textkit/slug.py"]
    assert "textkit/extra.py\n  def new_helper()  [L1]\n" in result.output
    only_tests = make_plane(root).dispatch("repo_map", {"path": "tests"})
    assert [f["path"] for f in only_tests.structured["files"]] == ["tests/test_slug.py"]


def test_repo_map_of_a_subdirectory_and_a_file(staged: Callable[[str], Path]) -> None:
    plane = make_plane(staged("ledger"))
    sub = plane.dispatch("repo_map", {"path": "tests"})
    assert [f["path"] for f in sub.structured["files"]] == ["tests/test_parse.py",
                                                             "tests/test_statement.py"]
    assert "def test_balance_of_statement()  [L14]" in sub.output
    one = plane.dispatch("repo_map", {"path": "ledger/parse.py"})
    assert one.output == "ledger/parse.py\n  def parse_amount(text: str)  [L8]\n"


def test_repo_map_regex_fallback_for_other_languages(tmp_path: Path) -> None:
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "app.ts").write_text(
        "import x from 'y';\nexport class Cart {\n  total() {}\n}\n"
        "export async function checkout(cart) {}\nconst LIMIT = 5;\n"
        "export interface Line { sku: string }\n")
    (tmp_path / "main.go").write_text(
        "package main\n\ntype Server struct{}\n\nfunc (s *Server) Start() {}\nfunc main() {}\n")
    (tmp_path / "lib.rs").write_text("pub struct Ledger;\npub fn balance() -> i64 { 0 }\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\nsetup() {\n  :\n}\n")
    (tmp_path / "broken.py").write_text("def ok():\n    pass\n\ndef broken(:\n")
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    result = make_plane(tmp_path).dispatch("repo_map", {})
    by_path = {f["path"]: f for f in result.structured["files"]}

    def names(path: str) -> list[tuple[str, str]]:
        return [(s["name"], s["kind"]) for s in by_path[path]["symbols"]]

    assert names("web/app.ts") == [("Cart", "class"), ("checkout", "function"),
                                   ("LIMIT", "variable"), ("Line", "type")]
    assert names("main.go") == [("Server", "type"), ("Start", "function"), ("main", "function")]
    assert names("lib.rs") == [("Ledger", "type"), ("balance", "function")]
    assert names("run.sh") == [("setup", "function")]
    assert names("broken.py") == [("ok", "function"), ("broken", "function")]
    assert by_path["broken.py"]["note"] == "syntax error at line 4; regex symbols"
    assert names("notes.md") == [] and by_path["blob.bin"]["note"] == "binary"


def test_repo_map_bounds_the_listing(tmp_path: Path) -> None:
    for n in range(7):
        (tmp_path / f"m{n}.py").write_text(f"X{n} = {n}\n")
    result = make_plane(tmp_path).dispatch("repo_map", {"max_files": 3})
    assert result.ok and [f["path"] for f in result.structured["files"]] == ["m0.py", "m1.py",
                                                                              "m2.py"]
    assert result.output.rstrip().endswith(
        "[evalkit: 3 of 7 files listed; raise max_files or map a subdirectory]")


def test_repo_map_stays_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.py"
    outside.write_text("PASSWORD_HINT = 1\n")
    (root / "ok.py").write_text("A = 1\n")
    (root / "leak.py").symlink_to(outside)
    (root / "outdir").symlink_to(tmp_path)
    plane = make_plane(root)
    listed = plane.dispatch("repo_map", {})
    assert [f["path"] for f in listed.structured["files"]] == ["ok.py"]
    assert "PASSWORD_HINT" not in listed.output
    for path, why in (("..", "through '..'"), ("/etc", "absolute path refused"),
                      ("outdir", "through a symlink")):
        refused = plane.dispatch("repo_map", {"path": path})
        assert not refused.ok and why in refused.error, path
    missing = plane.dispatch("repo_map", {"path": "nope"})
    assert not missing.ok and missing.error == "no such file or directory: 'nope'"


# -- patch -------------------------------------------------------------------------


def test_patch_replaces_exactly_one_occurrence(staged: Callable[[str], Path]) -> None:
    root = staged("textkit")
    plane = make_plane(root)
    result = plane.dispatch("patch", {"path": "textkit/slug.py", "old": 'r"[^a-z0-9]"',
                                      "new": 'r"[^a-z0-9]+"'})
    assert result.ok and result.exit_code == 0
    assert result.output.startswith("patched textkit/slug.py (1 edit)\n--- a/textkit/slug.py\n")
    assert '-    return re.sub(r"[^a-z0-9]", "-", plain.lower()).strip("-")' in result.output
    assert '+    return re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")' in result.output
    assert result.structured == {"files": [{"path": "textkit/slug.py", "created": False,
                                            "edits": 1}]}
    assert 'r"[^a-z0-9]+"' in (root / "textkit" / "slug.py").read_text()


def test_patch_says_how_many_times_an_ambiguous_text_occurs(staged: Callable[[str], Path]) -> None:
    root = staged("shapes")
    before = (root / "shapes" / "report.py").read_text()
    result = make_plane(root).dispatch("patch", {"path": "shapes/report.py", "old": "calc_area",
                                                 "new": "polygon_area"})
    assert not result.ok and result.exit_code == 1
    assert result.error == ("shapes/report.py: old text occurs 2 times (lines 10, 16); it must "
                            "occur exactly once — include more surrounding text; nothing was "
                            "changed")
    assert (root / "shapes" / "report.py").read_text() == before


def test_patch_of_text_that_is_not_there(staged: Callable[[str], Path]) -> None:
    plane = make_plane(staged("textkit"))
    absent = plane.dispatch("patch", {"path": "textkit/slug.py", "old": "no such text",
                                      "new": "x"})
    assert absent.error == "textkit/slug.py: old text occurs 0 times in the file; nothing was changed"
    spacing = plane.dispatch("patch", {"path": "textkit/slug.py",
                                       "old": "def slugify(title: str) -> str:\n\"\"\"", "new": ""})
    assert "occurs 0 times; text matching it up to whitespace exists" in spacing.error
    assert occurrences("aaa", "aa") == 2  # overlapping matches are counted, not hidden


def test_patch_edits_are_all_or_nothing(staged: Callable[[str], Path]) -> None:
    root = staged("ledger")
    parse_before = (root / "ledger" / "parse.py").read_text()
    result = make_plane(root).dispatch("patch", {"edits": [
        {"path": "ledger/parse.py", "old": "cleaned = cleaned[1:-1]",
         "new": "cleaned = \"-\" + cleaned[1:-1]"},
        {"path": "ledger/statement.py", "old": "line", "new": "row"},
    ]})
    assert not result.ok
    assert result.error.startswith("edit 2 (ledger/statement.py): old text occurs 9 times "
                                   "(lines 1, 10, 11, 13, 14, 15, 17); it must occur exactly once")
    assert result.error.endswith("; nothing was changed")
    assert (root / "ledger" / "parse.py").read_text() == parse_before


def test_patch_applies_several_edits_in_order(staged: Callable[[str], Path]) -> None:
    root = staged("ledger")
    result = make_plane(root).dispatch("patch", {"edits": [
        {"path": "ledger/parse.py", "old": "cleaned = cleaned[1:-1]",
         "new": "cleaned = \"-\" + cleaned[1:-1]"},
        {"path": "ledger/statement.py", "old": "range(1, len(lines) - 1)",
         "new": "range(1, len(lines))"},
        {"path": "ledger/statement.py", "old": "range(1, len(lines)):",
         "new": "range(1, len(lines)):  # every row after the header"},
    ]})
    assert result.ok, result.output
    assert result.output.startswith(
        "patched ledger/parse.py (1 edit); patched ledger/statement.py (2 edits)\n")
    assert "for index in range(1, len(lines)):  # every row after the header" in (
        root / "ledger" / "statement.py").read_text()


def test_patch_creates_a_file_only_when_old_is_empty_and_it_is_new(tmp_path: Path) -> None:
    plane = make_plane(tmp_path)
    made = plane.dispatch("patch", {"path": "pkg/new_mod.py", "old": "", "new": "X = 1\n"})
    assert made.ok and made.output == ("created pkg/new_mod.py\n--- /dev/null\n"
                                       "+++ b/pkg/new_mod.py\n@@ -0,0 +1 @@\n+X = 1\n")
    assert made.structured == {"files": [{"path": "pkg/new_mod.py", "created": True,
                                          "edits": 1}]}
    assert (tmp_path / "pkg" / "new_mod.py").read_text() == "X = 1\n"
    again = plane.dispatch("patch", {"path": "pkg/new_mod.py", "old": "", "new": "Y = 2\n"})
    assert not again.ok and "already exists" in again.error
    missing = plane.dispatch("patch", {"path": "nope.py", "old": "x", "new": "y"})
    assert missing.error == "nope.py: no such file (to create it, give an empty old); nothing " \
                            "was changed"


def test_patch_keeps_line_endings_and_mode(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/sh\r\necho one\r\n")
    script.chmod(0o755)
    result = make_plane(tmp_path).dispatch("patch", {"path": "run.sh", "old": "echo one",
                                                     "new": "echo two"})
    assert result.ok
    assert script.read_bytes() == b"#!/bin/sh\r\necho two\r\n"
    assert os.stat(script).st_mode & 0o777 == 0o755


def test_patch_is_refused_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (root / "escape").symlink_to(tmp_path)
    (root / "victim-link.txt").symlink_to(victim)
    plane = make_plane(root)
    cases = [
        ({"path": "../victim.txt", "old": "keep me", "new": "gone"}, "through '..'"),
        ({"path": str(victim), "old": "keep me", "new": "gone"}, "absolute path refused"),
        ({"path": "escape/victim.txt", "old": "keep me", "new": "gone"}, "through a symlink"),
        ({"path": "victim-link.txt", "old": "keep me", "new": "gone"}, "through a symlink"),
        ({"path": "../new.txt", "old": "", "new": "planted"}, "through '..'"),
        ({"edits": [{"path": "ok.txt", "old": "", "new": "fine"},
                    {"path": "../victim.txt", "old": "keep me", "new": "gone"}]}, "through '..'"),
    ]
    for arguments, why in cases:
        result = plane.dispatch("patch", arguments)
        assert not result.ok and result.exit_code == 1 and why in result.error, arguments
        assert "nothing was changed" in result.error
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "new.txt").exists() and not (root / "ok.txt").exists()


def test_patch_does_not_edit_the_git_directory(staged: Callable[[str], Path]) -> None:
    root = staged("textkit")
    config = (root / ".git" / "config").read_text()
    result = make_plane(root).dispatch("patch", {"path": ".git/config", "old": "[core]",
                                                 "new": "[core]\n\tfsmonitor = evil"})
    assert not result.ok and "does not edit the .git directory" in result.error
    assert (root / ".git" / "config").read_text() == config


@pytest.mark.slow
def test_patch_argument_shapes(tmp_path: Path) -> None:
    plane = make_plane(tmp_path)
    both = plane.dispatch("patch", {"path": "a", "old": "", "new": "",
                                    "edits": [{"path": "b", "old": "", "new": ""}]})
    assert both.error == "give either path/old/new (one edit) or edits (several), not both"
    partial = plane.dispatch("patch", {"path": "a", "old": "x"})
    assert partial.error == ("patch needs path, old and new (missing: new), or a list of edits")
    invalid = plane.dispatch("patch", {"edits": [{"path": "a", "old": ""}]})
    assert invalid.exit_code is None and "invalid arguments for patch" in invalid.error
    assert plane.dispatch("patch", {"path": ".", "old": "", "new": ""}).error.startswith(
        ".: that is the repository root")


@pytest.mark.slow
def test_a_fifo_in_the_tree_never_holds_repo_map_or_patch(tmp_path: Path) -> None:
    """Both read files in-process: a FIFO the agent made is refused, not waited on."""
    (tmp_path / "real.py").write_text("def real():\n    pass\n")
    os.mkfifo(tmp_path / "trap.py")
    plane = make_plane(tmp_path)
    found: list[ToolResult] = []
    worker = threading.Thread(daemon=True, target=lambda: found.extend((
        plane.dispatch("repo_map", {}),
        plane.dispatch("patch", {"path": "trap.py", "old": "x", "new": "y"}))))
    worker.start()
    worker.join(5)
    assert len(found) == 2, "a tool was still blocked on the FIFO after 5 s"
    mapped, patched = found
    assert "def real()" in mapped.output and "trap.py" in mapped.output
    assert "'trap.py' is a FIFO (named pipe); only regular files and folders are opened" \
        in patched.error
