"""Where an output file may go: only where writing it loses nothing.

``-o``, ``--html`` and ``--junit`` take any path, and a slip (``-o
runs/x/events.jsonl``) would replace a recorded stream or a report just read, with
no way back. So an output is written only where there is nothing yet, an empty
file, or a file evalkit wrote before (its generator marker near the start):
re-running over the last output is the normal case and stays quiet. One rule for
every kind of output; each names its own marker and words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalkit.errors import EvalkitError


@dataclass(frozen=True)
class Output:
    """A kind of file evalkit writes and may write again."""

    #: How a sentence names it ("the HTML", "the JUnit file").
    what: str
    #: A file name to suggest when given a folder.
    example: str
    #: Bytes evalkit puts near the start of every such file.
    marker: bytes
    #: How far from the start the marker is looked for.
    within: int
    #: Why a file without the marker is refused (after "refusing to write … over PATH: ").
    not_ours: str

    def check_target(self, path: Path) -> None:
        """Refuse ``path`` (one ``EvalkitError`` sentence) unless writing there loses nothing."""
        try:
            if not path.exists():
                return
            if path.is_dir():
                noun = self.what.removeprefix("the ")
                raise EvalkitError(f"{path} is a folder; give the {noun}'s own name, "
                                   f"such as {path / self.example}")
            if not path.is_file():
                raise EvalkitError(f"refusing to write {self.what} over {path}: "
                                   "it is not a regular file")
            with open(path, "rb") as existing:
                head = existing.read(self.within)
        except OSError as exc:
            raise EvalkitError(f"cannot check what {path} holds: {exc.strerror or exc}") from None
        if head and self.marker not in head:
            raise EvalkitError(f"refusing to write {self.what} over {path}: {self.not_ours}, "
                               "and it would be lost; give another file name")


__all__ = ["Output"]
