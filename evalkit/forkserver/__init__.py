"""A fork server: missions of the built-in runtime, and their stub MCP servers, forked
from one interpreter that has already imported what they import.

``run``, ``measure`` and ``record-corpus`` start one (``client.serving``) for as long as
they execute missions; each mission is still a process of its own speaking the stream,
and the stub plane still an MCP server over stdio, reached through a relay the MCP
client spawns. Nothing else ever talks to it, and outside ``serving`` every spawn is an
ordinary one. ``EVALKIT_FORKSERVER=off`` spawns every mission the ordinary way.
"""
