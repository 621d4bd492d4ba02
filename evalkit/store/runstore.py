"""The run store: one directory per run, written so a crash loses at most a line.

A recording is the ground truth every verdict is re-derived from, so it is
written defensively: each line goes out with one ``os.write`` on an
``O_APPEND`` descriptor before the call returns (a ``kill -9`` leaves at most
a torn last line), ``meta.json`` is only ever replaced whole,
and a ``flock`` on ``lock`` marks the run as live for exactly as long as its
writer exists (the kernel drops it when the process dies, however it dies).
Every line is scrubbed of credentials on its way in.

What is durable when: an ``events.jsonl`` line is fsync'd before ``append``
returns, as the contract says. The call logs (``model.jsonl``,
``tools.jsonl``) are written just as promptly, so a crashed process loses
none of their lines, but their fsyncs run on a flusher thread, off the
mission's critical path, and ``close`` waits for them. Only a power cut in
that window (about a millisecond) could leave the stream naming a call its
log lost, which replay reports as an incomplete recording. Inline, those
fsyncs were a third of what recording adds to a fast mission
(``benchmarks/bench_recording.py``).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError, RecordingFailed
from evalkit.redact import redact_obj
from evalkit.store import layout
from evalkit.store.replace import replace_file
from evalkit.store.signing import Signer, Trust
from evalkit.store.sink import encode_line

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def now_iso() -> str:
    """UTC now as ISO 8601 with milliseconds and a ``Z``."""
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class RunStore:
    """The directory of runs under ``root``; hands out writers and paths.

    ``durable=False`` skips the fsyncs (lines are still written whole, one
    ``os.write`` each, so a crashed process loses nothing; a power cut may).
    Only for runs that can be made again from something durable — regrade's
    replays of recordings — never for a mission's own record.
    """

    def __init__(self, root: Path, *, durable: bool = True, signer: Signer | None = None
                 ) -> None:
        self.root = Path(root)
        self.durable = durable
        #: Seals each run this store's writers close (``evalkit.store.seal``); None: unsigned.
        self.signer = signer

    def create(self, meta: dict[str, Any]) -> RunWriter:
        """A new run: fresh id and directory, its lock taken, meta.json written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvalkitError(
                f"cannot create the run store {self.root}: {exc.strerror or exc}.") from None
        for _ in range(8):
            run_id = layout.new_run_id()
            path = self.root / run_id
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise EvalkitError(f"cannot create run {path}: {exc.strerror or exc}.") from None
            writer = RunWriter(path, durable=self.durable, signer=self.signer)
            try:
                writer._merge_meta(meta)
            except BaseException:
                writer.close()
                raise
            return writer
        raise EvalkitError(f"cannot create a fresh run id under {self.root}; try again.")

    def path_of(self, run_id: str) -> Path:
        """The directory of an existing run; a malformed or unknown id is "no such run"."""
        if not isinstance(run_id, str) or not layout.is_run_id(run_id):
            raise EvalkitError(f"no such run: {run_id}")
        path = self.root / run_id
        if not path.is_dir():
            raise EvalkitError(f"no such run: {run_id}")
        return path

    def run_ids(self) -> list[str]:
        """Every run id in the store, sorted (which is creation order)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if layout.is_run_id(p.name) and p.is_dir())

    def is_live(self, run_id: str) -> bool:
        """True while some process (this one included) holds the run's lock."""
        return lock_held(self.path_of(run_id))


def lock_held(run_dir: Path) -> bool:
    """True while some process (this one included) holds the lock of the run at ``run_dir``."""
    lock = Path(run_dir) / layout.LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        # A shared probe: two probes never block each other; a writer's
        # exclusive lock blocks it. Closing the fd drops the probe's lock.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class _Flusher:
    """A thread that fsyncs the files handed to it, coalescing repeats.

    ``settle`` waits until everything handed over so far is on disk and
    re-raises the first fsync error as a ``RecordingFailed``.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._dirty: dict[int, Path] = {}
        self._busy = False
        self._closing = False
        self._error: str | None = None
        self._thread: threading.Thread | None = None

    def mark(self, fd: int, path: Path) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._dirty[fd] = path
            self._cond.notify()

    def settle(self) -> None:
        with self._cond:
            while self._dirty or self._busy:
                self._cond.wait()
            error, self._error = self._error, None
        if error is not None:
            raise RecordingFailed(error)

    def close(self) -> None:
        try:
            self.settle()
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._closing:
                    self._cond.wait()
                if not self._dirty:
                    return
                batch, self._dirty, self._busy = self._dirty, {}, True
            for fd, path in batch.items():
                try:
                    os.fsync(fd)
                except OSError as exc:
                    with self._cond:
                        self._error = self._error or (
                            f"cannot record to {path}: {exc.strerror or exc}.")
            with self._cond:
                self._busy = False
                self._cond.notify_all()


class _AppendFile:
    """One append-only JSONL file: lazily opened, every line written with one write.

    Each line is fsync'd before ``write_line`` returns, or, given a
    ``flusher``, handed to it; ``fsync=False`` skips durability altogether.
    """

    def __init__(self, path: Path, *, fsync: bool = True, flusher: _Flusher | None = None) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0
        self._fsync = fsync
        self._flusher = flusher

    def write_line(self, line: bytes) -> None:
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC,
                                   0o644)
                self._size = os.fstat(self._fd).st_size
            view = memoryview(line)
            while view:  # one write in practice; short writes only on a full disk
                view = view[os.write(self._fd, view):]
            if self._fsync and self._flusher is None:
                os.fsync(self._fd)
        except OSError as exc:
            self._cut_back()
            raise RecordingFailed(
                f"cannot record to {self.path}: {exc.strerror or exc}.") from None
        self._size += len(line)
        if self._fsync and self._flusher is not None:
            self._flusher.mark(self._fd, self.path)

    def _cut_back(self) -> None:
        # Drop a half-written line so the next one starts on a line of its own.
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _last_number(path: Path, key: str) -> int:
    """``key`` of the last complete line of a JSONL file (0 if none); a torn tail is not
    read (``_cut_torn_tail`` drops it once the run is written to)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    lines = data[:data.rfind(b"\n") + 1].splitlines()
    if not lines:
        return 0
    try:
        return int(json.loads(lines[-1])[key])
    except (ValueError, KeyError, TypeError):
        raise EvalkitError(f"{path} does not end with a readable {key!r} line.") from None


def _cut_torn_tail(path: Path) -> None:
    """Drop a line a crash left half-written: it was never acknowledged, and the next line
    must start on a line of its own."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    end = data.rfind(b"\n") + 1
    if end < len(data):
        os.truncate(path, end)


def _check_seal(run_dir: Path, signer: Signer | None) -> None:
    """Refuse to reopen a sealed run altered after it was closed: it is never continued and
    sealed again as if whole."""
    from evalkit.store.seal import Checker

    if not (run_dir / layout.MANIFEST_FILE).exists():
        return
    trust = Trust.local()
    if signer is not None:
        trust.add(signer.public_raw, "this run's signer")
    check, _ = Checker(trust).folder(run_dir)
    if check.tampered:
        raise EvalkitError(f"run {run_dir.name} cannot be continued: {check.reason()}.")


def _unseal(run_dir: Path) -> None:
    """Open a run again for writing: its seal and certificates were of the closed run, and
    its next close issues both anew; a torn tail is cut."""
    (run_dir / layout.MANIFEST_FILE).unlink(missing_ok=True)
    (run_dir / layout.CERTIFICATES_FILE).unlink(missing_ok=True)
    for name in (layout.EVENTS_FILE, layout.MODEL_FILE, layout.TOOLS_FILE):
        _cut_torn_tail(run_dir / name)


def _take_lock(path: Path, run_id: str) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
    except OSError as exc:
        raise EvalkitError(f"cannot open {path}: {exc.strerror or exc}.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise EvalkitError(
            f"run {run_id} is being written by another live process; "
            "wait for it to finish or use another run.") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # for a person wondering who holds it
    return fd


class RunWriter:
    """The one writer of a run directory; holds its lock until ``close``.

    ``RunWriter(path)`` opens an existing run directory: it fails clearly if
    another writer holds the lock, and otherwise continues the numbering
    where the files end. Thread-safe.

    Given a ``signer``, ``close`` seals the run (a signed ``manifest.json``).
    Reopening a sealed run first checks its seal: a run altered after it was
    closed is refused, never continued and re-sealed as if whole. The seal and
    the certificates are removed only when the writer first writes, so a writer
    that is closed without writing (a refused ``--resume``, an orphan closed
    meanwhile) leaves the run exactly as it found it.
    """

    def __init__(self, path: Path, *, durable: bool = True, signer: Signer | None = None
                 ) -> None:
        self.path = Path(path)
        self.run_id = self.path.name
        self._durable = durable
        self._signer = signer
        if not layout.is_run_id(self.run_id) or not self.path.is_dir():
            raise EvalkitError(f"no such run: {self.run_id}")
        self._lock = threading.Lock()
        self._lock_fd: int | None = _take_lock(self.path / layout.LOCK_FILE, self.run_id)
        try:
            _check_seal(self.path, signer)
            self._seq = _last_number(self.path / layout.EVENTS_FILE, "seq")
            self._model_calls = _last_number(self.path / layout.MODEL_FILE, "call")
            self._tool_calls = _last_number(self.path / layout.TOOLS_FILE, "call")
            self._meta = self._read_meta()
        except BaseException:
            self._release()
            raise
        self._flusher = _Flusher(f"evalkit-fsync-{self.run_id}")
        self._events = _AppendFile(self.path / layout.EVENTS_FILE, fsync=durable)
        self._model = _AppendFile(self.path / layout.MODEL_FILE, fsync=durable,
                                  flusher=self._flusher)
        self._tools = _AppendFile(self.path / layout.TOOLS_FILE, fsync=durable,
                                  flusher=self._flusher)
        self._closed = False
        #: Whether anything was written since the run was opened (its seal is then gone).
        self._written = False
        #: Called with the run directory once its files are closed and before it is sealed
        #: (the runtime issues the run's certificates there, so the seal lists them).
        self.before_seal: Callable[[Path], None] | None = None

    @property
    def durable(self) -> bool:
        """Whether this writer fsyncs what it writes (False only for remade runs)."""
        return self._durable

    @property
    def last_seq(self) -> int:
        """The seq of the last appended record (0 before the first)."""
        return self._seq

    def append(self, record: dict[str, Any], *, scrubbed: bool = False) -> int:
        """Append one stream record as ``{seq, at, record}``; returns its seq.

        ``scrubbed=True`` says the caller already ran the redactor (the emitter
        does), so the record is not walked twice.
        """
        clean = record if scrubbed else redact_obj(record)
        with self._lock:
            self._writable()
            seq = self._seq + 1
            self._events.write_line(encode_line({"seq": seq, "at": now_iso(), "record": clean}))
            self._seq = seq
            return seq

    def record_model_call(self, kind: str, request: dict[str, Any], reply: dict[str, Any],
                          started: str | None = None) -> int:
        """Append one model exchange to model.jsonl; returns its 1-based call number.

        ``started`` (``now_iso()`` taken as the call began) is kept as the line's
        ``started``, so the tables can say how long the call took: ``at`` is written
        once it returned."""
        with self._lock:
            self._writable()
            call = self._model_calls + 1
            line = {"call": call, "at": now_iso(), "kind": kind, "request": request, "reply": reply}
            if started is not None:
                line["started"] = started
            self._model.write_line(encode_line(redact_obj(line), canonical=True))
            self._model_calls = call
            return call

    def record_catalogue(self, catalogue: list[dict[str, Any]]) -> None:
        """Write the tool catalogue as tools.jsonl's ``call: 0`` line."""
        with self._lock:
            self._writable()
            line = {"call": 0, "at": now_iso(), "catalogue": catalogue}
            self._tools.write_line(encode_line(redact_obj(line), canonical=True))

    def record_tool_call(self, tool: str, arguments: dict[str, Any],
                         result: dict[str, Any]) -> int:
        """Append one tool dispatch to tools.jsonl; returns its 1-based call number.

        (Its start is the ``tool_call`` record's time, written just before the dispatch.)"""
        with self._lock:
            self._writable()
            call = self._tool_calls + 1
            line = {"call": call, "at": now_iso(), "tool": tool,
                    "arguments": arguments, "result": result}
            self._tools.write_line(encode_line(redact_obj(line), canonical=True))
            self._tool_calls = call
            return call

    def update_meta(self, **fields: Any) -> None:
        """Merge ``fields`` into meta.json's ``meta`` and replace the file atomically."""
        self._merge_meta(fields)

    def _merge_meta(self, fields: dict[str, Any]) -> None:
        scrubbed = redact_obj(fields)
        with self._lock:
            self._writable()
            now = now_iso()
            meta = dict(self._meta, updated_at=now, last_seq=self._seq)
            meta["meta"] = {**self._meta["meta"], **scrubbed}
            try:
                replace_file(self.path / layout.META_FILE, encode_line(meta),
                             fsync=self._durable)
            except OSError as exc:
                raise RecordingFailed(
                    f"cannot write {self.path / layout.META_FILE}: {exc.strerror or exc}."
                ) from None
            self._meta = meta

    def close(self) -> None:
        """Close the files and release the lock; safe to call twice. A run written to is
        given its certificates (``before_seal``) and sealed; one that was not is left as
        it was found."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._flusher.close()  # the call logs are on disk before their fds close
                for file in (self._events, self._model, self._tools):
                    file.close()
                if not self._written:
                    return
                if self.before_seal is not None:
                    self.before_seal(self.path)
                if self._signer is not None:
                    self._seal()
            finally:
                for file in (self._events, self._model, self._tools):
                    file.close()
                self._release()

    def _seal(self) -> None:
        from evalkit.store.seal import seal_run

        try:
            seal_run(self.path, self._signer, fsync=self._durable)  # type: ignore[arg-type]
        except OSError as exc:
            raise RecordingFailed(
                f"cannot seal run {self.run_id}: {exc.strerror or exc}.") from None

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EvalkitError(f"run {self.run_id} is closed; nothing more can be recorded.")

    def _writable(self) -> None:
        """Before a write (under the lock): the run is open, and no longer sealed."""
        self._check_open()
        if not self._written:
            _check_seal(self.path, self._signer)  # again: nothing altered it since the open
            try:
                _unseal(self.path)
            except OSError as exc:
                raise RecordingFailed(
                    f"cannot reopen run {self.run_id}: {exc.strerror or exc}.") from None
            self._written = True

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the only descriptor drops the flock
            self._lock_fd = None

    def _read_meta(self) -> dict[str, Any]:
        path = self.path / layout.META_FILE
        now = now_iso()
        fresh = {"run_id": self.run_id, "created_at": now, "updated_at": now,
                 "last_seq": self._seq, "meta": {}}
        try:
            found = json.loads(path.read_bytes())
        except FileNotFoundError:
            return fresh
        except ValueError:
            raise EvalkitError(f"{path} is not valid JSON.") from None
        if not isinstance(found, dict) or not isinstance(found.get("meta"), dict):
            raise EvalkitError(f"{path} is not a run's meta.json.")
        return {**fresh, **found}
