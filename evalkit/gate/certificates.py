"""Certificates that recompute: a named invariant of one recorded run, stated with the
digests of the exact records it was decided from, its parameters and its verdict.

A certificate is one JSON object (one line of a run's ``certificates.jsonl``)::

    {"v": 1, "theorem": "figures_traced", "run_id": "run_...",
     "inputs": {"events": {"lines": "3-5,9", "count": 4, "digest": "sha256:..."}},
     "parameters": {...}, "verdict": "holds" | "violated", "evidence": {...},
     "issued_at": "..."}

Each theorem (``THEOREMS``) is a pure function of the run's records: it picks the
records it reads (``select``), derives its parameters from them (``parameters``) and
decides (``decide``). An input's digest is SHA-256 over the RFC 8785 canonical JSON
of ``[[line, record], ...]`` of the records picked, so it names both what they say
and where they stand in the file: a changed byte, a removed or an added record
changes it. ``recompute`` reads the run again and reports a certificate whose inputs
no longer match, whose parameters are not the theorem's, or whose verdict or
evidence no longer follows — nothing in a certificate is taken on its word, so a
forged one is found as surely as a stale one. The verdict is read as "the theorem
holds for this run": a run that went in circles has a *violated*
``stagnation_windowed`` certificate.

What a theorem can see is what the recording holds: ``no_irreversible_without_approval``
proves that each executed call of a gated tool matches, digest for digest, a gate the
run recorded asking for exactly that call (and that no gate covers two executions);
the person's signed yes lives in the approvals folder, outside the run, and is checked
by the runtime when the call is admitted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit import signals
from evalkit.errors import EvalkitError
from evalkit.gate.approval import request_digest
from evalkit.grounding import Grammar, evidence_from_records, validate
from evalkit.store import layout
from evalkit.store.reader import file_bytes, parse_bytes, parse_line
from evalkit.store.replace import replace_file
from evalkit.store.runstore import now_iso
from evalkit.store.signing import canonical

VERSION = 1
HOLDS, VIOLATED = "holds", "violated"
#: The evidence a certificate keeps is bounded: at most this many items of a list.
EVIDENCE_ITEMS = 10

#: One recorded record: (source file, 1-based line, the record).
Line = tuple[str, int, dict[str, Any]]
#: The run's records by source: ``events`` (events.jsonl) and ``tools`` (tools.jsonl).
Records = Mapping[str, Sequence[tuple[int, dict[str, Any]]]]


@dataclass(frozen=True)
class Theorem:
    """One named invariant: which records it reads, its parameters, and its decision."""

    name: str
    statement: str
    #: Whether a record of a source is one of this theorem's inputs.
    select: Callable[[str, Mapping[str, Any]], bool]
    #: The parameters the theorem decides with, derived from the records picked.
    parameters: Callable[[Records], dict[str, Any]]
    #: (verdict, evidence) from the records picked and the parameters.
    decide: Callable[[Records, Mapping[str, Any]], tuple[str, dict[str, Any]]]


# -- stagnation_windowed -------------------------------------------------------------------

_FOLDED = frozenset({"step_started", "tool_call", "tool_result", "reply_rejected"})


def _stagnation_select(source: str, record: Mapping[str, Any]) -> bool:
    return source == "events" and record.get("event") in _FOLDED and signals.main_line(record)


def _stagnation_parameters(records: Records) -> dict[str, Any]:
    return {"thresholds": dict(signals.THRESHOLDS)}


def _stagnation_decide(records: Records, parameters: Mapping[str, Any]
                       ) -> tuple[str, dict[str, Any]]:
    watch = signals.Watch(parameters["thresholds"])
    for _, record in records.get("events", ()):
        watch.feed(record)
    if not watch.firings:
        return HOLDS, {"firings": 0}
    return VIOLATED, {"firings": len(watch.firings), "first": watch.firings[0].as_dict()}


# -- no_irreversible_without_approval -------------------------------------------------------

def _approval_select(source: str, record: Mapping[str, Any]) -> bool:
    return source == "events" and record.get("event") in (
        "mission_started", "gate_requested", "tool_result")


def _approval_parameters(records: Records) -> dict[str, Any]:
    return {"binding": "sha256 of RFC 8785 {tool, arguments (redacted)}",
            "refused": "ok false, exit_code null, error beginning 'denied'"}


def refused(record: Mapping[str, Any]) -> bool:
    """A ``tool_result`` the governor wrote for a call it did not carry out."""
    error = record.get("error")
    return (record.get("ok") is False and record.get("exit_code") is None
            and isinstance(error, str) and error.startswith("denied"))


def _approval_decide(records: Records, parameters: Mapping[str, Any]
                     ) -> tuple[str, dict[str, Any]]:
    gated: set[str] = set()
    open_gates: list[tuple[int, dict[str, Any]]] = []
    spent: set[str] = set()
    executed, problems = 0, []
    for line, record in records.get("events", ()):
        event = record.get("event")
        if event == "mission_started":
            names = record.get("gated")
            gated.update(n for n in (names if isinstance(names, list) else ())
                         if isinstance(n, str))
        elif event == "gate_requested":
            if isinstance(record.get("tool"), str):
                gated.add(record["tool"])
            open_gates.append((line, record))
        elif event == "tool_result" and record.get("tool") in gated and not refused(record):
            executed += 1
            why = _uncovered(record, open_gates, spent)
            if why is not None:
                problems.append({"line": line, "tool": record.get("tool"),
                                 "index": record.get("index"), "why": why})
    evidence: dict[str, Any] = {"gated_executions": executed, "uncovered": len(problems)}
    if problems:
        evidence["calls"] = problems[:EVIDENCE_ITEMS]
        return VIOLATED, evidence
    return HOLDS, evidence


def _uncovered(result: Mapping[str, Any], gates: list[tuple[int, dict[str, Any]]],
               spent: set[str]) -> str | None:
    """Why an executed gated call has no recorded gate of its own (None: it has; the gate
    is then spent). A gate covers a call when its recorded digest is the digest of its own
    tool and arguments, and of the call's: a gate rewritten to other arguments, or a call
    made with other arguments than were asked about, is not covered."""
    wanted = request_digest(result.get("tool"), result.get("arguments"))
    seen_other = False
    for _, gate in gates:
        approval_id = gate.get("approval_id")
        digest = gate.get("digest")
        if gate.get("tool") != result.get("tool") or not isinstance(approval_id, str):
            continue
        if digest != request_digest(gate.get("tool"), gate.get("arguments")):
            seen_other = True
            continue  # a gate whose digest is not of its own call vouches for nothing
        if digest != wanted:
            seen_other = True
            continue
        if approval_id in spent:
            seen_other = True
            continue
        spent.add(approval_id)
        return None
    if seen_other:
        return "no unspent gate of this run asked for exactly this call (digest differs or " \
               "its approval was already used)"
    return "executed with no gate_requested in this run"


# -- figures_traced -------------------------------------------------------------------------

#: The grammar keys a figures certificate decides with (the grounding grammar's own).
_FIGURE_KEYS = ("number_pattern", "ignore", "identifier_pattern", "figures_from")


def _figures_select(source: str, record: Mapping[str, Any]) -> bool:
    if source == "tools":
        return record.get("call") == 0 and "catalogue" in record
    if record.get("event") in ("tool_result", "mission_started"):
        return True
    return record.get("event") in ("answer", "grounding") and signals.main_line(record)


def _figures_parameters(records: Records) -> dict[str, Any]:
    # The built-in number shape (no number_pattern), every tool of the run as a source.
    return {"number_pattern": None, "ignore": [], "identifier_pattern": None,
            "figures_from": None}


def _catalogue(records: Records) -> tuple[list[str], set[str]]:
    """The names of the run's tools (catalogue, mission_started, results) and its code tools."""
    names: dict[str, None] = {}
    code: set[str] = set()
    for _, line in records.get("tools", ()):
        for tool in line.get("catalogue") or ():
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                names[tool["name"]] = None
                if tool.get("code"):
                    code.add(tool["name"])
    for _, record in records.get("events", ()):
        if record.get("event") == "mission_started":
            names.update((n, None) for n in record.get("catalogue") or () if isinstance(n, str))
        elif record.get("event") == "tool_result" and isinstance(record.get("tool"), str):
            names[record["tool"]] = None
    return list(names), code


def _final_answer(records: Records) -> str | None:
    """The run's last answer, without the caveat grounding appended to it."""
    answer, caveat = None, None
    for _, record in records.get("events", ()):
        if record.get("event") == "answer" and isinstance(record.get("text"), str):
            answer = record["text"]
        elif record.get("event") == "grounding":
            caveat = record.get("caveat") if isinstance(record.get("caveat"), str) else None
    if answer is not None and caveat and answer.endswith(caveat):
        answer = answer[:-len(caveat)].rstrip()
    return answer


def _figures_decide(records: Records, parameters: Mapping[str, Any]
                    ) -> tuple[str, dict[str, Any]]:
    answer = _final_answer(records)
    if answer is None:
        return HOLDS, {"answer": False, "considered": 0}
    names, code = _catalogue(records)
    sources = parameters.get("figures_from")
    # Without tools nothing can ground a figure: a name no tool has keeps the check on.
    figures_from = tuple(sources) if sources else tuple(names) or ("\x00no tool",)
    grammar = Grammar(number_pattern=parameters.get("number_pattern"),
                      ignore=tuple(parameters.get("ignore") or ()),
                      identifier_pattern=parameters.get("identifier_pattern"),
                      figures_from=figures_from)
    results = [r for _, r in records.get("events", ()) if r.get("event") == "tool_result"]
    report = validate(answer, grammar, evidence_from_records(results, code_tools=code),
                      tools=names)
    row = report.row("figures")
    evidence = {"answer": True, "considered": row.considered,
                "untraced": row.unsupported[:EVIDENCE_ITEMS]}
    return (VIOLATED if row.unsupported else HOLDS), evidence


THEOREMS: dict[str, Theorem] = {t.name: t for t in (
    Theorem("stagnation_windowed",
            "the run never went in circles: no stagnation signal of evalkit.signals fired",
            _stagnation_select, _stagnation_parameters, _stagnation_decide),
    Theorem("no_irreversible_without_approval",
            "every executed call of a gated tool matches a recorded gate asking for exactly "
            "that call (its digest), each gate covering one execution",
            _approval_select, _approval_parameters, _approval_decide),
    Theorem("figures_traced",
            "every figure in the answer is found in a tool result of the run (the grounding "
            "validator's figures check)",
            _figures_select, _figures_parameters, _figures_decide),
)}


# -- reading a run -----------------------------------------------------------------------------

def read_run(run_dir: Path) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """The run's records with their line numbers, by source. EvalkitError when it has no stream."""
    data = file_bytes(run_dir / layout.EVENTS_FILE)
    if data is None:
        raise EvalkitError(f"{run_dir} holds no {layout.EVENTS_FILE}")
    stream = parse_bytes(run_dir / layout.EVENTS_FILE, data)
    out: dict[str, list[tuple[int, dict[str, Any]]]] = {
        "events": list(zip(stream.lines, stream.records, strict=True)), "tools": []}
    tools = file_bytes(run_dir / layout.TOOLS_FILE) or b""
    for number, raw in enumerate(tools.splitlines(), start=1):
        found = parse_line(raw)
        if isinstance(found, dict):
            out["tools"].append((number, found))
    return out


def _pick(theorem: Theorem, records: Records) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    return {source: [(n, r) for n, r in lines if theorem.select(source, r)]
            for source, lines in records.items()}


def _ranges(numbers: Iterable[int]) -> str:
    """``1-3,7`` for lines 1, 2, 3 and 7."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def input_digest(lines: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    """SHA-256 over RFC 8785 JSON of ``[[line, record], ...]``."""
    body = canonical([[n, dict(r)] for n, r in lines])
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _inputs(picked: Mapping[str, Sequence[tuple[int, Mapping[str, Any]]]]) -> dict[str, Any]:
    return {source: {"lines": _ranges(n for n, _ in lines), "count": len(lines),
                     "digest": input_digest(lines)}
            for source, lines in picked.items() if lines or source == "events"}


def certify(theorem: Theorem, records: Records, run_id: str, *,
            issued_at: str | None = None) -> dict[str, Any]:
    """One certificate: pure, records in, certificate out (``issued_at`` aside)."""
    picked = _pick(theorem, records)
    parameters = theorem.parameters(picked)
    verdict, evidence = theorem.decide(picked, parameters)
    return {"v": VERSION, "theorem": theorem.name, "run_id": run_id,
            "inputs": _inputs(picked), "parameters": parameters, "verdict": verdict,
            "evidence": evidence, "issued_at": issued_at or now_iso()}


def certify_all(records: Records, run_id: str) -> list[dict[str, Any]]:
    """Every theorem's certificate over ``records``, in registry order."""
    at = now_iso()
    return [certify(t, records, run_id, issued_at=at) for t in THEOREMS.values()]


def issue(run_dir: Path, *, fsync: bool = True) -> list[dict[str, Any]]:
    """Compute every certificate of the run in ``run_dir`` and write ``certificates.jsonl``
    there (replaced whole). Called as the run closes, before its seal."""
    run_dir = Path(run_dir)
    found = certify_all(read_run(run_dir), run_dir.name)
    text = "".join(canonical(c).decode("utf-8") + "\n" for c in found)
    replace_file(run_dir / layout.CERTIFICATES_FILE, text.encode("utf-8"), fsync=fsync)
    return found


# -- checking ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """A certificate of a run that does not hold up (``theorem`` None: the file itself)."""

    theorem: str | None
    why: str

    def __str__(self) -> str:
        return f"{self.theorem}: {self.why}" if self.theorem else self.why


def read_certificates(run_dir: Path) -> list[Any] | None:
    """The certificates file's objects (None: the run has none). A line that is not JSON
    is kept as ``None`` so it is reported, never skipped."""
    data = file_bytes(Path(run_dir) / layout.CERTIFICATES_FILE)
    if data is None:
        return None
    out: list[Any] = []
    for raw in data.splitlines():
        if raw.strip():
            found = parse_line(raw)
            out.append(found if isinstance(found, dict) else None)
    return out


def recompute(run_dir: Path) -> list[Finding]:
    """Every certificate of ``run_dir`` recomputed from the recorded run; what does not hold
    up (empty: every one does). A run without certificates gives one finding saying so."""
    run_dir = Path(run_dir)
    found = read_certificates(run_dir)
    if found is None:
        return [Finding(None, f"no {layout.CERTIFICATES_FILE}")]
    try:
        records = read_run(run_dir)
    except EvalkitError as exc:
        return [Finding(None, exc.message)]
    return check(found, records, run_dir.name)


def check(found: Sequence[Any], records: Records, run_id: str) -> list[Finding]:
    """``recompute`` over certificates and records already read."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for index, cert in enumerate(found, start=1):
        if not isinstance(cert, dict):
            findings.append(Finding(None, f"line {index} is not a certificate"))
            continue
        name = cert.get("theorem")
        theorem = THEOREMS.get(name) if isinstance(name, str) else None
        if theorem is None:
            findings.append(Finding(str(name), "no such theorem"))
            continue
        if name in seen:
            findings.append(Finding(name, "certified twice"))
            continue
        seen.add(name)
        why = _broken(theorem, cert, records, run_id)
        if why is not None:
            findings.append(Finding(name, why))
    for name in THEOREMS:
        if name not in seen:
            findings.append(Finding(name, "no certificate was issued for it"))
    return findings


def _broken(theorem: Theorem, cert: Mapping[str, Any], records: Records,
            run_id: str) -> str | None:
    """Why one certificate does not follow from the records (None: it does)."""
    if cert.get("v") != VERSION:
        return f"version {cert.get('v')!r} is not {VERSION}"
    if cert.get("run_id") != run_id:
        return f"issued for run {cert.get('run_id')!r}, not {run_id}"
    picked = _pick(theorem, records)
    inputs = _inputs(picked)
    stated = cert.get("inputs")
    if not isinstance(stated, dict):
        return "it names no inputs"
    for source in sorted(set(stated) - set(inputs)):
        return f"the {source} records it was computed from are gone"
    for source in sorted(set(inputs) - set(stated)):
        return f"the {source} records (lines {inputs[source]['lines']}) were not among its inputs"
    parameters = theorem.parameters(picked)
    for source, now in inputs.items():
        was = stated[source]
        if not isinstance(was, dict) or was.get("digest") != now["digest"]:
            where = was.get("lines") if isinstance(was, dict) else None
            moved = "changed" if where == now["lines"] else f"are now lines {now['lines']}"
            verdict, _ = theorem.decide(picked, parameters)
            follows = ("its verdict would still follow" if verdict == cert.get("verdict")
                       else f"they now give {verdict!r}")
            return (f"the {source} records it was computed from (lines {where}) {moved}; "
                    f"{follows}")
    if cert.get("parameters") != parameters:
        return f"parameters {canonical(cert.get('parameters')).decode()} are not the " \
               f"theorem's {canonical(parameters).decode()}"
    verdict, evidence = theorem.decide(picked, parameters)
    if cert.get("verdict") != verdict:
        return f"verdict {cert.get('verdict')!r} does not follow: the records give {verdict!r}"
    if canonical(cert.get("evidence")) != canonical(evidence):
        return "its evidence is not what the records give"
    return None


def runs_under(path: Path) -> list[Path]:
    """The folders holding a stream at or below ``path`` (a stream file stands for its folder),
    sorted; a mission's working copy and approvals, and hidden folders, are not looked in."""
    import os

    path = Path(path)
    if path.is_file():
        return [path.parent]
    if not path.is_dir():
        raise EvalkitError(f"cannot check the certificates of {path}: it does not exist")
    found = []
    for top, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in ("work", "approvals")
                         and not d.startswith("."))
        if layout.EVENTS_FILE in names:
            found.append(Path(top))
    return sorted(found)
