"""``python -m evalkit.forkserver ADDRESS``: the fork server (``server.main``)."""

from __future__ import annotations

import sys

from evalkit.forkserver.server import main

if __name__ == "__main__":
    main(sys.argv)
