"""The committed corpus under ``recordings/``: where it is, how to read it, how to compare two.

``recordings/<suite>/<variant>/<key>/`` is one mission's folder as ``evalkit run``
wrote it (tidied by ``evalkit record-corpus``), ``recordings/<suite>/<variant>/report.json``
its ``evalkit score`` report. Two regenerations may differ only in ids and times,
and the paths the runtime writes as it ran (``MACHINE_FIELDS``); ``comparable``
takes exactly those out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalkit.eval.corpus import plan

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "suites"
RECORDINGS = REPO / "recordings"

#: (suite, variant) for every folder the corpus must hold, from the suites themselves.
TARGETS: list[tuple[str, str]] = [(t.folder, t.variant) for t in plan(SUITES)]
IDS = [f"{s}/{v}" for s, v in TARGETS]

#: Where a recorded file says something about the machine that recorded it (docs:
#: recordings/README.md): (file kind, dotted path inside a record).
MACHINE_FIELDS = frozenset({
    ("meta", "meta.flags.script"), ("meta", "meta.flags.skills"), ("meta", "meta.flags.root"),
    ("meta", "meta.flags.mcp_stdio"), ("event", "mission_started.audit_ref"),
})
#: Keys whose values are times or names of a run rather than what happened in it.
VOLATILE_KEYS = frozenset({
    "at", "started", "created_at", "updated_at", "time", "elapsed_s", "duration_s", "wall_s", "run_id",
    "approval_id", "mean_wall_s", "events_bytes", "cwd"})
_RUN_ID = re.compile(r"run_\d{8}-\d{6}-[0-9a-f]{8}")
_APPROVAL_ID = re.compile(r"ap_[0-9a-f]{16}")
_FD = re.compile(r"\bfd:\d+\b")
#: A memory address a tool printed (pytest shows generator arguments by repr).
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,16}\b")
#: Timings a tool or the narration printed: "passed in 0.03s", "after 2 step(s) in 0.02 s".
_SECONDS = re.compile(r"\b\d+(?:\.\d+)?\s?s\b")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def verdicts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["key"]: v for v in report["verdicts"]}


def outcome_of(report: dict[str, Any]) -> dict[str, tuple[bool, list[str]]]:
    """What a live re-run or a replay must reproduce: per key, the bit and the reasons."""
    return {v["key"]: (v["passed"], v["reasons"]) for v in report["verdicts"]}


def committed(suite: str, variant: str) -> dict[str, Any]:
    return read_json(RECORDINGS / suite / variant / "report.json")


def mission_folders(corpus: Path, suite: str, variant: str) -> list[Path]:
    return sorted(p for p in (corpus / suite / variant).iterdir() if p.is_dir())


def run_dir(folder: Path) -> Path:
    """The one run directory a mission folder holds."""
    runs = sorted(p for p in (folder / "runs").iterdir() if p.is_dir())
    assert len(runs) == 1, f"{folder}: expected one run directory, found {runs}"
    return runs[0]


# -- comparing two corpora ---------------------------------------------------------------------


def _text(value: str) -> str:
    value = _RUN_ID.sub("<run>", value)
    value = _APPROVAL_ID.sub("<approval>", value)
    value = _FD.sub("fd:<n>", value)
    value = _ADDRESS.sub("0x<addr>", value)
    return _SECONDS.sub("<t>s", value)


def _scrub(value: Any, kind: str, path: str) -> Any:
    if (kind, path) in MACHINE_FIELDS:
        return "<machine>"
    if isinstance(value, dict):
        return {k: "<volatile>" if k in VOLATILE_KEYS else
                _scrub(v, kind, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, kind, path) for v in value]
    if isinstance(value, str):
        return _text(value)
    return value


def _event(record: dict[str, Any]) -> Any:
    inner = record.get("record", record)
    scrubbed = _scrub(inner, "event", str(inner.get("event", "")))
    return scrubbed if inner is record else {**_scrub(
        {k: v for k, v in record.items() if k != "record"}, "envelope", ""), "record": scrubbed}


def comparable(path: Path) -> Any:
    """A recorded file with ids, times and the machine fields taken out. A seal keeps what
    it covers: which files, and how many lines each JSONL file had (its hashes, key and
    signature change with every regeneration)."""
    name = path.name
    if name == "manifest.json":
        body = read_json(path)
        return {"kind": body.get("kind"),
                "files": {_text(rel): len(entry.get("chain") or ()) if isinstance(entry, dict)
                          else "digest" for rel, entry in body.get("files", {}).items()}}
    if name == "events.jsonl":
        return [_event(r) for r in read_jsonl(path)]
    if name == "certificates.jsonl":  # what was certified stays; digests and times move with ids
        return [_scrub({**r, "issued_at": None,
                        "inputs": {k: {**v, "digest": None} for k, v in r["inputs"].items()}},
                       name, "") for r in read_jsonl(path)]
    if name.endswith(".jsonl"):
        return [_scrub(r, name, "") for r in read_jsonl(path)]
    if name == "meta.json":
        return _scrub(read_json(path), "meta", "")
    if name.endswith(".json"):
        return _scrub(read_json(path), name, "")
    return _text(path.read_text(encoding="utf-8", errors="replace"))


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two comparable values first differ, as ``path: a != b``; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path or '.'}: {str(a)[:160]!r} != {str(b)[:160]!r}"


def relative_files(corpus: Path, suite: str, variant: str) -> dict[str, Path]:
    """Every file of one suite/variant, by its path with run ids taken out."""
    base = corpus / suite / variant
    return {_RUN_ID.sub("<run>", str(p.relative_to(base))): p
            for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def corpus_present() -> None:
    if not (RECORDINGS / "README.md").is_file():
        pytest.fail("recordings/ holds no corpus: run `evalkit record-corpus` and commit it")
