"""The sidecar's run: every governed call of a foreign framework as a mission stream.

The ledger is the system of record for what may run and what ran; this is the
account ``evalkit score`` grades, written with the run store's own writer (one
``os.write`` and an fsync per line, a hash chain and an Ed25519 seal at close),
so a LangGraph agent governed through the sidecar is graded like a mission of
the built-in runtime.

How the calls map onto the contract (``evalkit.contract``):

* the gate starting is ``mission_started`` (the tools the policy holds are its
  ``gated``); ``shutdown`` is ``answer`` (when the client gave one) and
  ``mission_finished``: ``answered`` with an answer, ``awaiting_approval`` when a
  hold is still standing, else ``incomplete``;
* a ``govern`` opens a ``step_started`` — one per call, or one per distinct
  ``step`` the client names;
* a held call is ``gate_requested`` (with its approval id and digest);
* a call that reached an end is a ``tool_call`` and its ``tool_result`` together,
  written when the end is known (a refused call is a failing result that says
  why, as the built-in runtime records a denial);
* every step of the arbitration is a ``governance`` record: what happened
  (``GOVERNANCE_WHAT``), the key, the decision's phase, kind, digest and policy hash.

Records always carry the index of the latest step, so concurrent calls still
make a stream whose every record lies inside its step.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evalkit.contract import SCHEMA_VERSION
from evalkit.store.emitter import Emitter
from evalkit.store.runstore import RunStore, RunWriter

NO_ANSWER = "the gate closed without an answer"
#: ``meta.json``'s ``source``: which writer made the run.
SOURCE = "evalkit gate serve"


class Recording:
    """One run of the sidecar; thread-safe. ``root=None`` records nothing."""

    def __init__(self, root: Path | None, *, objective: str, gated: Iterable[str],
                 policy_hash: str, signer: Any = None, meta: Mapping[str, Any] | None = None
                 ) -> None:
        self._lock = threading.RLock()
        self._writer: RunWriter | None = None
        if root is not None:
            from evalkit.gate.certificates import close_certified
            from evalkit.store.orphans import close_orphans

            store = RunStore(Path(root), signer=signer)
            # A gate killed mid-run gets its last word, as missions do.
            close_orphans(store, close=close_certified)
            self._writer = store.create({"source": SOURCE, "objective": objective,
                                         "policy_hash": policy_hash, **dict(meta or {})})
            self._writer.record_catalogue([])
        self.run_id = self._writer.run_id if self._writer is not None else None
        self.path = self._writer.path if self._writer is not None else None
        self._emitter = Emitter(None, self._writer)
        self._catalogue: list[dict[str, Any]] = []
        self._index: int | None = None
        self._steps = 0
        self._client_step: int | None = None
        self._ordinal = 0
        self._closed = False
        self._fresh_catalogue = False
        self._emit({"event": "mission_started", "schema_version": SCHEMA_VERSION,
                    "objective": objective, "catalogue": [], "gated": sorted(gated),
                    "max_steps": 0, "history": 0, "sandbox": "none", "audit_ref": None,
                    "run_id": self.run_id})

    # -- what happened ---------------------------------------------------------------------

    def register(self, tool: str, description: str) -> None:
        """A tool the client can run: the catalogue grows (seen on the next step)."""
        with self._lock:
            if any(t["name"] == tool for t in self._catalogue):
                return
            self._catalogue.append({"name": tool, "description": description,
                                    "parameters": {}})
            if self._writer is not None and not self._closed:
                self._writer.record_catalogue(list(self._catalogue))
            self._fresh_catalogue = True

    def step(self, client_step: int | None) -> int:
        """The step a govern belongs to: a new one, unless the client names its current step."""
        with self._lock:
            if self._index is not None and client_step is not None \
                    and client_step == self._client_step:
                return self._index
            return self._open(client_step)

    def _open(self, client_step: int | None) -> int:
        index = self._steps
        self._steps += 1
        self._index, self._client_step, self._ordinal = index, client_step, 0
        record: dict[str, Any] = {"event": "step_started", "index": index}
        if self._fresh_catalogue:
            record["catalogue"] = [t["name"] for t in self._catalogue]
            self._fresh_catalogue = False
        self._emit(record)
        return index

    def governance(self, what: str, *, key: str | None, tool: str | None, **fields: Any
                   ) -> None:
        """One ``governance`` record (``fields`` are its optional ones; None ones dropped)."""
        with self._lock:
            record = {"event": "governance", "index": self._current(), "key": key,
                      "what": what, "tool": tool}
            record.update({k: v for k, v in fields.items() if v is not None})
            self._emit(record)

    def held(self, *, tool: str, arguments: Mapping[str, Any], reason: str,
             approval_id: str, digest: str) -> None:
        with self._lock:
            self._emit({"event": "gate_requested", "index": self._current(), "tool": tool,
                        "arguments": dict(arguments), "reason": reason,
                        "approval_id": approval_id, "digest": digest})

    def call(self, *, tool: str, arguments: Mapping[str, Any], ok: bool, output: Any,
             error: str | None) -> None:
        """A call that reached its end: ``tool_call`` and ``tool_result`` in one step."""
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        with self._lock:
            index = self._current()
            ordinal = self._ordinal
            self._ordinal += 1
            call = {"call": ordinal} if ordinal else {}
            self._emit({"event": "tool_call", "index": index, "tool": tool,
                        "arguments": dict(arguments), **call})
            result = {"ok": ok, "exit_code": None, "output": text if ok else "",
                      "error": error}
            if self._writer is not None and not self._closed:
                self._writer.record_tool_call(tool, dict(arguments), result)
            handle = f"g{index}.{ordinal}"
            self._emit({"event": "tool_result", "index": index, "tool": tool,
                        "arguments": dict(arguments), **result, "handle": handle,
                        "truncated": False, **call})

    def close(self, *, answer: str | None, holding: bool) -> str:
        """``answer`` and ``mission_finished``, then close and seal; returns the outcome."""
        with self._lock:
            if self._closed:
                return "incomplete"
            if answer is not None:
                outcome, reason = "answered", None
                self._emit({"event": "answer", "text": answer, "outcome": outcome})
            elif holding:
                outcome, reason = "awaiting_approval", None
            else:
                outcome, reason = "incomplete", NO_ANSWER
            finished: dict[str, Any] = {"event": "mission_finished", "outcome": outcome,
                                        "steps": self._steps, "max_steps": 0}
            if reason is not None:
                finished["reason"] = reason
            self._emit(finished)
            self._closed = True
            if self._writer is not None:
                from evalkit.gate.certificates import close_certified

                try:
                    self._writer.update_meta(outcome=outcome, reason=reason, steps=self._steps)
                finally:
                    close_certified(self._writer)  # certificates listed by the seal
            return outcome

    # -- inside --------------------------------------------------------------------------------

    def _current(self) -> int:
        return self._index if self._index is not None else self._open(None)

    def _emit(self, record: dict[str, Any]) -> None:
        if not self._closed:
            self._emitter.emit(record)
