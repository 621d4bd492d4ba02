"""The one exception type for problems a user can fix.

Library code raises ``EvalkitError`` with a message that names the problem and,
where it can, the fix; the CLI prints that message alone and exits with the
error's ``exit_code``. Anything else escaping is a bug in evalkit, never the
user's input.
"""

from __future__ import annotations


class EvalkitError(Exception):
    """A user-fixable problem, carried as one clear message."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class RecordingFailed(EvalkitError):
    """The run store could not take a write: a full disk, a quota, the file size limit,
    an I/O error. The surroundings' fault, never evalkit's (exit 3) nor the agent's: a
    mission ends with it as its reason where the stream can still say so (and
    ``evalkit mission`` exits 5); elsewhere it is one sentence and exit 2."""
