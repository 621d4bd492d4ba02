"""Finding run directories under a root (and the streams lying directly in it).

The walk is lazy, so converting starts while the rest are still being found.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from evalkit.store.layout import (
    EVENTS_FILE,
    LOOKED_IN_DEPTH,
    META_FILE,
    MODEL_FILE,
    TOOLS_FILE,
    as_text,
    is_file,
)
from evalkit.store.reader import loads, parse_bytes


def discover(root: Path, skip: Path | None = None) -> list[Path]:
    """Every run directory under ``root`` (one holding events.jsonl), and every events
    file directly in it (see ``walk``), in path order.

    ``skip`` (a dataset folder) and its temporary siblings are not descended into.
    """
    return [Path(run) for run in walk(root, skip)]


class _Own:
    """The dataset being written (``skip``) and its temporary siblings: neither runs nor
    mission folders, wherever ingest looks."""

    def __init__(self, skip: Path | None) -> None:
        self.name = skip.name if skip is not None else None
        self.parent = os.path.dirname(os.path.realpath(skip)) if skip is not None else None

    def holds(self, folder: str, name: str) -> bool:
        """Whether ``name`` in ``folder`` is the dataset or one of its temporary siblings."""
        return (self.name is not None
                and (name == self.name or name.startswith(f".{self.name}."))
                and os.path.realpath(folder) == self.parent)


def walk(root: Path, skip: Path | None = None, *, keep: frozenset[str] = frozenset(),
         kept: list[str] | None = None) -> Iterator[str]:
    """``discover``, lazily: each run directory as it is found, in component-wise path
    order (sorted(Path) order: a directory's subdirectories by name, a run before
    the runs inside it). Ingest converts the first runs while the rest are still to
    be found: listing 100k run directories takes seconds here, all of it system calls.

    A file directly in ``root`` that holds a stream is a run too: ``score --runs
    DIR`` reads ``DIR/<key>`` as the mission's events file when it is a file, and
    the dataset must hold what that reads (``bare_stream`` says which files do).

    Files named in ``keep`` that the walk passes (in any folder it lists) are appended
    to ``kept`` as it goes, so a caller that wants other files of the tree (a
    ``Gathering``) gets them without listing every folder a second time.

    A symbolic link to a folder is followed where ``score --runs`` would follow
    it (``LOOKED_IN_DEPTH``: ``runs/KEY -> /data/store/run_1`` is that mission's
    run), and only there: deeper links are left alone, so a link that loops
    back up is walked a bounded number of times, never for ever.
    """
    own = _Own(skip)
    top = os.fspath(root)
    bare: set[str] = set()
    stack: list[tuple[Iterator[str], int]] = [(iter([top]), 0)]
    while stack:
        here = next(stack[-1][0], None)
        if here is None:
            stack.pop()
            continue
        if here in bare:
            yield here
            continue
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError:
            continue
        depth = stack[-1][1] + 1  # of what is listed in ``here``
        follow = depth <= LOOKED_IN_DEPTH
        run = False
        below = []
        for entry in entries:
            if entry.name == EVENTS_FILE and is_file(entry):
                run = True
            elif entry.name in keep and kept is not None \
                    and entry.is_file(follow_symlinks=False):
                kept.append(entry.path)
            elif _is_folder(entry, follow) and not own.holds(here, entry.name):
                below.append(entry.name)
            elif here == top and bare_stream(entry) and not own.holds(here, entry.name):
                below.append(entry.name)
                bare.add(entry.path)
        if run:
            yield here
        if below:
            below.sort()
            stack.append((iter([os.path.join(here, name) for name in below]), depth))


def _is_folder(entry: os.DirEntry[str], follow: bool) -> bool:
    """Whether an entry is a folder to walk into (through a link only with ``follow``);
    False where that cannot be told (a link that loops or points nowhere)."""
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


#: The files of a run directory: in the root (a run itself), none is a stream.
_RUN_FILES = frozenset({EVENTS_FILE, META_FILE, MODEL_FILE, TOOLS_FILE})

def _beside_runs(entry: os.DirEntry[str]) -> bool:
    """Whether a file in the root may be a mission's events file: a plain file (or a link
    to one), not hidden, and not one of a run directory's own files (the root is a run)."""
    return not entry.name.startswith(".") and entry.name not in _RUN_FILES and is_file(entry)


#: How far into a file ``bare_stream`` looks for a record.
_HEAD_MAX = 1 << 20


def bare_stream(entry: os.DirEntry[str]) -> bool:
    """Whether a file beside the run folders is a mission's events file.

    ``score --runs`` takes whatever file sits at ``DIR/<key>``; ingest, which
    knows no keys, takes the files that look like a stream, so a README or a
    suite kept beside the runs does not become a run: an empty file (an empty
    stream), or one with a line in its first megabyte that is a JSON object with
    an ``event`` (a record) or a ``record`` (an envelope). Lines the reader
    skips (blank, torn, not an object) are passed over on the way, as the
    reader passes them: a stream whose first line was torn is still a stream.
    A symbolic link to such a file is one too (``score --runs`` reads through
    it); hidden files are left out.
    """
    if not _beside_runs(entry):
        return False
    try:
        with open(entry.path, "rb") as file:
            head = file.read(_HEAD_MAX)
    except OSError:
        return False
    lines = head.split(b"\n")
    if len(head) == _HEAD_MAX:
        lines.pop()  # may be cut short by the read
    for line in lines:
        try:
            value = loads(line)
        except ValueError:
            continue
        if type(value) is dict and ("event" in value or "record" in value):
            return True
    return not head.strip()  # nothing but white space: an empty stream


#: The largest file ``recordless`` reads whole: a README or a crashed agent's few
#: torn lines, not an archive someone left beside the runs.
_RECORDLESS_MAX = 64 * 2**20


def recordless(entry: os.DirEntry[str]) -> int | None:
    """For a file beside the run folders that ``bare_stream`` did not take: the lines
    ``score --runs`` would skip reading it, when it holds no record at all (None
    when it holds one, or is no plain file, hidden or too large to read whole).

    ``score --runs`` reads whatever file sits at ``DIR/<key>``; one with no record
    in it is an empty stream there, and the manifest says so, so the dataset
    words a mission named by it alike."""
    if not _beside_runs(entry):
        return None
    try:
        if os.stat(entry.path).st_size > _RECORDLESS_MAX:
            return None
        with open(entry.path, "rb") as file:
            data = file.read()
    except OSError:
        return None
    read = parse_bytes(Path(entry.path), data)
    return None if read.records else read.skipped


class Streams:
    """Which names directly under the root hold a stream where ``score --runs`` looks for
    one (its own events file, or one a level or two below), noted as the walk finds runs;
    the others are listed in the manifest, so scoring from the dataset words them alike."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._prefix = os.path.join(os.fspath(root), "")
        self._names: set[str] = set()

    def note(self, runs: Iterator[str]) -> Iterator[str]:
        prefix, names = self._prefix, self._names
        for run in runs:
            if run.startswith(prefix):
                parts = run[len(prefix):].split(os.sep, 3)
                if len(parts) <= 3 and not any(p.startswith(".") for p in parts[1:]):
                    names.add(parts[0])
            yield run

    def unkept(self, skip: Path) -> tuple[list[str], dict[str, int]]:
        """What is directly under the root and holds no stream the walk noted, from one
        listing: the names of the folders (sorted), and the files that hold no record
        (``recordless``) with the lines a reader skips in each.

        A file is no folder here (``score --runs`` reads one as an events file,
        through a link too), nor is the dataset itself. A link to a folder is a folder,
        as it is to the walk and to ``score --runs``; a link to nothing is nothing
        (``score --runs`` says "not run" of it, not "no stream").
        """
        own, root = _Own(skip), os.fspath(self.root)
        try:
            with os.scandir(root) as listing:
                others = sorted((entry for entry in listing if entry.name not in self._names
                                 and not own.holds(root, entry.name)), key=lambda e: e.name)
        except OSError:
            return [], {}
        folders: list[str] = []
        files: dict[str, int] = {}
        for entry in others:
            if not is_file(entry):
                if not entry.is_symlink() or os.path.exists(entry.path):
                    folders.append(as_text(entry.name))
            elif (skipped := recordless(entry)) is not None:
                files[as_text(entry.name)] = skipped
        return sorted(folders), files
