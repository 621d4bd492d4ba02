"""The run-directory layout: file names, run ids, where the store lives, and
how a path given to ``score`` resolves to one events file.

Everything that names a file inside a run directory imports it from here.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from evalkit.store.state import RUNS, state_path

EVENTS_FILE = "events.jsonl"
META_FILE = "meta.json"
LOCK_FILE = "lock"
MODEL_FILE = "model.jsonl"
TOOLS_FILE = "tools.jsonl"
#: Beside a stream the harness captured: how the agent was spawned and how it ended
#: (``evalkit.eval.harness_files`` writes it; ingest reads its ``wall_s`` and ``runs``).
CAPTURE_FILE = "command.json"
#: A closed recording's signed list of its files (``evalkit.store.seal``).
MANIFEST_FILE = "manifest.json"
#: A model judge's judgments of a run, added after the run closed: a folder of their own
#: beside the run's stream, sealed by a manifest of their own (``evalkit.judge``), so the
#: run's seal stays exactly as the run left it.
JUDGE_DIR = "judge"
JUDGE_FILE = "judge.jsonl"
#: Certificates of a run's named invariants (``evalkit.gate.certificates``): written as the
#: run closes, before its seal, so the seal lists them; each one recomputes from the run.
CERTIFICATES_FILE = "certificates.jsonl"

RUNS_ENV = "EVALKIT_RUNS"
RECORD_NOTHING = ("none", "off")

#: How far below a runs folder ``score --runs`` looks for a mission's stream: the
#: mission's folder (1), and the folders one (2) and two (3) below it. Symbolic
#: links are followed down to here, by the resolver and by ingest's walk alike.
LOOKED_IN_DEPTH = 3

_RUN_ID = re.compile(r"run_[A-Za-z0-9-]{1,80}")


def new_run_id() -> str:
    """A fresh run id: sortable by creation time, unique without coordination."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"run_{stamp}-{secrets.token_hex(4)}"


def is_run_id(text: str) -> bool:
    """True for a well-formed run id; anything else is treated as "no such run"."""
    return bool(_RUN_ID.fullmatch(text))


def runs_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where runs are recorded, or None when recording is switched off: ``EVALKIT_RUNS``,
    else the state folder's ``runs`` (``evalkit.store.state``), out of any mission's reach."""
    env = os.environ if environ is None else environ
    value = env.get(RUNS_ENV)
    if value is None or value == "":
        return state_path(RUNS, env)
    if value.strip().lower() in RECORD_NOTHING:
        return None
    return Path(value)


def no_stream(shown: str | Path) -> str:
    """The reason a mission gets when its path holds no events file where ``resolve_events`` looks."""
    return f"no stream: no events.jsonl in {shown} or two levels below it"


#: Told each folder ``resolve_events`` lists and the names in it (a seal checker learns
#: there which folders hold no seal, without asking the disk again).
Listed = Callable[[str, list[str]], None]


def resolve_events(path: Path, listed: Listed | None = None) -> Path | None:
    """The events file a path stands for, or None when there is none.

    A file is itself. A directory is its own ``events.jsonl``, else the first
    (sorted) ``*/events.jsonl`` below it, else the first ``*/*/events.jsonl``;
    ``*`` as a glob means it, so a hidden folder (``.partial``) is not looked in.
    Written with ``os`` calls on strings: scoring resolves one path per
    mission, and pathlib's objects were most of that cost at 10k missions.
    """
    found = _resolve(os.fspath(path), listed)
    return None if found is None else Path(found)


def _resolve(path: str, listed: Listed | None = None) -> str | None:
    # The folder is listed first, which answers "is it a folder" and "is its own
    # events file there" too: two system calls fewer per mission than asking.
    try:
        with os.scandir(path) as listing:
            entries = list(listing)
    except NotADirectoryError:
        return path if os.path.isfile(path) else None
    except PermissionError:
        return _resolve_unlisted(path)
    except (OSError, ValueError):
        return None
    if listed is not None:
        listed(path, [e.name for e in entries])
    if any(e.name == EVENTS_FILE and is_file(e) for e in entries):
        return os.path.join(path, EVENTS_FILE)
    return _below(_folders(path, entries))


def as_text(path: str) -> str:
    """A path as text that can be written anywhere (JSON, Parquet, a page). A name whose
    bytes are not UTF-8 reaches Python as lone surrogates, which no encoder takes; its
    stray bytes are shown as ``\\xNN`` instead. Paths opened keep their own spelling."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def is_file(entry: os.DirEntry[str]) -> bool:
    """``entry.is_file()``, False where it cannot be told (a symbolic link that loops or
    points nowhere readable), as ``os.path.isfile`` answers: such an entry holds no stream."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _resolve_unlisted(path: str) -> str | None:
    """A folder that cannot be listed may still be entered: its own events file counts."""
    direct = os.path.join(path, EVENTS_FILE)
    return direct if os.path.isfile(direct) else None


def _below(children: list[str]) -> str | None:
    for child in children:  # one level down, first in sorted order
        candidate = os.path.join(child, EVENTS_FILE)
        if os.path.isfile(candidate):
            return candidate
    for child in children:  # two levels down
        for grandchild in _subdirs(child):
            candidate = os.path.join(grandchild, EVENTS_FILE)
            if os.path.isfile(candidate):
                return candidate
    return None


def _subdirs(path: str) -> list[str]:
    """Sub-folders sorted by name (what sorted(glob) would give), unreadable ones skipped."""
    try:
        with os.scandir(path) as listing:
            return _folders(path, list(listing))
    except OSError:
        return []


def _folders(path: str, entries: list[os.DirEntry[str]]) -> list[str]:
    return [os.path.join(path, name) for name in sorted(
        e.name for e in entries if not e.name.startswith(".") and _is_dir(e))]


def resolve_relative(key: str, rel_paths: Iterable[str]) -> str | None:
    """The same rule as ``resolve_events`` over relative POSIX paths of events files.

    Used where the files are rows of a dataset rather than entries on disk.
    """
    own = f"{key}/{EVENTS_FILE}"
    prefix = f"{key}/"
    if type(rel_paths) is list and len(rel_paths) == 1:  # the usual case: one run per mission
        rel = rel_paths[0]
        if rel == own or rel == key or (rel.startswith(prefix) and rel.endswith("/" + EVENTS_FILE)
                          and 1 <= rel.count("/", len(prefix)) <= 2
                          and "/." not in rel[len(prefix) - 1:]):
            return rel
        return None
    one_down: list[str] = []
    two_down: list[str] = []
    for rel in rel_paths:
        if rel == own or rel == key:  # key: the mission's events file itself
            return rel
        if not rel.startswith(prefix) or not rel.endswith("/" + EVENTS_FILE) \
                or "/." in rel[len(prefix) - 1:]:  # a hidden folder on the way
            continue
        depth = rel[len(prefix):].count("/")
        if depth == 1:
            one_down.append(rel)
        elif depth == 2:
            two_down.append(rel)
    for found in (one_down, two_down):
        if found:
            return min(found, key=_glob_order)
    return None


_OWN_SUFFIX = "/" + EVENTS_FILE


def taken_alone(rel: str) -> bool:
    """``resolve_relative``'s rule for a folder's only events file, when that folder is
    named by a key without "/" and ``rel`` starts with it: ``KEY/events.jsonl``, or
    one or two folders down, none of them hidden. Cheaper than the whole rule,
    for callers that ask it once per mission."""
    return rel.endswith(_OWN_SUFFIX) and rel.count("/") <= 3 and "/." not in rel


def _glob_order(rel: str) -> tuple[str, ...]:
    # sorted(Path) compares component by component; mirror that for strings.
    return tuple(rel.split("/"))
