"""Reading and writing the OTLP/JSON encoding of spans, reduced to what evalkit uses.

OTLP/JSON nests spans as ``resourceSpans → scopeSpans → spans`` and wraps every
attribute value in a one-key object (``{"stringValue": …}``, ``{"intValue": "7"}``
— 64-bit integers are strings). Ids are hex in the OTLP/JSON specification but
base64 in protobuf's generic JSON mapping (what ``json_format.MessageToJson``
writes); both are read, hex is written. Anything that is not this shape is
refused in one sentence, naming the file, never with a traceback.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError


@dataclass
class Span:
    """One span, its attribute values plain Python (an ``arrayValue`` is a list)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: OTLP status code: 0 unset, 1 ok, 2 error.
    status_code: int = 0
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def operation(self) -> str | None:
        value = self.attributes.get("gen_ai.operation.name")
        return value if isinstance(value, str) else None


def read_spans(path: Path) -> list[Span]:
    """Every span of one OTLP/JSON file (a ``TracesData`` object, or one per line)."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalkitError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") \
            from None
    documents = []
    try:
        documents = [json.loads(text)]
    except ValueError:
        try:  # the OTLP file exporter's shape: one TracesData per line
            documents = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            raise EvalkitError(f"{path} is not JSON; an OTLP/JSON trace file is expected") \
                from None
    spans: list[Span] = []
    for doc in documents:
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
            raise EvalkitError(f"{path} is JSON but not OTLP traces: it has no resourceSpans "
                               "list at the top")
        try:
            spans += _spans_of(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EvalkitError(f"{path} holds a span that is not OTLP/JSON ({exc})") from None
    return spans


def _spans_of(doc: dict[str, Any]) -> list[Span]:
    out = []
    for rs in doc["resourceSpans"]:
        resource = attributes((rs.get("resource") or {}).get("attributes") or [])
        for ss in rs.get("scopeSpans") or []:
            for s in ss.get("spans") or []:
                status = s.get("status") or {}
                code = status.get("code", 0)
                code = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1,
                        "STATUS_CODE_ERROR": 2}.get(code, code)
                out.append(Span(
                    trace_id=_hex_id(s["traceId"], 16), span_id=_hex_id(s["spanId"], 8),
                    parent_id=_hex_id(s["parentSpanId"], 8) if s.get("parentSpanId") else None,
                    name=str(s.get("name") or ""),
                    start_ns=int(s.get("startTimeUnixNano") or 0),
                    end_ns=int(s.get("endTimeUnixNano") or 0),
                    attributes=attributes(s.get("attributes") or []),
                    events=[{"name": str(e.get("name") or ""),
                             "time_ns": int(e.get("timeUnixNano") or 0),
                             "attributes": attributes(e.get("attributes") or [])}
                            for e in s.get("events") or []],
                    status_code=int(code), status_message=str(status.get("message") or ""),
                    resource=resource))
    return out


def _hex_id(value: str, size: int) -> str:
    """An id as lowercase hex, whether written as hex or as protobuf's base64."""
    text = str(value)
    if len(text) == 2 * size:
        try:
            bytes.fromhex(text)
            return text.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"id {text!r} is neither hex nor base64") from None
    if len(raw) != size:
        raise ValueError(f"id {text!r} is not {size} bytes")
    return raw.hex()


def attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    """An OTLP key/value list as a dict of plain values."""
    return {str(kv["key"]): value(kv.get("value") or {}) for kv in items}


def value(v: dict[str, Any]) -> Any:
    """One ``AnyValue`` as a plain value."""
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "arrayValue" in v:
        return [value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values") or [])
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def any_value(v: Any) -> dict[str, Any]:
    """A plain value as an ``AnyValue`` (the inverse of ``value``); a dict is JSON text,
    as the conventions write structured attributes."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return {"arrayValue": {"values": [{"stringValue": x} for x in v]}}
    if isinstance(v, str):
        return {"stringValue": v}
    return {"stringValue": json.dumps(v, ensure_ascii=False, sort_keys=True)}


def key_values(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """A dict as an OTLP key/value list; a None value is left out (not carried)."""
    return [{"key": k, "value": any_value(v)} for k, v in attrs.items() if v is not None]
