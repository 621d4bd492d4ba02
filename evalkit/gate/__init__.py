"""Governance for any framework: the action ledger, policy as data, the gate sidecar,
leased approval checkpoints and certificates that recompute.

Layering: ``gate`` sits between the recordings and the runtime. The built-in runtime
and the sidecar both use it; it never imports the runtime, the scorer or the CLI.
See docs/GOVERNANCE.md.
"""

from typing import Any

#: Names importable from ``evalkit.gate``, each from its module on first use.
_PUBLIC = {"Client": "evalkit.gate.client", "GovernResult": "evalkit.gate.client",
           "GateError": "evalkit.gate.client"}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'evalkit.gate' has no attribute {name!r}")
