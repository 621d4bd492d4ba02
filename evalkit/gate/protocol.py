"""The gate sidecar's NDJSON-RPC protocol, version 1, as data.

One JSON object per line, UTF-8, over the sidecar's stdin (client to gate) and
stdout (gate to client). This module is the one statement of the wire: the
server and the client parse and build every message with it, and
``python -m evalkit.gate.protocol_doc FILE`` renders it into GOVERNANCE.md. It is
standard library only and imports nothing else of evalkit's, so a client in
another process (or language) can vendor this one file.

Two kinds of identifiers, never mixed:

* ``id`` — the **request id**, chosen by the client for each request it sends
  (``register_tool``, ``govern``, ``resume``, ``shutdown``). Every reply to that
  request carries the same ``id``. A ``run_tool`` the gate sends while serving a
  ``govern`` carries that govern's ``id`` too, and so does the client's
  ``tool_result``/``tool_error`` answering it.
* ``correlation_id`` — the **leg id** of one remoted execution, chosen by the
  gate (``c-`` and digits). It appears only on ``run_tool`` and on the
  ``tool_result``/``tool_error`` that answers it. An answer whose
  ``correlation_id`` names a leg of another request id is refused
  (``mixed_ids``), so a reply can never complete somebody else's call.

Inbound lines are parsed strictly (:func:`parse_inbound`): a line longer than
``MAX_LINE_BYTES``, text that is not JSON, NaN or Infinity, a key written twice,
an unknown message type, an unknown key, a missing required key, a wrong type
or a value out of range is refused with one ``error`` message, and the gate
goes on serving the next line.

Compatibility: adding a message type or an optional field is a minor change;
anything else bumps ``PROTOCOL_VERSION``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

PROTOCOL_VERSION = 1

#: Longest inbound line, in bytes, newline excluded. Longer lines are refused unread.
MAX_LINE_BYTES = 1 << 20
#: The most any request may ask the gate to wait (``wait_ms``), in milliseconds.
MAX_WAIT_MS = 60_000
#: The wait a request gets when it names none.
DEFAULT_WAIT_MS = 0
#: Longest request id, idempotency key, tool name and correlation id, in characters.
MAX_ID_CHARS = 200

#: ``govern_result.phase``: where a governed call ended up.
PHASES: dict[str, str] = {
    "completed": "the tool body ran after arbitration and returned; `result` holds what it "
                 "returned",
    "pending_approval": "the call is held for a person; `deadline` says until when a signed "
                        "approval can release it (send `resume`)",
    "rejected": "the call was not allowed and the body never ran",
    "failed": "the body was started and did not return a result: it raised, or its outcome "
              "is unknown and it will not be run again",
}

#: ``govern_result.kind``: why, one taxonomy. Each kind belongs to exactly one phase. The
#: policy's own kinds (``evalkit.gate.policy.KINDS``) are here under the phase their
#: outcome leads to (allowed -> completed, denied -> rejected, held -> pending_approval);
#: a test holds the two to each other.
KINDS: dict[str, tuple[str, str]] = {
    "allowed": ("completed", "the policy allowed the call and the body ran"),
    "approved": ("completed", "a held call was released by a signed approval bound to its "
                              "digest, and the body ran"),
    "requires_approval": ("pending_approval", "the tool's contract requires a person's "
                                              "approval for every call"),
    "risk_requires_approval": ("pending_approval", "the tool's risk is above what the policy "
                                                   "allows without approval"),
    "irreversible": ("pending_approval", "the tool cannot be undone and is risky enough to "
                                         "be held"),
    "unknown_tool": ("rejected", "the policy does not name the tool: it fails closed"),
    "bad_arguments": ("rejected", "the arguments are not a JSON object"),
    "scope_missing": ("rejected", "the caller lacks a scope the tool's contract needs"),
    "refused": ("rejected", "a person's signed decision said no"),
    "expired": ("rejected", "the hold's deadline (fixed when it was created) passed without "
                            "a valid approval; a later approval is recorded and never "
                            "releases it"),
    "conflict": ("rejected", "the idempotency key was used before for another tool, other "
                             "arguments or another policy (another digest)"),
    "tool_error": ("failed", "the client reported that the body raised (`tool_error`)"),
    "outcome_unknown": ("failed", "the body was handed to the client (`run_tool`) and no "
                                  "answer came within the bound, or the gate stopped "
                                  "meanwhile; it is never run again for this key"),
    "in_flight": ("failed", "another request is executing this key and did not finish "
                            "within this request's wait; ask again with `resume`"),
}

#: ``error.code``: why a line was refused. The gate keeps serving after each.
ERRORS: dict[str, str] = {
    "line_too_long": f"the line is longer than {MAX_LINE_BYTES} bytes; nothing of it was read",
    "not_json": "the line is not one JSON value (NaN, Infinity and a key written twice "
                "included)",
    "not_an_object": "the line is JSON but not an object",
    "unknown_type": "`type` names no inbound message",
    "unknown_key": "the message has a key its type does not define",
    "missing_key": "a required key is absent",
    "wrong_type": "a value has another JSON type than its key allows",
    "out_of_range": "a value is of the right type but outside its bounds (empty, too long, "
                    "a wait past the maximum)",
    "duplicate_id": "the request id is already in use by a request still being served",
    "unknown_action": "`resume` names an idempotency key the ledger has never seen",
    "unknown_correlation": "`tool_result`/`tool_error` answers no leg the gate is waiting on "
                           "(never sent, already answered, or timed out)",
    "mixed_ids": "the `correlation_id` belongs to a leg of another request id",
    "shutting_down": "the gate received `shutdown` and takes no new request",
    "internal": "the gate failed serving the request; the message says how",
}


def _field(types: tuple[str, ...], required: bool, meaning: str, **bounds: Any
           ) -> dict[str, Any]:
    return {"types": types, "required": required, "meaning": meaning, **bounds}


_ID = _field(("string",), True, "the request id (client-chosen, unique among its requests "
                                "in flight)", max_chars=MAX_ID_CHARS)
_REPLY_ID = _field(("string",), True, "the id of the request this answers")
_CORRELATION = _field(("string",), True, "the leg id of the `run_tool` this answers",
                      max_chars=MAX_ID_CHARS)
_KEY = _field(("string",), True, "the action's idempotency key: one execution per key, "
                                 "ever", max_chars=MAX_ID_CHARS)
_WAIT = _field(("integer",), False, f"most milliseconds to wait (0 to {MAX_WAIT_MS}; "
                                    f"default {DEFAULT_WAIT_MS})", minimum=0,
               maximum=MAX_WAIT_MS)

#: Messages the client sends, by ``type``: each field's JSON types, whether required,
#: what it means, and its bounds. ``type`` itself is required on every message.
INBOUND: dict[str, dict[str, Any]] = {
    "register_tool": {
        "meaning": "the client can run this tool's body when the gate asks (`run_tool`); "
                   "registering grants nothing: the policy alone decides",
        "fields": {
            "id": _ID,
            "tool": _field(("string",), True, "the tool's name", max_chars=MAX_ID_CHARS),
            "description": _field(("string",), False, "what it does, for the recording"),
        },
    },
    "govern": {
        "meaning": "propose one call: the gate decides, and only if allowed asks the "
                   "client to run it (`run_tool`) before answering `govern_result`",
        "fields": {
            "id": _ID,
            "idempotency_key": _KEY,
            "tool": _field(("string",), True, "the tool to call", max_chars=MAX_ID_CHARS),
            "arguments": _field(("object",), True, "its arguments"),
            "run_id": _field(("string",), False, "the caller's own run id, kept with the "
                                                 "action", max_chars=MAX_ID_CHARS),
            "step": _field(("integer",), False, "the caller's step number; calls of one "
                                                "step share a `step_started` in the "
                                                "recording", minimum=0),
            "wait_ms": _WAIT,
        },
    },
    "resume": {
        "meaning": "ask again about a key: a held call is released when a signed approval "
                   "bound to its digest is found (the gate looks until `wait_ms` runs out "
                   "or the deadline passes), else its current phase is answered",
        "fields": {"id": _ID, "idempotency_key": _KEY, "wait_ms": _WAIT},
    },
    "tool_result": {
        "meaning": "the body of a `run_tool` returned this value",
        "fields": {
            "id": _REPLY_ID,
            "correlation_id": _CORRELATION,
            "output": _field(("string", "integer", "number", "boolean", "array", "object",
                              "null"), True, "what the body returned (any JSON value)"),
        },
    },
    "tool_error": {
        "meaning": "the body of a `run_tool` raised, or the client could not run it",
        "fields": {
            "id": _REPLY_ID,
            "correlation_id": _CORRELATION,
            "error": _field(("string",), True, "what went wrong, in one line"),
        },
    },
    "shutdown": {
        "meaning": "close the gate: the recording ends (with `answer` as the mission's "
                   "answer when given) and is sealed; the gate answers `closed` and exits",
        "fields": {
            "id": _ID,
            "answer": _field(("string",), False, "the agent's final answer, for the "
                                                 "recording's `answer` record"),
        },
    },
}

#: Messages the gate sends, by ``type`` (same shape as ``INBOUND``).
OUTBOUND: dict[str, dict[str, Any]] = {
    "ready": {
        "meaning": "the first line the gate writes: it serves this protocol version",
        "fields": {
            "id": _field(("null",), True, "always null: nobody asked"),
            "protocol_version": _field(("integer",), True, "`PROTOCOL_VERSION`"),
            "policy_hash": _field(("string",), True, "the hash of the policy deciding"),
            "run_id": _field(("string", "null"), True, "the recording's run id (null when "
                                                       "recording is off)"),
            "max_line_bytes": _field(("integer",), True, "`MAX_LINE_BYTES`"),
            "max_wait_ms": _field(("integer",), True, "`MAX_WAIT_MS`"),
        },
    },
    "registered": {
        "meaning": "answers `register_tool`",
        "fields": {
            "id": _REPLY_ID,
            "tool": _field(("string",), True, "the tool registered"),
            "in_policy": _field(("boolean",), True, "whether the policy has a contract for "
                                                    "it (without one every call is denied)"),
        },
    },
    "govern_result": {
        "meaning": "answers `govern` and `resume`",
        "fields": {
            "id": _REPLY_ID,
            "idempotency_key": _field(("string",), True, "the action's key"),
            "phase": _field(("string",), True, "one of `PHASES`"),
            "kind": _field(("string",), True, "one of `KINDS`, of that phase"),
            "reason": _field(("string",), True, "one sentence: why"),
            "digest": _field(("string", "null"), True, "what an approval must be bound to: "
                                                       "SHA-256 over the RFC 8785 JSON of "
                                                       "tool, arguments and policy hash"),
            "policy_hash": _field(("string",), True, "the policy that decided"),
            "replayed": _field(("boolean",), True, "true when this answer is the recorded "
                                                   "outcome of an earlier request with the "
                                                   "same key (nothing ran now)"),
            "result": _field(("string", "integer", "number", "boolean", "array", "object",
                              "null"), False, "phase completed: what the body returned"),
            "error": _field(("string",), False, "phase failed: what went wrong"),
            "deadline": _field(("string",), False, "phase pending_approval (and expired): "
                                                   "ISO 8601 UTC, fixed when the hold was "
                                                   "created"),
        },
    },
    "run_tool": {
        "meaning": "remoted execute: run this tool's body now and answer `tool_result` or "
                   "`tool_error`; sent only after arbitration allowed the call, once per key",
        "fields": {
            "id": _field(("string",), True, "the id of the `govern` (or `resume`) being "
                                            "served"),
            "correlation_id": _field(("string",), True, "this leg's id, to echo"),
            "idempotency_key": _field(("string",), True, "the action's key"),
            "tool": _field(("string",), True, "the tool whose body to run"),
            "arguments": _field(("object",), True, "its arguments, exactly as decided"),
        },
    },
    "error": {
        "meaning": "a line was refused; the gate keeps serving",
        "fields": {
            "id": _field(("string", "null"), True, "the refused line's request id when it "
                                                   "could be read, else null"),
            "code": _field(("string",), True, "one of `ERRORS`"),
            "message": _field(("string",), True, "one sentence"),
        },
    },
    "closed": {
        "meaning": "answers `shutdown`: the recording is closed and sealed; the gate exits",
        "fields": {
            "id": _REPLY_ID,
            "run_id": _field(("string", "null"), True, "the sealed run, or null"),
            "outcome": _field(("string",), True, "the recording's outcome word"),
        },
    },
}


class ProtocolError(ValueError):
    """An inbound line refused: ``code`` (one of ``ERRORS``), a sentence, and the request id
    when it could be read (for the ``error`` reply)."""

    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        assert code in ERRORS, code
        self.code = code
        self.message = message
        self.request_id = request_id

    def reply(self) -> dict[str, Any]:
        """The ``error`` message that answers this refusal."""
        return {"type": "error", "id": self.request_id, "code": self.code,
                "message": self.message}



def json_type(value: Any) -> str:
    """The JSON type name of a decoded value. (``evalkit.contract`` has the same one; this
    file imports nothing of evalkit's, so it can be vendored alone.)"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "other"


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is written twice")
        found[key] = value
    return found


def _strict_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: no double holds it
        raise ValueError(f"{text} is out of a number's range")
    return value


def loads(line: bytes | str) -> Any:
    """One strict JSON value: NaN, Infinity, a number past a double's range and a key
    written twice are refused (ValueError)."""
    text = line.decode("utf-8") if isinstance(line, bytes) else line
    return json.loads(text, parse_constant=_no_constant, parse_float=_strict_float,
                      object_pairs_hook=_unique_keys)


def dumps(message: Mapping[str, Any]) -> bytes:
    """One outbound line: compact JSON, never NaN, newline-terminated."""
    return json.dumps(message, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"


def parse_inbound(line: bytes | str) -> dict[str, Any]:
    """A checked inbound message, or :class:`ProtocolError` saying what is wrong."""
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    raw = raw.rstrip(b"\r\n")
    if len(raw) > MAX_LINE_BYTES:
        raise ProtocolError("line_too_long", f"the line has {len(raw)} bytes, more than the "
                                             f"{MAX_LINE_BYTES} allowed")
    try:
        value = loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("not_json", f"the line is not JSON: {exc}") from None
    if _lone_surrogate(value):
        raise ProtocolError("not_json", "the line is not JSON text: it escapes a lone "
                                        "surrogate (\\ud800-\\udfff), which is no Unicode "
                                        "character and could not be echoed as UTF-8")
    if not isinstance(value, dict):
        raise ProtocolError("not_an_object", f"the line is a JSON {json_type(value)}, not "
                                             "an object")
    request_id = value.get("id") if isinstance(value.get("id"), str) else None
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in INBOUND:
        raise ProtocolError("unknown_type", f"type {kind!r} is not one of "
                                            f"{', '.join(INBOUND)}", request_id)
    check(kind, value, INBOUND[kind], request_id)
    return value


def _lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (a key or a value) is not UTF-8 encodable."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check(kind: str, value: Mapping[str, Any], schema: Mapping[str, Any],
          request_id: str | None = None) -> None:
    """Hold one message to its schema (used for both directions)."""
    fields = schema["fields"]
    for key in value:
        if key != "type" and key not in fields:
            raise ProtocolError("unknown_key", f"{kind} has no key {key!r}", request_id)
    for name, spec in fields.items():
        if name not in value:
            if spec["required"]:
                raise ProtocolError("missing_key", f"{kind} needs {name!r}", request_id)
            continue
        got = value[name]
        have = json_type(got)
        if have not in spec["types"] and not (have == "integer" and "number" in spec["types"]):
            raise ProtocolError("wrong_type", f"{kind}.{name} must be "
                                              f"{' or '.join(spec['types'])}, not {have}",
                                request_id)
        if isinstance(got, str):
            if spec.get("max_chars") is not None and not 0 < len(got) <= spec["max_chars"]:
                raise ProtocolError("out_of_range", f"{kind}.{name} must have 1 to "
                                                    f"{spec['max_chars']} characters",
                                    request_id)
        elif have == "integer":
            low, high = spec.get("minimum"), spec.get("maximum")
            if (low is not None and got < low) or (high is not None and got > high):
                raise ProtocolError("out_of_range", f"{kind}.{name} must be from {low} to "
                                                    f"{high if high is not None else 'up'}, "
                                                    f"not {got}", request_id)


def outbound(message_type: str, /, **fields: Any) -> dict[str, Any]:
    """Build one outbound message, held to its schema (a bug here raises at once)."""
    message = {"type": message_type, **fields}
    check(message_type, message, OUTBOUND[message_type])
    if message_type == "govern_result":
        phase, reason_kind = message["phase"], message["kind"]
        assert phase in PHASES and KINDS.get(reason_kind, ("",))[0] == phase, (phase,
                                                                             reason_kind)
    return message


def as_dict() -> dict[str, Any]:
    """The whole protocol as one JSON-ready mapping."""
    def plain(schemas: Mapping[str, Any]) -> dict[str, Any]:
        return {k: {"meaning": v["meaning"],
                    "fields": {f: {**s, "types": list(s["types"])}
                               for f, s in v["fields"].items()}}
                for k, v in schemas.items()}

    return {"protocol_version": PROTOCOL_VERSION, "max_line_bytes": MAX_LINE_BYTES,
            "max_wait_ms": MAX_WAIT_MS, "phases": dict(PHASES),
            "kinds": {k: {"phase": p, "meaning": m} for k, (p, m) in KINDS.items()},
            "errors": dict(ERRORS), "inbound": plain(INBOUND), "outbound": plain(OUTBOUND)}
