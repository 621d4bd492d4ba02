"""Certificates that recompute: a named invariant of one recorded run, stated with the
digests of the exact records it was decided from, its parameters and its verdict.

A certificate is one JSON object (one line of a run's ``certificates.jsonl``)::

    {"v": 1, "theorem": "figures_traced", "run_id": "run_...",
     "inputs": {"events": {"lines": "3-5,9", "count": 4, "digest": "sha256:..."}},
     "parameters": {...}, "verdict": "holds" | "violated", "evidence": {...},
     "issued_at": "..."}

Each theorem (``THEOREMS``, in ``evalkit.gate.theorems``) is a pure function of the
run's records: it picks the records it reads (``select``), derives its parameters
from them (``parameters``) and decides (``decide``). An input's digest is SHA-256 over the RFC 8785 canonical JSON
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
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gate.theorems import HOLDS, THEOREMS, VIOLATED, Records, Theorem
from evalkit.store import layout
from evalkit.store.reader import file_bytes, parse_bytes, parse_line
from evalkit.store.replace import replace_file
from evalkit.store.runstore import RunWriter, now_iso
from evalkit.store.signing import canonical

VERSION = 1
__all__ = ["HOLDS", "THEOREMS", "VERSION", "VIOLATED", "Finding", "certify", "certify_all",
           "check", "input_digest", "issue", "read_certificates", "read_run", "recompute",
           "runs_under"]


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


def issue_at_close(run_dir: Path, *, fsync: bool = True) -> None:
    """Issue the run's certificates as its writer closes it, before its seal (so the seal
    lists them): ``RunWriter.before_seal`` of every writer — the runtime's and the gate's.
    A run whose certificates cannot be issued still closes: ``evalkit verify
    --certificates`` then says it has none, and ``--issue`` can write them later."""
    import contextlib

    try:
        issue(run_dir, fsync=fsync)
    except Exception:  # noqa: BLE001 - a certificate is never worth the recording
        with contextlib.suppress(OSError):
            (Path(run_dir) / layout.CERTIFICATES_FILE).unlink(missing_ok=True)


def close_certified(writer: RunWriter) -> None:
    """Close ``writer``'s run with its certificates issued before the seal: the one way every
    writer of a run (the runtime, the gate, the recorder) closes it, so their run directories
    hold the same files. A writer that does not fsync (a run remade from a recording) writes
    its certificates without fsync too."""
    durable = getattr(writer, "durable", True)
    writer.before_seal = lambda run_dir: issue_at_close(run_dir, fsync=durable)
    writer.close()


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
    path = Path(path)
    if path.is_file():
        if not (path.parent / layout.EVENTS_FILE).is_file():
            raise EvalkitError(f"cannot check the certificates of {path}: it is not a run "
                               f"(no {layout.EVENTS_FILE} beside it)")
        return [path.parent]
    if not path.is_dir():
        raise EvalkitError(f"cannot check the certificates of {path}: it does not exist")
    found = []
    for top, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in ("work", "approvals")
                         and not d.startswith("."))
        if layout.EVENTS_FILE in names and not _captures_a_run(Path(top)):
            found.append(Path(top))
    return sorted(found)


def _captures_a_run(folder: Path) -> bool:
    """A harness's mission folder: its stream is the capture of the run filed under its
    ``runs/``, which is certified on its own (once, not twice)."""
    runs = folder / "runs"
    return runs.is_dir() and any((run / layout.EVENTS_FILE).is_file() for run in runs.iterdir())
