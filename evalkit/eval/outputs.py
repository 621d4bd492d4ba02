"""An agent's three outputs, drained from pipes into its run folder.

The event stream is written as it comes: it is the recording. stdout and
stderr are prose, and are written down already scrubbed. Captured straight
to files and scrubbed once the mission ended, the raw text would sit in the
run folder for the whole mission, and for good if the harness were killed or
the disk filled before the scrub. Read through a pipe instead, each line is
redacted before it is written, so a credential the agent prints never reaches
the disk.

Every credential shape the redactor knows but one lies within one line, so
scrubbing line by line finds what scrubbing the whole text would; a line is
held until its newline (or the end of the stream), however long, as the whole
text was before. The exception is a PEM private key: from its BEGIN line until
the block is over, lines are held and scrubbed together (up to ``BLOCK_HOLD``
bytes: a "key" longer than that is none). A secret value that itself holds a
line break (a PEM key in an environment variable) could straddle two writes,
so while the redactor knows one, the rest of the stream is held and scrubbed
at its end, in memory.

Bytes are kept as they came: a line is decoded with ``surrogateescape`` and
encoded back the same way, so output that is not UTF-8, or has nothing to
redact, is written byte for byte.

One thread reads all three pipes, and the harness can stop it: a process the
agent left behind outside its process group may hold a pipe open for ever,
and a thread blocked in ``read`` cannot be woken by closing the descriptor.
"""

from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable, Mapping
from typing import BinaryIO, Protocol

from evalkit.redact import Redactor

#: How much of a pipe is read at a time.
CHUNK = 1 << 16

#: How often a waiting drain looks whether it was told to stop (seconds).
POLL_S = 0.05

#: Reads a stopped drain still makes while the pipes hold data.
STOP_ROUNDS = 64

#: The most a private-key block is held for before it is written (scrubbed) anyway.
BLOCK_HOLD = 1 << 20


class Sink(Protocol):
    def feed(self, chunk: bytes) -> None: ...
    def close(self) -> None: ...


class Verbatim:
    """Bytes written as they come, flushed: what the agent wrote is on disk even if
    the harness dies."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file

    def feed(self, chunk: bytes) -> None:
        self.file.write(chunk)
        self.file.flush()

    def close(self) -> None:
        self.file.flush()


class Tapped:
    """A sink that also hands each whole line to ``on_line`` as it lands: how a harness
    reacts to what an agent writes while it runs (``evalkit conform`` answers a standing
    gate, or sends SIGTERM, at the record that calls for it)."""

    def __init__(self, inner: Sink, on_line: Callable[[bytes], None]) -> None:
        self.inner = inner
        self.on_line = on_line
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        self.inner.feed(chunk)
        self._pending += chunk
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            self.on_line(line)

    def close(self) -> None:
        self.inner.close()
        if self._pending:
            self.on_line(self._pending)
            self._pending = b""


class Scrubbed:
    """Bytes taken in any pieces, written a whole line at a time, scrubbed and flushed."""

    def __init__(self, file: BinaryIO, redactor: Redactor) -> None:
        self.file = file
        self.redactor = redactor
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        self._pending += chunk
        if end < 0 or self.redactor.spans_lines():
            return
        cut = len(self._pending) - (len(chunk) - end - 1)
        lines = bytes(self._pending[:cut])
        if b"PRIVATE KEY" in lines and len(lines) <= BLOCK_HOLD and self.redactor.must_wait(
                lines.decode("utf-8", "surrogateescape")):
            return
        del self._pending[:cut]
        self._write(lines)

    def close(self) -> None:
        """The stream ended: write what is held."""
        if self._pending:
            lines = bytes(self._pending)
            self._pending.clear()
            self._write(lines)

    def _write(self, lines: bytes) -> None:
        text = lines.decode("utf-8", "surrogateescape")
        clean = self.redactor.redact(text)
        self.file.write(lines if clean == text else clean.encode("utf-8", "surrogateescape"))
        self.file.flush()


class Drain:
    """Reads pipes into sinks on a thread of its own until each pipe ends or ``stop``."""

    def __init__(self, sinks: Mapping[int, Sink]) -> None:
        self.sinks = dict(sinks)
        #: The first write that failed (a full disk); what that pipe brought after it is lost.
        self.failure: OSError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalkit-drain", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` for every pipe to end; whether the drain is done."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop listening: take what is in the pipes now, write it down, and end."""
        self._stop.set()
        self._thread.join()

    def abandon(self) -> None:
        """The drain never ran (the agent never started): close the pipes and the sinks."""
        self._close()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            for fd in self.sinks:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            left = STOP_ROUNDS
            while selector.get_map() and left:
                stopping = self._stop.is_set()
                ready = selector.select(0 if stopping else POLL_S)
                for key, _ in ready:
                    if not self._read(key.fd):
                        selector.unregister(key.fd)
                if stopping:  # what is in the pipes now, not what a straggler writes for ever
                    left = left - 1 if ready else 0
        finally:
            selector.close()
            self._close()

    def _close(self) -> None:
        for fd, sink in self.sinks.items():
            _close_quietly(fd)
            try:
                sink.close()
            except OSError as exc:  # a full disk: the other sinks still get theirs
                self.failure = self.failure or exc

    def _read(self, fd: int) -> bool:
        """Read what is there into the fd's sink; False when the pipe ended."""
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        try:
            self.sinks[fd].feed(chunk)
        except OSError as exc:  # a full disk: keep the pipe flowing, so the agent goes on
            self.failure = self.failure or exc
            self.sinks[fd] = _Discard()
        return True


class _Discard:
    """Where a pipe's bytes go once its file could not be written."""

    def feed(self, chunk: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


__all__ = ["BLOCK_HOLD", "CHUNK", "Drain", "Scrubbed", "Sink", "Verbatim"]
