"""The coding built-ins: ``repo_map``, ``patch``, ``verify`` and ``git``.

All four work on the mission root, which for a coding mission is the
repository itself. Every path goes through ``fsroot.resolve_in_root``, so an
absolute path, ``..`` out of the root or a symlink leading out is refused as
an ordinary failing result — the same rule ``fs`` follows.

- ``repo_map`` lists files and their top-level symbols (``ast`` for Python,
  a line-start regex for a few other languages). In-process, read-only; in
  a git repository the files are git's (tracked, or untracked and not
  ignored), elsewhere a walk that skips caches and virtualenvs.
- ``patch`` makes exact-match edits: every ``old`` text must occur exactly
  once in its file (the result says how many times it occurs otherwise), an
  empty ``old`` creates a file that does not exist yet, and a list of edits
  is all-or-nothing. In-process; never touches ``.git``.
- ``verify`` runs the repository's tests (``python -m pytest -q`` in the
  root, wrapped by the plane's sandbox, bounded in time and output; plugins
  installed on this host load only when ``EVALKIT_VERIFY_PLUGINS`` says so) and
  reports the counts, with pytest's own summary line as the last line of
  the output — so "3 passed" can only be grounded against what pytest said.
  The result's exit code is pytest's: a red suite is a failing result.
- ``git`` runs ``status``, ``diff`` or ``log`` (read-only; every other
  action is refused) in the sandbox, with extra arguments checked against a
  list of read-only options, no pager, no external diff or textconv
  drivers, no user or system configuration, and no repository above the root.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.runtime.tools.codetools import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT_S,
    run_process,
    tool_environment,
)
from evalkit.runtime.tools.descriptor import ToolDescriptor, ToolResult, object_schema
from evalkit.runtime.tools.fsroot import PathRefused, read_regular, resolve_in_root
from evalkit.runtime.tools.sandbox import NoSandbox, Sandbox

#: The coding built-ins, in catalogue order.
CODING_NAMES: tuple[str, ...] = ("repo_map", "patch", "verify", "git")

#: Directories ``repo_map`` never descends into.
SKIP_DIRS = frozenset({
    ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox",
    ".venv", "venv", "node_modules", ".hg", ".svn", ".idea", ".vscode", "dist", "build",
    ".eggs", ".cache", ".hypothesis", ".evalkit",
})
#: Files ``repo_map`` lists by default, and at most.
DEFAULT_MAP_FILES = 300
MAX_MAP_FILES = 2000
#: Bytes of one file ``repo_map`` parses for symbols; bigger files are listed only.
MAX_PARSE_BYTES = 1024 * 1024
#: Bytes of one file ``patch`` edits.
MAX_PATCH_BYTES = 4 * 1024 * 1024
#: ``verify``'s pytest plugins: unset or ``none`` (only pytest's own), ``auto`` (every
#: installed plugin, pytest's default), or a comma-separated list of plugin names to load.
PLUGINS_ENV = "EVALKIT_VERIFY_PLUGINS"
#: Characters of unified diff a ``patch`` result shows.
MAX_DIFF_CHARS = 20_000


_EDIT = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "file, relative to the repository root"},
        "old": {"type": "string",
                "description": "exact text to replace; must occur exactly once. Empty: create "
                               "the file (it must not exist yet)"},
        "new": {"type": "string", "description": "the replacement text"},
    },
    "required": ["path", "old", "new"],
    "additionalProperties": False,
}

REPO_MAP = ToolDescriptor(
    name="repo_map",
    description=(
        "List the repository's files with their top-level symbols (classes with their methods, "
        "functions, module constants) and line numbers. Paths are relative to the repository "
        "root (the mission root)."
    ),
    parameters=object_schema({
        "path": {"type": "string", "description": "a directory or file to map; default '.'"},
        "max_files": {"type": "integer", "minimum": 1, "maximum": MAX_MAP_FILES,
                      "description": f"most files to list (default {DEFAULT_MAP_FILES})"},
    }, []),
    scopes=("fs.read",),
)

PATCH = ToolDescriptor(
    name="patch",
    description=(
        "Edit files by exact match: each 'old' text must occur exactly once in its file and is "
        "replaced by 'new' (include enough surrounding lines to make it unique). An empty 'old' "
        "creates a new file. Give one edit as path/old/new, or several as 'edits' (applied in "
        "order, all or nothing). Paths outside the repository root are refused."
    ),
    parameters=object_schema({
        "path": _EDIT["properties"]["path"],
        "old": _EDIT["properties"]["old"],
        "new": _EDIT["properties"]["new"],
        "edits": {"type": "array", "minItems": 1, "items": _EDIT,
                  "description": "several edits instead of path/old/new"},
    }, []),
    scopes=("fs.write",),
)

VERIFY = ToolDescriptor(
    name="verify",
    description=(
        "Run the repository's tests (python -m pytest -q in the repository root) and report "
        "how many passed, failed, errored and were skipped; pytest's own summary line is the "
        "last line of the output. Fails when any test fails."
    ),
    parameters=object_schema({
        "paths": {"type": "array", "items": {"type": "string"},
                  "description": "test files or directories to run (default: all)"},
        "keyword": {"type": "string", "description": "only tests matching this -k expression"},
    }, []),
    scopes=("verify.run",),
    code=True,  # it runs the repository's code, which the agent may have written
)

GIT = ToolDescriptor(
    name="git",
    description=(
        "Read the repository's git state: action 'status' (default args --short --branch), "
        "'diff' (working tree against the index; args such as --cached, --stat, HEAD~1, a path) "
        "or 'log' (default the last 20 commits; args such as --oneline, -n 5, -p, a path). "
        "Read-only: any other action is refused."
    ),
    parameters=object_schema({
        "action": {"type": "string", "description": "status, diff or log"},
        "args": {"type": "array", "items": {"type": "string"},
                 "description": "extra read-only arguments (optional)"},
    }, ["action"]),
    scopes=("git.read",),
)

DESCRIPTORS: dict[str, ToolDescriptor] = {d.name: d for d in (REPO_MAP, PATCH, VERIFY, GIT)}


class CodingTools:
    """The four coding tools over one mission root, sandbox and set of limits."""

    def __init__(self, root: Path, sandbox: Sandbox | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        self.root = Path(root).resolve()
        self.sandbox = sandbox or NoSandbox()
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes

    def dispatch(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one validated call of a coding tool."""
        if name == "repo_map":
            return repo_map(self.root, arguments)
        if name == "patch":
            return patch(self.root, arguments)
        if name == "verify":
            return self.verify(arguments)
        if name == "git":
            return self.git(arguments)
        return ToolResult.failure(f"{name} is not a coding tool", None)

    # -- verify ---------------------------------------------------------------

    def verify(self, arguments: dict[str, Any]) -> ToolResult:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no",
                "--tb=short"]  # short tracebacks: no object addresses, stable recordings
        if not has_pytest_config(self.root):
            # No configuration of its own: do not let pytest find one above the root.
            argv += ["-c", os.devnull, "--rootdir", str(self.root)]
        keyword = arguments.get("keyword")
        if keyword:
            argv.append(f"-k{keyword}")  # attached: an expression starting with '-' stays one
        paths = arguments.get("paths") or []
        if paths:
            argv.append("--")
        for path in paths:
            try:
                target = resolve_in_root(self.root, path)
            except PathRefused as refused:
                return ToolResult.failure(str(refused))
            if not target.exists():
                return ToolResult.failure(f"no such test path: {path!r}")
            argv.append(os.path.relpath(target, self.root))
        env = tool_environment()
        # The host's pytest settings must not change what verify prints: CI and
        # BUILD_NUMBER make pytest stop truncating its summary lines.
        for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PY_COLORS", "FORCE_COLOR",
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "CI", "BUILD_NUMBER"):
            env.pop(name, None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the working tree as the agent left it
        plugins = os.environ.get(PLUGINS_ENV, "").strip()
        if plugins != "auto":
            # Plugins installed on the harness host are not the repository's: off, unless named.
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            for plugin in filter(None, (p.strip() for p in plugins.split(","))):
                if plugin != "none":
                    argv[3:3] = ["-p", plugin]
        wrapped = self.sandbox.wrap(argv, self.root, False)
        ran = run_process(wrapped, cwd=self.root, timeout_s=self.timeout_s,
                          max_output_bytes=self.max_output_bytes, env=env)
        return verify_result(ran)

    # -- git --------------------------------------------------------------------

    def git(self, arguments: dict[str, Any]) -> ToolResult:
        action = arguments["action"]
        if action not in GIT_OPTIONS:
            return ToolResult.failure(
                f"git {action} is refused: this tool only reads the repository "
                "(actions: status, diff, log)")
        args = list(arguments.get("args") or [])
        problem = check_git_args(self.root, action, args)
        if problem:
            return ToolResult.failure(problem)
        if not args:
            args = list(GIT_DEFAULT_ARGS[action])
        elif action == "log" and not any(_is_count(a) for a in args):
            args = ["--max-count=20", *args]
        executable = shutil.which("git")
        if executable is None:
            return ToolResult.failure("git is not installed on this host", None)
        argv = [executable, "--no-pager", *GIT_SAFE_CONFIG, action, *GIT_ACTION_FLAGS[action],
                *args]
        wrapped = self.sandbox.wrap(argv, self.root, False)
        return run_process(wrapped, cwd=self.root, timeout_s=self.timeout_s,
                           max_output_bytes=self.max_output_bytes, env=git_environment(self.root))


# -- repo_map ------------------------------------------------------------------


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: str
    line: int
    signature: str
    depth: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "line": self.line,
                "signature": self.signature, "depth": self.depth}


def repo_map(root: Path, arguments: dict[str, Any]) -> ToolResult:
    """Run one validated ``repo_map`` call."""
    shown = arguments.get("path", ".") or "."
    limit = arguments.get("max_files", DEFAULT_MAP_FILES)
    try:
        start = resolve_in_root(root, shown)
    except PathRefused as refused:
        return ToolResult.failure(str(refused))
    if not start.exists():
        return ToolResult.failure(f"no such file or directory: {shown!r}")
    real_root = Path(os.path.realpath(root))
    files = [start] if start.is_file() else (_git_files(start, real_root)
                                             or _walk(start, real_root))
    total = len(files)
    lines: list[str] = []
    entries: list[dict[str, Any]] = []
    for path in files[:limit]:
        rel = path.relative_to(real_root).as_posix()
        symbols, note = file_symbols(path)
        lines.append(rel + (f"  ({note})" if note else ""))
        for sym in symbols:
            lines.append(f"{'  ' * (sym.depth + 1)}{sym.signature}  [L{sym.line}]")
        entry: dict[str, Any] = {"path": rel, "symbols": [s.as_dict() for s in symbols]}
        if note:
            entry["note"] = note
        entries.append(entry)
    if not files:
        lines.append("(no files)")
    if total > limit:
        lines.append(f"[evalkit: {limit} of {total} files listed; raise max_files or map a "
                     "subdirectory]")
    return ToolResult.success("\n".join(lines) + "\n",
                              structured={"files": entries, "total_files": total})


def _git_files(start: Path, real_root: Path) -> list[Path] | None:
    """In a git repository: its tracked and untracked-but-not-ignored files under ``start``.

    ``None`` when the root is not a repository (or git is missing), so the
    caller walks the tree instead. ``.gitignore`` is what keeps build output
    and caches out of the map.
    """
    git = shutil.which("git")
    if git is None or not (real_root / ".git").exists():
        return None
    rel = start.relative_to(real_root).as_posix() if start != real_root else "."
    ran = run_process([git, *GIT_SAFE_CONFIG, "ls-files", "-z", "--cached", "--others",
                       "--exclude-standard", "--", rel],
                      cwd=real_root, timeout_s=30, max_output_bytes=64 * 1024 * 1024,
                      env=git_environment(real_root))
    if not ran.ok:
        return None
    found: set[Path] = set()
    for name in ran.stdout.split("\0"):
        if not name or SKIP_DIRS & set(name.split("/")[:-1]):
            continue
        path = real_root / name
        if path.is_symlink():
            real = Path(os.path.realpath(path))
            if not (real_root in real.parents and real.is_file()):
                continue
        elif not path.is_file():
            continue  # deleted in the working tree, or a submodule
        found.add(path)
    return sorted(found, key=lambda p: p.relative_to(real_root).as_posix())


def _walk(start: Path, real_root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(start):  # symlinked dirs are not followed
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                real = Path(os.path.realpath(path))
                if not (real_root in real.parents and real.is_file()):
                    continue  # a link leading out of the root (or nowhere) is not listed
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(real_root).as_posix())


def file_symbols(path: Path) -> tuple[list[Symbol], str]:
    """The top-level symbols of one file, and a note when they could not all be read."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return [], f"unreadable: {exc.strerror or exc}"
    if size > MAX_PARSE_BYTES:
        return [], f"{size} bytes; not parsed"
    try:
        data = read_regular(path, path.name, MAX_PARSE_BYTES)
    except PathRefused:
        return [], "not a regular file; not read"
    except OSError as exc:
        return [], f"unreadable: {exc.strerror or exc}"
    if b"\x00" in data[:8192]:
        return [], "binary"
    text = data.decode("utf-8", errors="replace")
    if path.suffix in (".py", ".pyi"):
        try:
            return python_symbols(text), ""
        except SyntaxError as exc:
            return regex_symbols(text, ".py"), f"syntax error at line {exc.lineno}; regex symbols"
    return regex_symbols(text, path.suffix), ""


def python_symbols(text: str) -> list[Symbol]:
    """Classes (with their methods), functions and module-level names, by ``ast``."""
    tree = ast.parse(text)
    out: list[Symbol] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(_function(node, 0))
        elif isinstance(node, ast.ClassDef):
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            out.append(Symbol(node.name, "class", node.lineno,
                              f"class {node.name}" + (f"({bases})" if bases else "")))
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append(_function(item, 1))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in _names(target):
                    out.append(Symbol(name, "variable", node.lineno, name))
    return out


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, depth: int) -> Symbol:
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    kind = "method" if depth else "function"
    return Symbol(node.name, kind, node.lineno,
                  f"{prefix} {node.name}({ast.unparse(node.args)})", depth)


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _names(elt)]
    return []


_SYMBOL_PATTERNS: dict[str, list[tuple[str, re.Pattern[str]]]] = {}


def _patterns(*pairs: tuple[str, str]) -> list[tuple[str, re.Pattern[str]]]:
    return [(kind, re.compile(rx)) for kind, rx in pairs]


_JS = _patterns(
    ("function", r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\*?\s+([A-Za-z_$][\w$]*)"),
    ("class", r"^(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+([A-Za-z_$][\w$]*)"),
    ("variable", r"^(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)"),
    ("type", r"^(?:export\s+)?(?:interface|type|enum)\s+([A-Za-z_$][\w$]*)"),
)
for _ext in (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"):
    _SYMBOL_PATTERNS[_ext] = _JS
_SYMBOL_PATTERNS[".go"] = _patterns(
    ("function", r"^func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)"),
    ("type", r"^type\s+([A-Za-z_]\w*)"),
)
_SYMBOL_PATTERNS[".rs"] = _patterns(
    ("function", r"^(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+([A-Za-z_]\w*)"),
    ("type", r"^(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait|type|mod)\s+([A-Za-z_]\w*)"),
)
for _ext in (".c", ".h", ".cc", ".cpp", ".hpp", ".java", ".cs", ".kt", ".swift"):
    _SYMBOL_PATTERNS[_ext] = _patterns(
        ("class", r"^(?:public\s+|private\s+|abstract\s+|final\s+)*(?:class|struct|interface|enum)"
                  r"\s+([A-Za-z_]\w*)"),
        ("function", r"^[A-Za-z_][\w\s\*&<>,:]*?\b([A-Za-z_]\w*)\s*\([^;]*$"),
    )
for _ext in (".sh", ".bash"):
    _SYMBOL_PATTERNS[_ext] = _patterns(
        ("function", r"^(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?"),
    )
_SYMBOL_PATTERNS[".rb"] = _patterns(
    ("function", r"^def\s+(?:self\.)?([A-Za-z_]\w*[?!]?)"),
    ("class", r"^(?:class|module)\s+([A-Z]\w*)"),
)
_SYMBOL_PATTERNS[".py"] = _patterns(
    ("function", r"^(?:async\s+)?def\s+([A-Za-z_]\w*)"),
    ("class", r"^class\s+([A-Za-z_]\w*)"),
)
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "else", "do", "catch", "sizeof"})


def regex_symbols(text: str, suffix: str) -> list[Symbol]:
    """Top-level (unindented) declarations by a per-language line-start regex."""
    patterns = _SYMBOL_PATTERNS.get(suffix)
    if not patterns:
        return []
    out: list[Symbol] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line[0].isspace():
            continue
        for kind, pattern in patterns:
            match = pattern.match(line)
            if match and match.group(1) not in _KEYWORDS:
                out.append(Symbol(match.group(1), kind, number, line.strip().rstrip("{").strip()))
                break
    return out


# -- patch -----------------------------------------------------------------------


@dataclass
class _Pending:
    shown: str
    target: Path
    before: str | None  # None: the file does not exist yet
    after: str
    edits: int = 0


def patch(root: Path, arguments: dict[str, Any]) -> ToolResult:
    """Run one validated ``patch`` call: all edits apply, or none does."""
    single = [k for k in ("path", "old", "new") if k in arguments]
    if "edits" in arguments:
        if single:
            return ToolResult.failure(
                "give either path/old/new (one edit) or edits (several), not both")
        edits = arguments["edits"]
    elif len(single) == 3:
        edits = [{k: arguments[k] for k in ("path", "old", "new")}]
    else:
        missing = [k for k in ("path", "old", "new") if k not in arguments]
        return ToolResult.failure(
            f"patch needs path, old and new (missing: {', '.join(missing)}), or a list of edits")
    pending: dict[Path, _Pending] = {}
    for number, edit in enumerate(edits, start=1):
        where = f"edit {number} ({edit['path']})" if len(edits) > 1 else edit["path"]
        problem = _stage_edit(root, edit, pending)
        if problem:
            return ToolResult.failure(f"{where}: {problem}; nothing was changed")
    diffs: list[str] = []
    files: list[dict[str, Any]] = []
    for item in pending.values():
        _write_atomic(item.target, item.after)
        diffs.append("".join(difflib.unified_diff(
            [] if item.before is None else item.before.splitlines(keepends=True),
            item.after.splitlines(keepends=True),
            fromfile="/dev/null" if item.before is None else f"a/{item.shown}",
            tofile=f"b/{item.shown}")))
        files.append({"path": item.shown, "created": item.before is None, "edits": item.edits})
    summary = "; ".join(
        f"{'created' if f['created'] else 'patched'} {f['path']}"
        + ("" if f["created"] else f" ({f['edits']} edit{'s' if f['edits'] != 1 else ''})")
        for f in files)
    diff = "".join(d if d.endswith("\n") or not d else d + "\n" for d in diffs)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[evalkit: diff cut at {MAX_DIFF_CHARS} characters]\n"
    return ToolResult.success(f"{summary}\n{diff}", structured={"files": files})


def _stage_edit(root: Path, edit: dict[str, Any], pending: dict[Path, _Pending]) -> str | None:
    shown, old, new = edit["path"], edit["old"], edit["new"]
    try:
        target = resolve_in_root(root, shown)
    except PathRefused as refused:
        return str(refused)
    real_root = Path(os.path.realpath(root))
    rel_parts = target.relative_to(real_root).parts if target != real_root else ()
    if not rel_parts:
        return "that is the repository root, not a file"
    if ".git" in rel_parts:
        return "refused: patch does not edit the .git directory"
    item = pending.get(target)
    if item is None:
        if target.is_dir():
            return "is a directory; name a file"
        if target.exists():
            if target.stat().st_size > MAX_PATCH_BYTES:
                return f"file is larger than {MAX_PATCH_BYTES} bytes; patch edits smaller files"
            try:
                data = read_regular(target, shown, MAX_PATCH_BYTES)
            except PathRefused as refused:
                return str(refused)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return "not a UTF-8 text file"
            item = _Pending(shown, target, text, text)
        else:
            item = _Pending(shown, target, None, "")
    current_missing = item.before is None and item.edits == 0
    if old == "":
        if not current_missing:
            return ("old is empty, which creates a file, but this file already exists; give the "
                    "exact text to replace")
        item.after = new
    else:
        if current_missing:
            return "no such file (to create it, give an empty old)"
        count = occurrences(item.after, old)
        if count != 1:
            return _count_problem(item.after, old, count)
        item.after = item.after.replace(old, new, 1)
    item.edits += 1
    pending[target] = item
    return None


def occurrences(text: str, needle: str) -> int:
    """How many places ``needle`` starts in ``text``, overlapping ones included."""
    count, start = 0, 0
    while (found := text.find(needle, start)) != -1:
        count += 1
        start = found + 1
    return count


def _count_problem(text: str, old: str, count: int) -> str:
    if count > 1:
        lines = list(dict.fromkeys(text.count("\n", 0, m.start()) + 1 for m in re.finditer(
            f"(?={re.escape(old)})", text)))
        return (f"old text occurs {count} times (lines {', '.join(map(str, lines[:10]))}); "
                "it must occur exactly once — include more surrounding text")
    squeezed = " ".join(old.split())
    if squeezed and squeezed in " ".join(text.split()):
        return ("old text occurs 0 times; text matching it up to whitespace exists, so check "
                "indentation and line breaks")
    return "old text occurs 0 times in the file"


def _write_atomic(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


# -- verify ------------------------------------------------------------------------

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")
_SUMMARY = re.compile(r"^=*\s*(?:(?:\d+ \w+)(?:, \d+ \w+)*|no tests ran)\b.* in [\d.]+s\b.*$")
_EXIT_MEANINGS = {
    0: "all tests passed",
    1: "some tests failed",
    2: "the test run was interrupted (often a collection error)",
    3: "pytest hit an internal error",
    4: "pytest was given a bad command line",
    5: "no tests were collected",
}


def parse_pytest_summary(output: str) -> tuple[str | None, dict[str, int]]:
    """Pytest's final summary line (verbatim) and the counts in it."""
    for line in reversed(output.splitlines()):
        stripped = line.strip()
        if _SUMMARY.match(stripped):
            counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
            for number, word in _COUNT.findall(stripped):
                key = "errors" if word.startswith("error") else word
                if key in counts:
                    counts[key] += int(number)
            return stripped, counts
    return None, {}


def verify_result(ran: ToolResult) -> ToolResult:
    """Turn pytest's process result into ``verify``'s: counts, summary line last."""
    summary, counts = parse_pytest_summary(ran.stdout)
    structured: dict[str, Any] = {
        "passed": counts.get("passed"),
        "failed": counts.get("failed"),
        "errors": counts.get("errors"),
        "skipped": counts.get("skipped"),
        "exit_code": ran.exit_code,
        "summary": summary,
    }
    stdout = ran.stdout
    if summary is None:
        meaning = ("timed out" if ran.exit_code is None
                   else _EXIT_MEANINGS.get(ran.exit_code, f"exit code {ran.exit_code}"))
        stdout += ("" if not stdout or stdout.endswith("\n") else "\n")
        stdout += f"[evalkit: no pytest summary line found; {meaning}]\n"
    elif not stdout.rstrip().endswith(summary):
        # A cut output: keep the summary line where the reader looks for it, verbatim.
        stdout += ("" if stdout.endswith("\n") else "\n") + summary + "\n"
    return ToolResult.of(ran.exit_code, stdout, ran.stderr, structured=structured)


_PYTEST_SECTIONS = {"pyproject.toml": "[tool.pytest", "tox.ini": "[pytest]",
                    "setup.cfg": "[tool:pytest]"}


def has_pytest_config(root: Path) -> bool:
    """Whether the repository root holds a pytest configuration of its own."""
    if (root / "pytest.ini").is_file() or (root / ".pytest.ini").is_file():
        return True
    for name, section in _PYTEST_SECTIONS.items():
        path = root / name
        try:
            if path.is_file() and section in path.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


# -- git ---------------------------------------------------------------------------

#: Options each git action accepts (the name before any '='), all read-only.
GIT_OPTIONS: dict[str, frozenset[str]] = {
    "status": frozenset({
        "-s", "--short", "-b", "--branch", "--long", "--porcelain", "-v", "--verbose", "-u",
        "--untracked-files", "--ignored", "--renames", "--no-renames", "--ahead-behind",
        "--no-ahead-behind", "--show-stash",
    }),
    "diff": frozenset({
        "--cached", "--staged", "--stat", "--numstat", "--shortstat", "--dirstat", "--summary",
        "--name-only", "--name-status", "-p", "--patch", "-u", "-s", "--no-patch", "-U",
        "--unified", "-w", "--ignore-all-space", "-b", "--ignore-space-change",
        "--ignore-blank-lines", "--ignore-space-at-eol", "--word-diff", "-M", "--find-renames",
        "-R", "--no-renames", "--check", "--diff-filter", "--relative", "--minimal",
        "--patience", "--histogram", "--abbrev", "--full-index", "--binary", "-z", "-a", "--text", "--merge-base", "--compact-summary",
    }),
    "log": frozenset({
        "--oneline", "-n", "--max-count", "--skip", "-p", "--patch", "-u", "-U", "--unified",
        "--stat", "--numstat", "--shortstat", "--name-only", "--name-status", "--summary",
        "--format", "--pretty", "--graph", "--decorate", "--no-decorate", "--all", "--branches",
        "--tags", "--reverse", "--since", "--until", "--after", "--before", "--author",
        "--committer", "--grep", "-i", "--regexp-ignore-case", "--all-match", "--invert-grep",
        "-E", "-F", "--follow", "-S", "-G", "--pickaxe-all", "--date", "--abbrev-commit",
        "--no-abbrev-commit", "--no-merges", "--merges", "--first-parent", "-M", "-w",
        "--diff-filter", "--relative-date", "--full-history", "--topo-order", "--date-order",
        "-z", "--source", "--no-patch", "-s", "--abbrev", "--parents", "--children",
        "--left-right", "--cherry-pick", "-L",
    }),
}
#: Arguments an action gets when none are given.
GIT_DEFAULT_ARGS: dict[str, tuple[str, ...]] = {
    "status": ("--short", "--branch"),
    "diff": (),
    "log": ("--max-count=20",),
}
#: Flags git always gets for an action: no colour, no external diff or textconv drivers.
GIT_ACTION_FLAGS: dict[str, tuple[str, ...]] = {
    "status": (),
    "diff": ("--no-color", "--no-ext-diff", "--no-textconv"),
    "log": ("--no-color", "--no-ext-diff", "--no-textconv"),
}
#: Configuration that keeps a repository's own config from running anything.
GIT_SAFE_CONFIG: tuple[str, ...] = (
    "-c", "core.fsmonitor=false", "-c", "core.pager=cat", "-c", "color.ui=never",
    "-c", "core.hooksPath=/dev/null", "-c", "diff.external=", "-c", "core.quotePath=false",
)
# Options that take a value: given as --opt=VALUE (or -nVALUE); only a count may be separate.
_NEEDS_VALUE = frozenset({"--skip", "--format", "--since", "--until", "--after", "--before",
                          "--author", "--committer", "--grep", "--date", "--diff-filter",
                          "--max-count"})
_SEPARATE_COUNT = frozenset({"-n", "--max-count", "--skip"})
# Short options with an attached value, per action: the value shapes git reads whole.
_SHORT_WITH_VALUE: dict[str, re.Pattern[str]] = {
    "status": re.compile(r"-u(?:no|normal|all)"),
    "diff": re.compile(r"-U\d+|-M\d+%?"),
    "log": re.compile(r"-n\d+|-U\d+|-M\d+%?|-[SGL].+", re.DOTALL),
}


def _is_count(arg: str) -> bool:
    return bool(re.fullmatch(r"-\d+|-n\d*|--max-count(=\d+)?", arg))


def check_git_args(root: Path, action: str, args: list[str]) -> str | None:
    """A sentence refusing the first argument that is not a read-only one, or None.

    Every option must be on the action's list; values are attached
    (``--author=ana``, ``-Sneedle``) except a count (``-n 5``), so no argument
    can hide behind an option that git would not read it as the value of.
    After ``--`` every argument is a path, and must stay inside the root.
    """
    allowed = GIT_OPTIONS[action]
    paths_only = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "-":
            return "git argument '-' (read from stdin) is refused"
        if paths_only or not arg.startswith("-"):
            if paths_only or _looks_like_path(arg):
                try:
                    resolve_in_root(root, arg)
                except PathRefused as refused:
                    return str(refused)
            continue
        if arg == "--":
            paths_only = True
            continue
        if action == "log" and re.fullmatch(r"-\d+", arg):
            continue
        name = arg.split("=", 1)[0]
        if name in allowed:
            if "=" in arg or name not in _NEEDS_VALUE | _SEPARATE_COUNT:
                continue
            if name in _SEPARATE_COUNT and index < len(args) and args[index].isdigit():
                index += 1
                continue
            if name in _SEPARATE_COUNT:
                return f"git {action}: {arg} needs a number (for example {arg} 5)"
            return f"git {action}: give {arg}'s value attached, as {arg}=VALUE"
        if _SHORT_WITH_VALUE[action].fullmatch(arg):
            continue
        return (f"git {action} option {arg!r} is refused: only read-only options are accepted "
                f"(for example: {', '.join(sorted(allowed)[:8])} ...)")
    return None


def _looks_like_path(arg: str) -> bool:
    return "/" in arg or os.path.isabs(arg) or arg.startswith("..")


def git_environment(root: Path) -> dict[str, str]:
    """The tool environment with every GIT_* variable of this process replaced by safe ones."""
    env = {k: v for k, v in tool_environment().items() if not k.startswith("GIT_")}
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",  # status must not rewrite the index
        "GIT_CEILING_DIRECTORIES": str(Path(root).resolve().parent),  # no repository above
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "LC_ALL": "C",
    })
    return env
