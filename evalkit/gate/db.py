"""The one SQLite database of live governance state, opened one way.

The action ledger and the approval checkpoints share it, so a decision and the
checkpoint it releases commit together. WAL with ``synchronous=FULL``: a commit
that returned is on disk, and readers never block the one writer. Writers take
the write lock up front (``BEGIN IMMEDIATE``) so a read-then-write transition
cannot interleave with another process's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from evalkit.errors import EvalkitError
from evalkit.store.state import state_home

#: The file under the state folder.
FILE_NAME = "governance.sqlite"
#: How long a writer waits for another's lock before failing (milliseconds).
BUSY_TIMEOUT_MS = 30_000


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the governance database lives: the state folder, out of every mission's reach."""
    return state_home(environ) / FILE_NAME


def connect(path: Path | str, *, what: str = "governance database") -> sqlite3.Connection:
    """A connection in autocommit mode with the durability every governance table relies on.

    Transactions are explicit (:func:`immediate`). The file is made 0600: it holds
    who approved what, and checkpoint ciphertexts. A file that cannot be opened (a
    folder, not SQLite, an unwritable place) is one sentence naming ``what`` it is.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                               timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _enter_wal(conn)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
    except (OSError, sqlite3.Error) as exc:  # every caller says it the same way
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise EvalkitError(f"cannot open the {what} {path}: {why}") from None
    return conn


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch a new database to WAL, waiting out other openers doing the same.

    The switch needs the exclusive lock, and SQLite answers "database is locked" at
    once, without its busy handler, when another opener holds a shared lock meanwhile
    (two connections racing on a fresh file). So the wait is done here, within the
    same bound as every other writer's.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction holding the write lock from its first statement."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
