"""What an agent did in one mission, as a person reads it: the transcript of a run.

A verdict says *that* a mission failed; the reasons say which check; only the
recorded stream says what the agent actually did. This module turns one
mission's recordings — the stream (``events.jsonl``), the runtime's model log
beside it (``runs/<run_id>/model.jsonl``) when the built-in runtime ran, and
the harness's ``stderr.txt`` when the run was an infrastructure failure —
into entries a template can print.

It reads files only (``evalkit.store``), never the runtime that wrote them.
Every text shown passes ``evalkit.redact.redact`` once more: the emitter
scrubbed what it knew, and a second pass can only hide more, never bring a
scrubbed value back. Report size is bounded per transcript (``MAX_ENTRIES``
records, ``MAX_TEXT`` characters per text, ``MAX_MODEL_CALLS`` replies), each
cut said in words, so a report of a large matrix stays a file a browser opens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.harness_files import CAPTURE_FILE, STDERR_FILE
from evalkit.redact import redact
from evalkit.store.layout import MODEL_FILE, is_run_id
from evalkit.store.reader import file_bytes, parse_bytes, read_events_file

#: Records shown per transcript; the rest are counted in one line.
MAX_ENTRIES = 150
#: Characters of one text (a tool output, arguments, a reply) shown; the rest are counted.
MAX_TEXT = 2000
#: Model replies shown per transcript (from the runtime's model log).
MAX_MODEL_CALLS = 40
#: Lines of an infrastructure failure's stderr shown (its last ones, where the cause is).
STDERR_LINES = 12
#: A text longer than this opens collapsed.
LONG = 400
#: Runs a report shows at the full limits above; past it every limit shrinks in proportion
#: (to a floor), and the model replies are left to the model log, so that a measure of
#: 6 rows x 3 repeats x 50 missions still writes a page of a few megabytes.
FULL_UP_TO = 60


@dataclass(frozen=True)
class Limits:
    text: int = MAX_TEXT
    entries: int = MAX_ENTRIES
    replies: int = MAX_MODEL_CALLS

    @classmethod
    def for_runs(cls, runs: int) -> Limits:
        """The limits for a report of ``runs`` transcripts."""
        if runs <= FULL_UP_TO:
            return cls(MAX_TEXT, MAX_ENTRIES, MAX_MODEL_CALLS)
        share = FULL_UP_TO / runs
        return cls(max(160, int(MAX_TEXT * share)), max(24, int(MAX_ENTRIES * share)), 0)


@dataclass
class Block:
    """One text of an entry: a tool's arguments, its output, a reply, an answer."""

    label: str
    text: str
    size: int  # bytes of the whole text, before any cut
    cut: int = 0  # characters not shown

    @property
    def long(self) -> bool:
        return len(self.text) > LONG or self.cut > 0


@dataclass
class Entry:
    kind: str  # the event name, or "tool" for a call paired with its result
    head: str  # one line: what happened
    tone: str = ""  # "", "good", "bad" or "note": how the line is coloured
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Transcript:
    anchor: str
    key: str
    config: str
    rep: str
    status: str  # pass / fail / infra / missing
    reasons: list[str]
    objective: str | None = None
    entries: list[Entry] = field(default_factory=list)
    more: int = 0  # records not shown
    replies: list[Block] = field(default_factory=list)
    more_replies: int = 0
    stderr: str | None = None
    note: str | None = None  # why there is no stream to show

    @property
    def label(self) -> str:
        return " ".join(p for p in (self.config, self.rep) if p)


def text_block(label: str, value: Any, limit: int | None = None) -> Block:
    """A block of ``value`` (a string, or JSON of anything else), scrubbed and cut."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)
        except (TypeError, ValueError):
            text = str(value)
    text = redact(text)
    size = len(text.encode("utf-8", errors="replace"))
    limit = MAX_TEXT if limit is None else limit
    if len(text) > limit:
        return Block(label, text[:limit], size, len(text) - limit)
    return Block(label, text, size)


def _short(value: Any, width: int = 80) -> str:
    text = redact(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                  sort_keys=True, default=str))
    return text if len(text) <= width else text[:width - 1] + "…"


def _entry(record: dict[str, Any], result: dict[str, Any] | None, limit: int = MAX_TEXT) -> Entry:
    """One record (and, for a tool call, the result that answered it) as an entry."""
    tb = partial(text_block, limit=limit)
    event = str(record.get("event"))
    if event == "mission_started":
        said = [f"{k} {record[k]}" for k in ("profile", "sandbox", "protocol") if record.get(k)]
        tools = record.get("catalogue")
        if isinstance(tools, list):
            said.append(f"{len(tools)} tools offered")
        return Entry(event, "started" + (": " + ", ".join(_short(s) for s in said) if said else ""))
    if event == "step_started":
        head = f"step {record.get('index')}"
        blocks, tone = [], ""
        for key in ("injected", "review", "plan", "compacted", "resumed"):
            if record.get(key) not in (None, False, [], {}):
                blocks.append(tb(key, record[key]))
        if record.get("injected") not in (None, False, [], {}):
            head, tone = head + ": the supervisor spoke in", "note"
        elif record.get("review"):
            head, tone = head + ": the supervisor reviewed the run", "note"
        elif record.get("plan"):
            head += ": staged, with a plan"
        return Entry(event, head, tone, blocks)
    if event == "tool_call":
        tool = _short(record.get("tool"), 60)
        blocks = [tb("arguments", record.get("arguments"))]
        if result is None:
            return Entry("tool", f"called {tool}; no result recorded", "bad", blocks)
        ok = bool(result.get("ok"))
        output = result.get("output")
        blocks.append(tb("result", output if output is not None else ""))
        if result.get("error"):
            blocks.append(tb("error", result.get("error")))
        head = f"called {tool} → {'ok' if ok else 'failed'}"
        if result.get("exit_code") not in (None, 0):
            head += f", exit code {result.get('exit_code')}"
        if result.get("truncated"):
            head += f"; the agent saw it cut (whole result under {_short(result.get('handle'), 20)})"
        return Entry("tool", head, "" if ok else "bad", blocks)
    if event == "tool_result":  # a result whose call was not seen just before it
        return Entry("tool", f"result of {_short(record.get('tool'), 60)}",
                     "" if record.get("ok") else "bad",
                     [tb("result", record.get("output") or ""),
                      *([tb("error", record["error"])] if record.get("error") else [])])
    if event == "reply_rejected":
        tool = f" (it named {_short(record.get('tool'), 60)})" if record.get("tool") else ""
        return Entry(event, f"reply rejected{tool}: {_short(record.get('problem'), 300)}", "bad")
    if event == "gate_requested":
        approval = record.get("approval_id")
        head = (f"gate: {_short(record.get('tool'), 60)} needs approval"
                + (f" ({_short(approval, 40)})" if approval else "")
                + (f": {_short(record.get('reason'), 200)}" if record.get("reason") else ""))
        return Entry(event, head, "note", [tb("arguments", record.get("arguments"))])
    if event == "grounding":
        if not record.get("ran"):
            return Entry(event, "grounding did not run", "note")
        word = "grounded" if record.get("grounded") else "NOT grounded"
        head = f"grounding: {word}"
        if record.get("repairing"):
            head += " (the agent was asked to repair its answer)"
        if record.get("repairs"):
            head += f"; {record.get('repairs')} repair(s)"
        checks = [c for c in record.get("checks") or () if isinstance(c, dict)
                  and c.get("configured")]
        lines = [f"{c.get('check')}: {c.get('verdict')} — {c.get('detail') or ''}" for c in checks]
        for key in ("unsupported", "silent", "uncited"):
            if record.get(key):
                lines.append(f"{key}: {_short(record[key], 300)}")
        if record.get("caveat"):
            lines.append(f"caveat: {record['caveat']}")
        return Entry(event, head, "good" if record.get("grounded") else "bad",
                     [tb("checks", "\n".join(lines))] if lines else [])
    if event == "answer":
        return Entry(event, f"answer ({_short(record.get('outcome'), 40)})", "",
                     [tb("answer", record.get("text") or "")])
    if event == "mission_finished":
        said = [f"outcome {record.get('outcome')}", f"{record.get('steps')} steps"]
        if record.get("reason"):
            said.append(f"reason: {record.get('reason')}")
        if isinstance(record.get("budget"), dict):
            said.append(f"budget {_short(record['budget'])}")
        if record.get("elapsed_s") is not None:
            said.append(f"{record.get('elapsed_s')} s in the loop")
        usage = record.get("usage")
        return Entry(event, "finished: " + _short("; ".join(str(s) for s in said), 400),
                     "good" if record.get("outcome") in ("answered", "answered_with_caveat")
                     else "bad", [tb("usage", usage)] if usage else [])
    if event == "model_state":
        head = f"model {_short(record.get('provider'), 40)}/{_short(record.get('model'), 60)}: " \
               f"{_short(record.get('state'), 20)}"
        if record.get("detail"):
            head += f" — {_short(record.get('detail'), 200)}"
        return Entry(event, head, "bad" if record.get("state") in ("failed", "absent") else "note")
    return Entry(event, f"{_short(event, 60)} record", "", [tb("record", record)])


def entries_of(records: list[dict[str, Any]], limit: int = MAX_TEXT) -> list[Entry]:
    """The records as entries: a call and the result that answers it are one entry, and the
    answer's streamed pieces are left to the answer itself."""
    out: list[Entry] = []
    i = 0
    while i < len(records):
        record = records[i]
        event = record.get("event")
        if event == "answer_delta":
            i += 1
            continue
        result = None
        if event == "tool_call" and i + 1 < len(records):
            after = records[i + 1]
            if after.get("event") == "tool_result" and after.get("tool") == record.get("tool"):
                result = after
                i += 1
        out.append(_entry(record, result, limit))
        i += 1
    return out


def _replies(folder: Path, events: Path, run_id: Any, limits: Limits
             ) -> tuple[list[Block], int]:
    """The model's replies from the runtime's model log, when one lies with the stream."""
    candidates = [events.parent / MODEL_FILE]
    if isinstance(run_id, str) and is_run_id(run_id):
        candidates.append(folder / "runs" / run_id / MODEL_FILE)
    for path in candidates:
        try:
            data = file_bytes(path)
        except EvalkitError:
            continue
        if data is None:
            continue
        calls = [r for r in parse_bytes(path, data).records if isinstance(r.get("reply"), dict)]
        blocks = []
        for r in calls[:limits.replies]:
            reply = r["reply"]
            shown: Any = reply.get("content") or ""
            if reply.get("tool_calls"):
                shown = {"content": reply.get("content"), "tool_calls": reply.get("tool_calls")}
            blocks.append(text_block(f"call {r.get('call', '?')}", shown, limits.text))
        return blocks, max(0, len(calls) - limits.replies)
    return [], 0


def _stderr_tail(folder: Path) -> str | None:
    try:
        lines = (folder / STDERR_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = [line for line in lines if line.strip()]
    return redact("\n".join(said[-STDERR_LINES:])) if said else None


def transcript(anchor: str, verdict: dict[str, Any], root: Path | None, config: str,
               rep: str, status: str, limits: Limits | None = None) -> Transcript:
    """The transcript of one verdict's run, read from below ``root`` (its runs folder)."""
    limits = limits or Limits()
    key = str(verdict.get("key"))
    reasons = [redact(str(r)) for r in verdict.get("reasons") or ()]
    if verdict.get("infra"):
        reasons.append(redact(f"infrastructure: {verdict['infra']}"))
    out = Transcript(anchor, key, config, rep, status, reasons)
    source = verdict.get("source")
    folder = root / key if root is not None else None
    if root is not None and isinstance(source, str) and source:
        path = root / source
        if not Path(source).is_absolute() and ".." not in Path(source).parts:
            parts = Path(source).parts
            folder = root / parts[0] if len(parts) > 1 else folder
        try:
            if not path.is_file():
                raise FileNotFoundError(source)
            read = read_events_file(path)
        except FileNotFoundError:
            out.note = (f"the recording ({redact(source)}) is not beside this report; render "
                        "the report from the runs folder (evalkit report RUNS --suite S) to see "
                        "what the agent did")
        except (EvalkitError, OSError) as exc:
            out.note = redact(str(exc))
        else:
            records = read.records
            started = next((r for r in records if r.get("event") == "mission_started"), {})
            if started.get("objective"):
                out.objective = redact(str(started["objective"]))
            entries = entries_of(records, limits.text)
            out.entries = entries[:limits.entries]
            out.more = max(0, len(entries) - limits.entries)
            if folder is not None and limits.replies:
                out.replies, out.more_replies = _replies(folder, path, started.get("run_id"),
                                                         limits)
            if not records:
                out.note = "the stream holds no record"
    else:
        out.note = "no stream was recorded for this mission"
    if folder is not None and status in ("infra", "missing", "fail") and (
            status != "fail" or not out.entries):
        out.stderr = _stderr_tail(folder) if (folder / CAPTURE_FILE).is_file() or \
            (folder / STDERR_FILE).is_file() else None
    return out
