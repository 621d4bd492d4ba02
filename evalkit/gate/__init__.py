"""Governance for any framework: the action ledger, policy as data, the gate sidecar,
leased approval checkpoints and certificates that recompute.

Layering: ``gate`` sits between the recordings and the runtime. The built-in runtime
and the sidecar both use it; it never imports the runtime, the scorer or the CLI.
See docs/GOVERNANCE.md.
"""
