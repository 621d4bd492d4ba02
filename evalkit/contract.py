"""The mission stream, schema version 1, as data.

This file is the seam between whoever runs a mission and whoever reads it.
It is pure standard library and imports nothing else of evalkit's, so any
consumer can vendor this one file and hold the whole contract.

Compatibility: adding an event, an optional field, a CLI flag or an
environment variable is a minor change. Renaming or removing a field, making
an optional field required, or changing what a required field means is
breaking and bumps ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 1

#: Every event name, in the order a run tends to produce them.
EVENTS: tuple[str, ...] = (
    "mission_started",
    "step_started",
    "reply_rejected",
    "tool_call",
    "tool_result",
    "gate_requested",
    "governance",
    "answer_delta",
    "answer",
    "grounding",
    "mission_finished",
    "model_state",
)

#: Required fields per event (besides ``event`` itself).
FIELDS: dict[str, tuple[str, ...]] = {
    "mission_started": ("schema_version", "objective", "catalogue", "gated", "max_steps", "history"),
    "step_started": ("index",),
    "reply_rejected": ("index", "problem"),
    "tool_call": ("index", "tool", "arguments"),
    "tool_result": (
        "index", "tool", "arguments", "ok", "exit_code", "output", "error", "handle", "truncated",
    ),
    "gate_requested": ("index", "tool", "arguments", "reason"),
    "governance": ("index", "key", "what", "tool"),
    "answer_delta": ("index", "part", "text"),
    "answer": ("text", "outcome"),
    "grounding": (
        "ran", "grounded", "verified", "repairs", "repairing", "caveat",
        "unsupported", "silent", "uncited", "checks",
    ),
    "mission_finished": ("outcome", "steps", "max_steps"),
    "model_state": ("state", "provider", "model"),
}

#: Optional fields per event; read with a default when absent.
OPTIONAL: dict[str, tuple[str, ...]] = {
    "mission_started": ("sandbox", "profile", "audit_ref", "run_id", "protocol", "granted"),
    "step_started": (
        "plan", "compacted", "resumed", "injected", "catalogue", "review", "artifacts",
    ),
    "reply_rejected": ("tool", "usage"),
    "tool_call": ("usage", "call"),
    "tool_result": ("call",),
    "gate_requested": ("approval_id", "digest"),
    "governance": ("phase", "kind", "reason", "digest", "policy_hash", "deadline",
                   "request_id", "correlation_id", "approval_id", "detail"),
    "answer_delta": (),
    "answer": ("usage",),
    "grounding": (),
    "mission_finished": ("usage", "budget", "reason", "elapsed_s"),
    "model_state": ("index", "detail", "since_s", "retry_after_s"),
}

#: Optional on every event.
COMMON_OPTIONAL: tuple[str, ...] = ("branch",)

#: The closed set of outcome words.
OUTCOMES: tuple[str, ...] = (
    "answered",
    "answered_with_caveat",
    "awaiting_approval",
    "budget_exhausted",
    "incomplete",
)

OUTCOME_MEANINGS: dict[str, str] = {
    "answered": "the mission produced an answer",
    "answered_with_caveat": "an answer was produced and a caveat was appended to its text",
    "awaiting_approval": "the model reached a gated tool; nothing was called",
    "budget_exhausted": "an operator-set bound ran out; `budget` says which",
    "incomplete": "the default word: crash, cancellation, replay ran off its recording, orphan closed",
}

#: ``evalkit import otel``: how an OpenTelemetry GenAI trace becomes a mission stream, said
#: here so the importer, the exporter and CONTRACT.md hold one account of what a trace can
#: carry. What no span says is null (or the field is absent), never guessed.
OTEL_CARRIES: dict[str, str] = {
    "run": "one run per gen_ai.operation.name=invoke_agent span (its descendants), else one "
           "per trace; filed under RUNS/<key>/, the key being --key, else evalkit.suite_key, "
           "else gen_ai.agent.name (runs sharing a key land side by side; score reads the "
           "first imported)",
    "objective": "evalkit.objective, else the first user text of the agent span's or the "
                 "first chat span's gen_ai.input.messages; empty when no span captured it",
    "steps": "one step per chat span, in start order, with its gen_ai.usage.input_tokens and "
             "output_tokens as prompt_tokens and completion_tokens (absent when not reported)",
    "tools": "execute_tool spans (gen_ai.tool.name, gen_ai.tool.call.arguments and .result, "
             "a span status of error as a failing result); without them, the tool_call parts "
             "of a chat span's gen_ai.output.messages and the tool_call_response parts that "
             "answer them in later input messages",
    "answer": "the agent span's gen_ai.output.messages text, else the text of the last chat "
              "reply that asked for no tool",
    "outcome": "evalkit.outcome and evalkit.reason when an evalkit export wrote them; else "
               "answered with an answer, else incomplete with the reason below",
    "model log": "model.jsonl keeps each chat span's captured messages, request and response "
                 "model and finish reasons; tools.jsonl each tool call",
    "grounding": "the evalkit.grounding attribute of the agent span, written by evalkit's "
                 "export; no convention carries it",
}
#: What a trace cannot carry: these are absent from an imported stream, so a check that
#: reads them fails as it would for any agent that did not say them.
OTEL_NOT_CARRIED: tuple[str, ...] = (
    "gate_requested and the approval an awaiting_approval run waited for (the outcome word "
    "alone rides evalkit.outcome)",
    "reply_rejected, model_state and answer_delta records",
    "the tool result's exit_code, handle and truncation (null, r<N> and false)",
    "capability profile, sandbox, grants and audit reference",
    "the wall-clock time of each record: envelopes carry the import's time, meta.json the "
    "trace's start and end",
)
#: ``mission_finished.reason`` of an imported trace that carried no answer.
OTEL_NO_ANSWER = "the trace carried no answer"

#: Values of ``mission_finished.reason`` with a fixed meaning (never outcomes).
REASONS: tuple[str, ...] = ("cancelled", "stuck")

#: Whose fault a failed model call is: every failure of the wire falls in one class, and
#: only the model's own faults are charged to the model.
WIRE_FAULTS: dict[str, str] = {
    "transport": "the wire failed: connection refused or dropped, a timeout, a stream cut "
                 "before its finish reason, a body that is not a chat completion (HTML, "
                 "non-JSON, JSON without choices, a malformed stream chunk), 5xx, 429. Retried "
                 "with backoff (model_state says so); when retries run out the run ends "
                 "incomplete with a reason beginning 'transport fault:' that names the "
                 "endpoint URL and what came back, and the scorer counts it as an "
                 "infrastructure failure, never against the model",
    "configuration": "the endpoint refused what it was asked: 400 on the request evalkit "
                     "built, 401, 403, 404 for the model or the route. Never retried: the run "
                     "ends incomplete with a reason beginning 'configuration fault:' naming "
                     "the URL and the model, and evalkit mission exits 4 with that sentence "
                     "as an Error: line",
    "model": "a complete reply that breaks the protocol (unparseable, no such tool, bad "
             "arguments): a reply_rejected record, charged to the model",
}

#: The order records come in. Stated here, checked once: by the scorer's fold
#: (``evalkit.eval.summary.out_of_order``), which counts a record out of order as one
#: that does not conform and quotes its line.
ORDER_RULES: dict[str, str] = {
    "first": "the first record is mission_started",
    "after_finished": "after a mission_finished comes only a new mission_started (two missions "
                      "appended to one file: the later one is read), a step_started carrying "
                      "resumed (a resume writes no mission_started), or the mission_finished of "
                      "a resume that ended before its first step",
    "new_mission": "a mission_started in the middle begins a new mission (the one before it was "
                   "cut off)",
    "steps_increase": "within a mission, step_started indexes increase, across its resumes too "
                      "(they restart only with a new mission_started)",
}
#: The order rules' sentences alone (``ORDER_RULES`` names each one by a stable id, which
#: ``evalkit conform`` reports it under).
ORDER: tuple[str, ...] = tuple(ORDER_RULES.values())

#: ``model_state.state`` values.
MODEL_STATES: tuple[str, ...] = ("cold", "queued", "loading", "loaded", "failed", "absent")

#: ``grounding.checks[].verdict`` values.
CHECK_VERDICTS: tuple[str, ...] = ("unconfigured", "nothing_considered", "supported", "unsupported")

#: Capability profiles, weakest first.
PROFILES: tuple[str, ...] = ("safe", "dev", "research", "ops", "god")

#: ``governance.what``: each step of a call's arbitration by the gate sidecar
#: (``evalkit gate serve``), recorded as it happens; ``key`` is the action's idempotency key.
GOVERNANCE_WHAT: dict[str, str] = {
    "received": "a govern or resume request arrived (request_id)",
    "decided": "the policy decided (phase, kind, reason, digest, policy_hash)",
    "held": "the call is held for a person until deadline (approval_id)",
    "approval_checked": "a resume looked for a signed decision (detail says what it found)",
    "late_approval": "a decision arrived after the deadline: recorded, never releases the call",
    "run_tool": "the body was handed to the client to run (correlation_id)",
    "result": "the call reached its end (phase, kind)",
    "replayed": "a retried request got the recorded outcome; nothing ran",
    "error": "a request was refused (kind is the protocol's error code)",
}

#: ``mission_started.sandbox`` values.
SANDBOXES: tuple[str, ...] = ("bwrap", "none")

#: Budget names carried in ``mission_finished.budget.which``.
BUDGETS: tuple[str, ...] = ("steps", "seconds", "tokens", "cost")


#: Which field each closed value set above governs: ``event.field``, ``[]`` for each item
#: of a list, ``.`` into an object.
VALUE_SETS: dict[str, tuple[str, ...]] = {
    "model_state.state": MODEL_STATES,
    "grounding.checks[].verdict": CHECK_VERDICTS,
    "mission_started.profile": PROFILES,
    "mission_started.sandbox": SANDBOXES,
    "mission_finished.budget.which": BUDGETS,
    "governance.what": tuple(GOVERNANCE_WHAT),
}


def _flag(flag: str, value: str | None, meaning: str, *, repeatable: bool = False,
          env: str | None = None, harness: bool = False) -> dict[str, Any]:
    return {
        "flag": flag,
        "value": value,
        "repeatable": repeatable,
        "env": env,
        "harness": harness,
        "meaning": meaning,
    }


#: The flags ``evalkit mission`` publishes. A program that spawns a mission may
#: rely on every one; ``harness: true`` marks the flags an eval harness sets
#: itself, which a suite's mission must therefore not set.
CLI_FLAGS: tuple[dict[str, Any], ...] = (
    _flag("--events", "SINK", "where the stream goes: -, fd:N or a path (append)",
          env="EVALKIT_EVENTS", harness=True),
    _flag("--control", "SOURCE", "NDJSON commands in: inject, cancel, cancel_step, gate_decision",
          harness=True),
    _flag("--provider", "NAME", "model backend: openai, scripted or replay (default: scripted "
          "with --script, else openai)", env="EVALKIT_PROVIDER"),
    _flag("--model", "NAME", "model name sent to the endpoint", env="EVALKIT_MODEL"),
    _flag("--api-base", "URL", "OpenAI-compatible base URL (ends in /v1)", env="EVALKIT_API_BASE"),
    _flag("--api-key", "KEY", "endpoint key; never recorded", env="EVALKIT_API_KEY"),
    _flag("--secret", "NAME", "an environment variable whose value is secret: never recorded "
          "(it must be set; tool processes still get it)", repeatable=True),
    _flag("--script", "FILE", "scripted backend: a YAML/JSON list of replies served in order"),
    _flag("--no-stream", None, "ask the endpoint for whole replies instead of a stream"),
    _flag("--protocol", "json|native", "how the model calls tools (json is the default)"),
    _flag("--mcp-stdio", "CMD", "an MCP tool server over stdio, namespaced mcp, mcp2, …",
          repeatable=True),
    _flag("--mcp-url", "URL", "an MCP tool server over streamable HTTP, namespaced like --mcp-stdio",
          repeatable=True),
    _flag("--mcp-start-timeout", "SECONDS", "most seconds an MCP server may take to answer "
          "'initialize' (default 30)"),
    _flag("--mcp-call-timeout", "SECONDS", "most seconds one MCP tool call may take (default "
          "60); running out is a failing tool result"),
    _flag("--mcp-env", "NAME[=VALUE]", "pass one environment variable to the MCP servers "
          "(its value here, or VALUE); they get only a few ordinary ones otherwise",
          repeatable=True),
    _flag("--mcp-scopes", "SERVER=SCOPE[,SCOPE]", "declare the scopes every tool of one MCP "
          "server (by namespace) needs, over its annotations (never *)", repeatable=True),
    _flag("--skill", "PATH", "a skill manifest (SKILL.md); repeatable, first is primary",
          repeatable=True),
    _flag("--profile", "NAME", "capability profile: safe, dev, research, ops, god",
          env="EVALKIT_PROFILE"),
    _flag("--grant", "SCOPE", "add one capability scope for this run (never *)", repeatable=True),
    _flag("--unsandboxed", None, "run tool subprocesses without bubblewrap", env="EVALKIT_SANDBOX"),
    _flag("--gate-tool", "NAME", "offer a tool but let only a person approve its call",
          repeatable=True),
    _flag("--approval", "ID", "admit the tool of one approved request, once"),
    _flag("--gate-wait", "SECONDS", "how long a standing gate waits for a control decision"),
    _flag("--mission-steps", "N", "step ceiling (0 = none)"),
    _flag("--mission-seconds", "S", "wall-clock ceiling in seconds, kept while a model or "
          "tool call is in flight"),
    _flag("--max-tokens", "N", "token ceiling over every model call of the run, supervisor "
          "reviews included: the run ends before a call whose estimated prompt would cross "
          "it, or after the reply that did"),
    _flag("--max-cost", "AMOUNT", "cost ceiling in the pricing file's currency, held like "
          "--max-tokens; needs --pricing"),
    _flag("--pricing", "FILE", "a pricing file (YAML): each model call's usage and the run's "
          "totals carry cost, null when the model has no price", env="EVALKIT_PRICING"),
    _flag("--request-timeout", "SECONDS", "most seconds one model call may take in all "
          "(default 300); running out is a transport fault, retried",
          env="EVALKIT_REQUEST_TIMEOUT"),
    _flag("--stream-idle-timeout", "SECONDS", "most seconds a streamed reply may stay silent "
          "(default 120); running out is a transport fault, retried",
          env="EVALKIT_STREAM_IDLE_TIMEOUT"),
    _flag("--no-supervisor", None, "switch off the stuck-loop supervisor"),
    _flag("--swarm", None, "staged decomposition: triage, plan, steps, synthesis"),
    _flag("--swarm-parallel", "N", "independent swarm steps run at once"),
    _flag("--cassette", "PATH", "record/replay raw HTTP exchanges of the openai backend"),
    _flag("--record-mode", "MODE", "cassette record mode: once, new_episodes, none, all"),
    _flag("--tools", "recorded|live", "on replay: serve recorded tool results or dispatch live"),
    _flag("--resume", "RUN", "continue an unfinished run", harness=True),
    _flag("--replay", "RUN", "re-run a finished recording with no model", harness=True),
)

#: Environment variables a mission reads.
ENV_VARS: dict[str, str] = {
    "EVALKIT_HOME": "the state folder (run store, audit, approvals, signing key); unset = "
                    "$XDG_STATE_HOME/evalkit or ~/.local/state/evalkit",
    "EVALKIT_RUNS": "run store root; none/off records nothing; unset = $EVALKIT_HOME/runs",
    "EVALKIT_EVENTS": "the event sink when --events is not given; evalkit run sets it to the "
                      "--events value it gives, so an agent recording with evalkit.record "
                      "writes there",
    "EVALKIT_PROVIDER": "model backend when --provider is not given",
    "EVALKIT_MODEL": "model name when --model is not given",
    "EVALKIT_API_BASE": "endpoint base URL when --api-base is not given",
    "EVALKIT_API_KEY": "endpoint key when --api-key is not given",
    "EVALKIT_PROFILE": "capability profile when --profile is not given",
    "EVALKIT_PRICING": "pricing file when --pricing is not given",
    "EVALKIT_REQUEST_TIMEOUT": "seconds one model call may take when --request-timeout is not "
                               "given",
    "EVALKIT_STREAM_IDLE_TIMEOUT": "seconds a stream may stay silent when "
                                   "--stream-idle-timeout is not given",
    "EVALKIT_SANDBOX": "bwrap (refuse without it) or none (opt out)",
    "EVALKIT_AUDIT": "audit log folder; none/off silences it; unset = beside the run store "
                     "($EVALKIT_HOME/audit)",
    "EVALKIT_APPROVALS": "approvals folder; none/off silences it; unset = beside the run "
                         "store ($EVALKIT_HOME/approvals)",
    "EVALKIT_LEDGER": "the action ledger every governed call goes through: unset = a mission "
                      "with gates uses $EVALKIT_HOME/governance.sqlite; all = every recorded "
                      "mission does; a path = every recorded mission uses that file; off = none",
}

#: What a process running a mission promises, each promise under a stable id.
EXIT_RULES: dict[str, str] = {
    "stdout_prose": "stdout is prose for a person and is never parsed; the event sink is the only "
                    "machine channel",
    "zero_events": "zero events written means the run failed, and the process exits non-zero "
                   "with a reason on stderr",
    "finished_arrives": "mission_finished always arrives",
    "sigterm": "the first SIGTERM winds the mission up: incomplete with reason cancelled, sink "
               "flushed and closed",
    "scrubbed": "stderr diagnostics and free-text stream fields are scrubbed of credentials",
    "sink_errors": "a write error on the event sink never fails the mission",
    "exit_codes": "exit codes: 0 the mission ran (whatever its outcome), 1 no event was written, "
                  "2 usage or a refusal to start, 3 evalkit's own bug, 4 a configuration fault "
                  "of the model endpoint, 5 the run store refused a write (a full disk): the "
                  "mission ends incomplete with a reason beginning 'recording failed:', on the "
                  "event sink when the store cannot take it",
}
#: The exit contract's sentences alone.
EXIT_CONTRACT: tuple[str, ...] = tuple(EXIT_RULES.values())

#: JSON's own type names, as ``json_type`` spells a value's.
JSON_TYPES: tuple[str, ...] = ("string", "integer", "number", "boolean", "array", "object", "null")

#: The JSON type(s) of every required field, per event. ``conforms`` does not check them
#: (a consumer reads what it can); ``evalkit conform`` holds an agent to them.
TYPES: dict[str, dict[str, tuple[str, ...]]] = {
    "mission_started": {"schema_version": ("integer",), "objective": ("string",),
                        "catalogue": ("array",), "gated": ("array",), "max_steps": ("integer",),
                        "history": ("integer",)},
    "step_started": {"index": ("integer",)},
    "reply_rejected": {"index": ("integer",), "problem": ("string",)},
    "tool_call": {"index": ("integer",), "tool": ("string",), "arguments": ("object",)},
    "tool_result": {"index": ("integer",), "tool": ("string",), "arguments": ("object",),
                    "ok": ("boolean",), "exit_code": ("integer", "null"),
                    "output": ("string",), "error": ("string", "null"), "handle": ("string",),
                    "truncated": ("boolean",)},
    "gate_requested": {"index": ("integer",), "tool": ("string",), "arguments": ("object",),
                       "reason": ("string",)},
    "governance": {"index": ("integer",), "key": ("string", "null"), "what": ("string",),
                   "tool": ("string", "null")},
    "answer_delta": {"index": ("integer",), "part": ("integer",), "text": ("string",)},
    "answer": {"text": ("string",), "outcome": ("string",)},
    "grounding": {"ran": ("boolean",), "grounded": ("boolean",), "verified": ("boolean",),
                  "repairs": ("integer",), "repairing": ("boolean",),
                  "caveat": ("string", "null"), "unsupported": ("array",),
                  "silent": ("array",), "uncited": ("array",), "checks": ("array",)},
    "mission_finished": {"outcome": ("string",), "steps": ("integer",),
                         "max_steps": ("integer",)},
    "model_state": {"state": ("string",), "provider": ("string", "null"),
                    "model": ("string", "null")},
}

#: The keys of a ``usage`` object (on a turn's first record, run totals on
#: ``mission_finished``) and their types. A key is absent, never zero or null, when the
#: provider reported nothing; other keys may ride along.
USAGE: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("integer",),
    "completion_tokens": ("integer",),
    "total_tokens": ("integer",),
    "calls": ("integer",),
    # put there by --pricing; null when the model has no price (never a guessed 0)
    "cost": ("number", "null"),
}

#: What ``--control`` takes: one JSON object per line, ``{"control": WORD, ...}``, with
#: each word's required keys. Anything else is dropped with a sentence on stderr.
CONTROL: dict[str, tuple[str, ...]] = {
    "inject": ("text",),
    "cancel": (),
    "cancel_step": (),
    "gate_decision": ("approval_id", "approve", "decided_by"),
}


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value (one of ``JSON_TYPES``; ``"other"`` for none)."""
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
    if isinstance(value, Mapping):
        return "object"
    return "other"


def flag_names() -> tuple[str, ...]:
    """Every published mission flag, as spelled on a command line."""
    return tuple(f["flag"] for f in CLI_FLAGS)


def harness_flags() -> tuple[str, ...]:
    """The mission flags a harness sets itself."""
    return tuple(f["flag"] for f in CLI_FLAGS if f["harness"])


#: ``FIELDS`` as sets, for the quick test of a record with nothing wrong.
_REQUIRED: dict[str, frozenset[str]] = {event: frozenset(fields) for event, fields in FIELDS.items()}


def conforms(record: Any) -> list[str]:
    """Return the problems with one stream record; an empty list means it is one of ours.

    Checks only what the contract promises: a mapping, schema version 1 when
    stated, a known event, every required field present. Types are not
    checked and extra keys are always allowed.
    """
    # The common case first, in one pass: a plain dict, a known event, every required
    # field, a schema version absent or the int 1. Anything else is only "look closer":
    # the full check finds (or not) what is wrong and words it.
    if type(record) is dict:
        event = record.get("event")
        required = _REQUIRED.get(event) if type(event) is str else None
        if required is not None and record.keys() >= required:
            version = record.get("schema_version", SCHEMA_VERSION)
            if type(version) is int and version == SCHEMA_VERSION:
                return []
    return _problems(record)


def _problems(record: Any) -> list[str]:
    """The full check behind ``conforms``: every problem, in a fixed order."""
    if not isinstance(record, Mapping):
        return [f"not a mapping: {type(record).__name__}"]
    problems: list[str] = []
    if "schema_version" in record:
        version = record["schema_version"]
        if isinstance(version, bool) or version != SCHEMA_VERSION:
            problems.append(f"schema_version is {version!r}, not {SCHEMA_VERSION}")
    if "event" not in record:
        problems.append("no 'event' field")
        return problems
    event = record["event"]
    if not isinstance(event, str) or event not in FIELDS:
        problems.append(f"unknown event {event!r}")
        return problems
    for field in FIELDS[event]:
        if field not in record:
            problems.append(f"{event}: missing required field '{field}'")
    return problems


def as_dict() -> dict[str, Any]:
    """The whole contract as one JSON-ready mapping (what ``evalkit contract`` prints)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "events": list(EVENTS),
        "fields": {e: list(FIELDS[e]) for e in EVENTS},
        "optional": {e: list(OPTIONAL[e]) for e in EVENTS},
        "common_optional": list(COMMON_OPTIONAL),
        "outcomes": list(OUTCOMES),
        "outcome_meanings": dict(OUTCOME_MEANINGS),
        "reasons": list(REASONS),
        "wire_faults": dict(WIRE_FAULTS),
        "order": list(ORDER),
        "order_rules": dict(ORDER_RULES),
        "types": {e: {f: list(t) for f, t in TYPES[e].items()} for e in EVENTS},
        "usage": {k: list(t) for k, t in USAGE.items()},
        "control": {w: list(k) for w, k in CONTROL.items()},
        "model_states": list(MODEL_STATES),
        "check_verdicts": list(CHECK_VERDICTS),
        "profiles": list(PROFILES),
        "sandboxes": list(SANDBOXES),
        "budgets": list(BUDGETS),
        "governance_what": dict(GOVERNANCE_WHAT),
        "value_sets": {path: list(words) for path, words in VALUE_SETS.items()},
        "cli_flags": [dict(f) for f in CLI_FLAGS],
        "env_vars": dict(ENV_VARS),
        "exit_contract": list(EXIT_CONTRACT),
        "exit_rules": dict(EXIT_RULES),
    }
