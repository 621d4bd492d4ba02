"""The event sink: where the NDJSON stream goes (stdout, an inherited fd, a file).

The sink is the only machine channel of a mission, and the stream contract
says a write error on it never fails the mission: a harness that stops
reading, a full disk or a closed descriptor costs the stream, not the run
(the run store still has every record). So ``write`` never raises on I/O;
it counts the loss in ``errors`` and, after the first failure, drops further
records without touching the descriptor again.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
from typing import Any

from evalkit.errors import EvalkitError

#: The event sink given through the environment: ``evalkit run`` sets it beside
#: ``--events`` for every agent it spawns, so a program that cannot parse the flag
#: (an agent using ``evalkit.record``) still writes its stream where the harness reads.
EVENTS_ENV = "EVALKIT_EVENTS"

_FD_SPEC = re.compile(r"fd:(.*)", re.DOTALL)
_STANDARD_FDS = (0, 1, 2)


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and ±Infinity replaced by None: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_bytes(obj: Any, **options: Any) -> bytes:
    """``json.dumps(obj, ensure_ascii=False, **options)`` as UTF-8 bytes, whatever its text.

    A string may hold a lone UTF-16 surrogate, which UTF-8 cannot carry: an endpoint
    that cuts an emoji in half sends ``"\\ud83d"``, and Python's JSON reader hands that
    on as is. Such a value is written with every non-ASCII character escaped, the
    surrogate as ``\\ud83d``: valid JSON that reads back to the very same string,
    where encoding it would raise and lose the record (or crash the mission).
    """
    try:
        return json.dumps(obj, ensure_ascii=False, **options).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, **options).encode("ascii")


def encode_line(obj: Any, *, canonical: bool = False) -> bytes:
    """One NDJSON line as UTF-8 bytes: non-ASCII as is, never NaN/Infinity.

    ``canonical`` sorts keys and drops spaces (what the recordings use). A
    non-finite float becomes null rather than making the record unwritable;
    a lone surrogate is escaped (``json_bytes``).
    """
    options: dict[str, Any] = {"allow_nan": False, "separators": (",", ":")}
    if canonical:
        options["sort_keys"] = True
    try:
        data = json_bytes(obj, **options)
    except ValueError:
        data = json_bytes(_finite(obj), **options)
    return data + b"\n"


class EventSink:
    """One NDJSON destination; ``write`` never raises on an I/O error."""

    def __init__(self, spec: str, fd: int | None, *, owns_fd: bool) -> None:
        # fd None means "-": write through sys.stdout so the stream keeps its
        # order with any prose printed there and follows a replaced sys.stdout.
        self.spec = spec
        self.errors = 0
        self.written = 0
        self._fd = fd
        self._owns_fd = owns_fd
        self._broken = False
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, spec: str) -> EventSink:
        """A sink for ``-`` (stdout), ``fd:N`` (an inherited descriptor) or a path (append)."""
        if spec == "-":
            return cls(spec, None, owns_fd=False)
        fd_match = _FD_SPEC.fullmatch(spec)
        if fd_match:
            number = fd_match.group(1)
            if not (number.isascii() and number.isdigit()):
                raise EvalkitError(
                    f"bad event sink {spec!r}: after fd: comes a descriptor number, like fd:3.")
            fd = int(number)
            try:
                os.fstat(fd)
            except OSError:
                raise EvalkitError(
                    f"bad event sink {spec!r}: descriptor {fd} is not open in this process."
                ) from None
            return cls(spec, fd, owns_fd=fd not in _STANDARD_FDS)
        if not spec:
            raise EvalkitError("bad event sink '': give -, fd:N or a file path.")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(spec, flags, 0o644)
        except OSError as exc:
            raise EvalkitError(
                f"cannot open event sink {spec!r} for append: {exc.strerror or exc}.") from None
        return cls(spec, fd, owns_fd=True)

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as one line and flush it; I/O errors are counted, not raised."""
        with self._lock:
            if self._broken or self._closed:
                self.errors += 1
                return
            data = encode_line(record)
            try:
                self._write(data)
            except (OSError, ValueError):
                # ValueError: the stdout object was closed under us.
                self.errors += 1
                self._broken = True
                return
            self.written += 1

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            stream = sys.stdout
            buffer = getattr(stream, "buffer", None)
            if buffer is None:
                stream.write(data.decode("utf-8"))
            else:
                stream.flush()
                buffer.write(data)
                buffer.flush()
            stream.flush()
            return
        view = memoryview(data)
        while view:
            # One call for a whole line in practice; the loop only covers short writes.
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        """Stop writing; close the descriptor if this sink opened or was handed it.

        stdin/stdout/stderr (``-``, ``fd:0``-``fd:2``) are left open: the process
        still needs them after the stream ends.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._fd is not None and self._owns_fd:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
            elif self._fd is None:
                try:
                    sys.stdout.flush()
                except (OSError, ValueError):
                    pass

    def __enter__(self) -> EventSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
