"""A deterministic MCP tool server for suites and tests: ``python -m evalkit.planes.stub``.

The tools live in ``server``, the fixed data they serve in ``data``. This
package imports neither, so naming it costs nothing until it runs.
"""
