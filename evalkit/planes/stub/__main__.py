"""``python -m evalkit.planes.stub``: serve the stub MCP server on stdin/stdout."""

from __future__ import annotations

from evalkit.planes.stub.server import main

if __name__ == "__main__":
    main()
