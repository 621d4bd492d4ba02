"""Reading a mission stream back: an events file or a run directory.

A reader must never lose what was recorded and never trip over what was not:
a torn last line is normal after a crash, and a stream may come from any
agent that speaks the contract. So lines are envelopes ``{seq, at, record}``
or bare records alike; blank, torn and non-object lines are skipped and
counted, never fatal; bytes that are not UTF-8 are replaced, not refused.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError
from evalkit.store.layout import no_stream, resolve_events


@dataclass
class StreamRead:
    """One stream, read: its records in order and what had to be skipped."""

    source: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    #: 1-based file line of each record, parallel to ``records``.
    lines: list[int] = field(default_factory=list)
    #: The envelope each unwrapped record came in, by the record's index: the dataset
    #: keeps an envelope's ``seq`` and ``at``, and reads model and tool recordings as
    #: the objects their lines hold, so ingest needs what unwrapping set aside.
    envelopes: dict[int, dict[str, Any]] = field(default_factory=dict)
    blank: int = 0
    torn: int = 0
    non_object: int = 0

    @property
    def skipped(self) -> int:
        return self.blank + self.torn + self.non_object


def parse_line(line: str | bytes) -> dict[str, Any] | None | str:
    """One line -> its record, ``None`` when blank, or a reason word when skipped.

    The reason is ``"torn"`` (not JSON) or ``"non_object"`` (JSON, but not an
    object). An envelope is unwrapped to the record it carries.
    """
    found = _line_object(line)
    return unwrap(found) if type(found) is dict else found


def _line_object(line: str | bytes) -> dict[str, Any] | None | str:
    """``parse_line`` short of unwrapping: the line's own object (envelope or record)."""
    if not line.strip():
        return None
    try:
        value = loads(line)
    except ValueError:
        return "torn"
    if not isinstance(value, dict):
        return "non_object"
    return value


def loads(line: str | bytes) -> Any:
    """A line's JSON value; ValueError when the line is not JSON (a torn line).

    orjson reads nearly every line. What it refuses and JSON's grammar allows is
    read by the standard library: a lone UTF-16 surrogate escape (``"\\ud83d"``,
    which JavaScript writes when it cuts a string in the middle of an emoji),
    replaced by U+FFFD as bytes that are not UTF-8 are; and a number past a
    double's range (``1e400``), read as null, since no field could hold it and
    the dataset's ``record`` text says what the reader read. NaN and Infinity are
    not JSON, and stay torn.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(line if isinstance(line, str) else line.decode("utf-8"),
                           parse_constant=not_json, parse_int=_as_orjson_reads,
                           parse_float=_double_or_null)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError too
        raise ValueError("not JSON") from None
    return whole_characters(value)


def _as_orjson_reads(digits: str) -> int | float | None:
    """An integer as orjson reads one: past 64 bits, a float; past a double's range, null.
    (Long ones are not made ints at all: Python refuses ints of 4,300 digits and more.)"""
    if len(digits) <= 21:
        value = int(digits)
        if -2**63 <= value < 2**64:
            return value
    return _double_or_null(digits)


def _double_or_null(digits: str) -> float | None:
    """A number as a double; past a double's range (``1e400``), null: no JSON writer
    could write it back, and no field reads infinity as a number."""
    value = float(digits)
    return value if math.isfinite(value) else None


def not_json(constant: str) -> Any:
    """A ``parse_constant`` for ``json.loads``: NaN and Infinity are not JSON."""
    raise ValueError(f"{constant} is not JSON")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def whole_characters(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD
    (what UTF-8 text cannot carry, read as bytes that are not UTF-8 are)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [whole_characters(item) for item in value]
    if isinstance(value, dict):
        return {whole_characters(k): whole_characters(v) for k, v in value.items()}
    return value


def unwrap(value: dict[str, Any]) -> dict[str, Any]:
    """The record inside an envelope, or the value itself when it is a bare record."""
    inner = value.get("record")
    if isinstance(inner, dict) and "event" not in value and "seq" in value:
        return inner
    return value


def read_events_file(path: Path) -> StreamRead:
    """Read one events file whole. Raises EvalkitError when it cannot be opened."""
    try:
        data = file_bytes(path)
    except EvalkitError:
        if path.is_dir():
            raise EvalkitError(f"{path} is a directory, not an events file") from None
        raise
    if data is None:
        raise EvalkitError(f"cannot read {path}: No such file or directory")
    return parse_bytes(path, data)


def file_bytes(path: Path | str) -> bytes | None:
    """A recorded file's bytes, None when there is none; anything else that stops the read
    is one sentence. A folder or a FIFO where the file belongs is refused: a FIFO, read,
    waits for a writer for ever, so it is opened without waiting and looked at first."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EvalkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise EvalkitError(f"{path} is not a regular file")
        # Plain reads, not a file object (which adds three system calls and a second
        # read): ingest and scoring read several small files a run. Reading a byte past
        # the size finds the end at once; a file that changed size meanwhile is read on.
        chunks = [os.read(fd, info.st_size + 1)]
        if len(chunks[0]) != info.st_size:
            while chunks[-1]:
                chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    except OSError as exc:
        raise EvalkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def parse_bytes(source: Path, data: bytes) -> StreamRead:
    """``parse_text(source, data.decode("utf-8", "replace"))``, without decoding
    the whole file first: orjson reads UTF-8 bytes itself, so only a line it
    refuses is decoded (with replacement) and read again as ``parse_text`` would.
    Splitting before decoding cuts the same lines: no byte of a UTF-8 sequence,
    valid or not, is a newline."""
    return _parse(source, data.split(b"\n"))


def parse_text(source: Path, text: str) -> StreamRead:
    """Parse a whole stream's text (what ``read_events_file`` does after reading)."""
    return _parse(source, text.split("\n"))


def _parse(source: Path, pieces: list[str] | list[bytes]) -> StreamRead:
    """``parse_line`` over every line, inlined for the common line (a JSON object)
    because this loop runs once per line of every scored run."""
    read = StreamRead(source=source)
    records, lines, envelopes = read.records, read.lines, read.envelopes
    if not pieces[-1]:
        pieces.pop()  # the newline that ends the last line starts no new line
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    number = 0
    for line in pieces:
        number += 1
        try:
            value = loads(line)
        except decode_error:
            value = _parse_refused(read, line)
            if value is None:
                continue
        else:
            if type(value) is not dict:
                read.non_object += 1
                continue
        if "seq" in value and "event" not in value:  # ``unwrap``, inlined
            inner = value.get("record")
            if type(inner) is dict:
                envelopes[len(records)] = value
                value = inner
        records.append(value)
        lines.append(number)
    return read


def _parse_refused(read: StreamRead, line: str | bytes) -> dict[str, Any] | None:
    """A line orjson refused, read by ``parse_line`` as text: counted when it is
    blank or torn; its object (not unwrapped yet) when only its bytes were bad
    (not UTF-8) or JSON's grammar allows what orjson does not."""
    parsed = _line_object(line if isinstance(line, str) else line.decode("utf-8", "replace"))
    if type(parsed) is dict:
        return parsed
    if parsed is None:
        read.blank += 1
    elif parsed == "torn":
        read.torn += 1
    else:
        read.non_object += 1
    return None


def read_stream(path: str | Path) -> StreamRead:
    """Read the stream a path stands for: an events file or a run directory.

    Raises EvalkitError with one sentence when there is no stream there.
    """
    target = Path(path)
    events = resolve_events(target)
    if events is None:
        if not target.exists():
            raise EvalkitError(f"no stream: {target} does not exist")
        raise EvalkitError(no_stream(target))
    return read_events_file(events)


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a stream, in order (skipped lines silently left out)."""
    yield from read_stream(path).records
