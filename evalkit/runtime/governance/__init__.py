"""Governance: what a mission may do, who decides what is gated, and the record of it.

- ``profiles`` — the five capability profiles as scope sets, grants, refusals.
- ``skills`` — ``SKILL.md`` manifests: ``load_manifest``, ``compose``, the closed set.
- ``mcpscopes`` — an operator's declared MCP server scopes (``--mcp-scopes``, ``mcp_scopes:``).
- ``approvals`` — durable approval requests (``ApprovalStore``).
- ``audit`` — the per-run JSONL audit log (``AuditLog``).
- ``governor`` — ``Governor``: judges and carries out every call of one run.

See docs/GOVERNANCE.md for the user's view.
"""

from __future__ import annotations

from evalkit.runtime.governance.approvals import ApprovalStore, approvals_root
from evalkit.runtime.governance.audit import AuditLog, audit_root
from evalkit.runtime.governance.governor import Gate, Governor, Verdict
from evalkit.runtime.governance.profiles import (
    DEFAULT_PROFILE,
    KNOWN_SCOPES,
    PROFILE_SCOPES,
    lowest_profile,
    refusal,
)
from evalkit.runtime.governance.skills import Manifest, compose, load_all, load_manifest

__all__ = [
    "DEFAULT_PROFILE",
    "KNOWN_SCOPES",
    "PROFILE_SCOPES",
    "ApprovalStore",
    "AuditLog",
    "Gate",
    "Governor",
    "Manifest",
    "Verdict",
    "approvals_root",
    "audit_root",
    "compose",
    "load_all",
    "load_manifest",
    "lowest_profile",
    "refusal",
]
