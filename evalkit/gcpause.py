"""Pausing Python's cycle collector while bulk work builds many objects.

Loading a suite and scoring its runs allocate a few containers per mission
and free none of them until the end: the collector's worst case, each full
pass walking everything built so far (reading 10k kept summaries took 1.2 s
with it, 0.3 s without). Nothing built there forms cycles worth collecting.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block; nested uses leave it to the outermost.

    On the way out what the block built is frozen (moved out of the
    collector's sight) before the collector resumes: re-enabled as is, its
    first pass would walk all of it, most of a second at 100k missions.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
