"""OpenTelemetry GenAI traces in and out, with the real third parties.

The official OpenAI instrumentation (``opentelemetry-instrumentation-openai-v2``)
watches a real ``openai`` client talking to the local chat-completions server
(``tests/runtime/chat_server.py``, a socket on 127.0.0.1); the SDK's in-memory
exporter catches the spans and the SDK's own OTLP encoder writes them as JSON.
``evalkit import otel`` reads that file and ``score`` grades it. The round trip
runs the committed stub recordings through ``export otel`` and back, and the
exported file is parsed with the OTLP protobuf types.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import OTEL_NO_ANSWER, conforms
from tests._multiply import ROOT, USAGE, evalkit, queue_times, times_suite
from tests.runtime.chat_server import ChatServer

KEY = "sk-planted-span-key-0123456789abcdef"
SUITE = times_suite("traced")


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["record"] for line in
            (run_dir / "events.jsonl").read_text("utf-8").splitlines()]


def traced_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run a two-call openai tool loop under the official instrumentation; the OTLP/JSON."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("opentelemetry.instrumentation.openai_v2")
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import encode_spans
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with ChatServer() as server:
            queue_times(server)
            client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
            tracer = provider.get_tracer("the-agent")
            with tracer.start_as_current_span("invoke_agent times", attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "times"}):
                # The user pasted a key into the question: it must not reach the disk.
                messages: list[Any] = [{"role": "user",
                                        "content": f"What is 17 times 23? (key {KEY})"}]
                reply = client.chat.completions.create(model="m-test", messages=messages)
                asked = reply.choices[0].message
                messages.append(asked.model_dump(exclude_none=True))
                args = json.loads(asked.tool_calls[0].function.arguments)
                messages.append({"role": "tool", "tool_call_id": "call_1",
                                 "content": str(args["a"] * args["b"])})
                client.chat.completions.create(model="m-test", messages=messages)
    finally:
        instrumentor.uninstrument()
    trace = tmp_path / "trace.json"
    trace.write_text(MessageToJson(encode_spans(exporter.get_finished_spans())), "utf-8")
    return trace


@pytest.mark.slow
def test_spans_of_the_official_openai_instrumentation_import_and_score(tmp_path, monkeypatch):
    trace = traced_agent(tmp_path, monkeypatch)
    runs, suite = tmp_path / "runs", tmp_path / "suite.yaml"
    suite.write_text(SUITE, "utf-8")
    done = evalkit("import", "otel", trace, "--out", runs)
    assert done.returncode == 0, done.stderr
    (run,) = (runs / "times").iterdir()
    stream = records(run)
    assert all(conforms(r) == [] for r in stream)
    assert [r["event"] for r in stream] == [
        "mission_started", "step_started", "tool_call", "tool_result", "step_started",
        "answer", "mission_finished"]
    call, result = stream[2], stream[3]
    assert call["tool"] == "multiply" and call["arguments"] == {"a": 17, "b": 23}
    assert call["usage"] == USAGE
    assert result["ok"] is True and result["output"] == "391" and result["exit_code"] is None
    assert stream[-2]["text"] == "17 times 23 is 391."
    assert stream[-1]["outcome"] == "answered"
    assert stream[-1]["usage"] == {**USAGE, "prompt_tokens": 42, "completion_tokens": 14,
                                   "total_tokens": 56, "calls": 2}
    meta = json.loads((run / "meta.json").read_text())["meta"]
    assert meta["model"] == "m-test" and meta["provider"] == "openai"
    for path in runs.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert "[REDACTED]" in stream[0]["objective"]
    scored = evalkit("score", "--suite", suite, "--runs", runs, "--report", tmp_path / "rep")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    (verdict,) = json.loads((tmp_path / "rep" / "report.json").read_text())["verdicts"]
    assert verdict["key"] == "times" and verdict["passed"] is True
    assert evalkit("verify", runs).returncode == 0


#: What a round trip cannot carry (``evalkit.contract.OTEL_NOT_CARRIED``): the reasons a
#: check gives from reply_rejected records (a forbidden tool named in a rejected reply, the
#: count of unreadable replies). The verdicts stay the same; only these reasons go.
LOST_REASONS = ("reached for", "replies could not be read")


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["good", "bad"])
def test_a_round_trip_keeps_every_verdict(tmp_path, corpus):
    source = ROOT / "recordings" / "stub" / corpus
    spans, runs = tmp_path / "spans.json", tmp_path / "runs"
    assert evalkit("export", "otel", source, "--out", spans).returncode == 0
    assert evalkit("import", "otel", spans, "--out", runs).returncode == 0
    # Judgments are recorded beside a run, not in a trace: the scripted judge grades again.
    judged = evalkit("judge", runs, "--suite", ROOT / "suites" / "stub")
    assert judged.returncode == 0, judged.stderr
    reports = []
    for where, out in ((source, "before"), (runs, "after")):
        done = evalkit("score", "--suite", ROOT / "suites" / "stub", "--runs", where,
                       "--allow-failures", "--report", tmp_path / out)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((tmp_path / out / "report.json").read_text())["verdicts"])
    before, after = reports
    assert [v["key"] for v in before] == [v["key"] for v in after]
    for b, a in zip(before, after, strict=True):
        assert (a["passed"], a["kpis"]["outcome"]) == (b["passed"], b["kpis"]["outcome"]), b["key"]
        assert a["kpis"]["tools"] == b["kpis"]["tools"] and a["kpis"]["tokens"] == b["kpis"]["tokens"]
        kept = [r for r in b["reasons"] if not any(lost in r for lost in LOST_REASONS)]
        assert a["reasons"] == kept, b["key"]
    if corpus == "good":
        assert all(v["passed"] for v in after)


@pytest.mark.slow
def test_exported_spans_parse_as_otlp_protobuf(tmp_path):
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf.json_format import Parse
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    spans = tmp_path / "spans.json"
    assert evalkit("export", "otel", ROOT / "recordings" / "stub" / "good", "--out",
                   spans).returncode == 0
    data = json.loads(spans.read_text())
    # OTLP/JSON writes ids as hex; protobuf's generic JSON mapping reads bytes as base64.
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    traces = Parse(json.dumps(data), TracesData())
    parsed = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(parsed) == sum(len(ss["spans"]) for rs in data["resourceSpans"]
                              for ss in rs["scopeSpans"])
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in parsed)
    agents = [s for s in parsed if s.name.startswith("invoke_agent ")]
    assert len(agents) == 12 and all(not s.parent_span_id for s in agents)
    attrs = {a.key: a.value for a in agents[0].attributes}
    assert attrs["gen_ai.operation.name"].string_value == "invoke_agent"
    assert attrs["evalkit.verdict"].string_value == "pass"
    assert attrs["evalkit.outcome"].string_value in ("answered", "awaiting_approval")
    ops = {a.value.string_value for s in parsed for a in s.attributes
           if a.key == "gen_ai.operation.name"}
    assert ops == {"invoke_agent", "chat", "execute_tool"}
    assert all(s.parent_span_id for s in parsed if s not in agents)


def span(name: str, attrs: dict[str, Any], span_id: str, parent: str | None = None,
         start: int = 1) -> dict[str, Any]:
    out = {"traceId": "ab" * 16, "spanId": span_id, "name": name,
           "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1),
           "attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int)
                           else {"stringValue": v}} for k, v in attrs.items()]}
    if parent:
        out["parentSpanId"] = parent
    return out


def otlp(*spans: dict[str, Any]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


@pytest.mark.slow
def test_a_trace_without_an_answer_is_incomplete_and_says_so(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(otlp(
        span("invoke_agent", {"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "lookup"}, "01" * 8),
        span("execute_tool", {"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "search"}, "02" * 8, "01" * 8, 2)))
    done = evalkit("import", "otel", trace, "--out", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "runs" / "lookup").iterdir()
    stream = records(run)
    assert all(conforms(r) == [] for r in stream)
    # Nothing the trace did not say: no objective, no model, no arguments, no answer.
    assert stream[0]["objective"] == "" and stream[0]["catalogue"] == ["search"]
    assert [r["event"] for r in stream] == [
        "mission_started", "step_started", "tool_call", "tool_result", "mission_finished"]
    assert stream[2]["arguments"] == {} and "usage" not in stream[2]
    assert stream[-1]["outcome"] == "incomplete" and stream[-1]["reason"] == OTEL_NO_ANSWER
    assert stream[-1]["usage"] == {"calls": 0}
    meta = json.loads((run / "meta.json").read_text())["meta"]
    assert meta["objective"] is None and meta["model"] is None


@pytest.mark.parametrize(("content", "says"), [
    ("{not json", "is not JSON"),
    ('{"spans": []}', "not OTLP traces"),
    (otlp(span("GET /", {"http.method": "GET"}, "01" * 8)), "holds no GenAI span"),
    (otlp(span("chat", {"gen_ai.operation.name": "chat"}, "01" * 8)), "names no agent"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, content, says):
    trace = tmp_path / "t.json"
    trace.write_text(content)
    done = evalkit("import", "otel", trace, "--out", tmp_path / "runs")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


def event(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "timeUnixNano": "1", "attributes": [
        {"key": "body", "value": {"stringValue": json.dumps(body)}}]}


@pytest.mark.slow
def test_messages_in_span_events_and_a_failing_tool_span_import(tmp_path):
    """The older conventions put messages in span events; a tool span with an error status
    is a failing result; a key planted in a span attribute is redacted on the way in."""
    chat1 = span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                            "gen_ai.usage.input_tokens": 9}, "02" * 8, "01" * 8, 2)
    chat1["events"] = [event("gen_ai.user.message", {"content": "Open the vault"}),
                       event("gen_ai.choice", {"finish_reason": "tool_calls", "message": {
                           "tool_calls": [{"id": "c1", "function": {
                               "name": "vault", "arguments": json.dumps({"token": KEY})}}]}})]
    tool = span("execute_tool vault", {"gen_ai.operation.name": "execute_tool",
                                       "gen_ai.tool.name": "vault", "gen_ai.tool.call.id": "c1",
                                       "gen_ai.tool.call.arguments": json.dumps({"token": KEY})},
                "03" * 8, "01" * 8, 4)
    tool["status"] = {"code": "STATUS_CODE_ERROR", "message": "the vault refused"}
    chat2 = span("chat m", {"gen_ai.operation.name": "chat"}, "04" * 8, "01" * 8, 6)
    chat2["events"] = [event("gen_ai.choice", {"finish_reason": "stop", "message": {
        "content": "It is locked."}})]
    agent = span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, "01" * 8)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.json").write_text(otlp(agent, chat1, tool, chat2))
    done = evalkit("import", "otel", tmp_path / "in", "--out", tmp_path / "runs",
                   "--key", "vault")
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "runs" / "vault").iterdir()
    stream = records(run)
    assert all(conforms(r) == [] for r in stream)
    assert stream[0]["objective"] == "Open the vault"
    assert [r["event"] for r in stream] == [
        "mission_started", "step_started", "tool_call", "tool_result", "step_started",
        "answer", "mission_finished"]
    assert stream[2]["usage"] == {"prompt_tokens": 9}  # no output tokens said: no total
    assert stream[3]["ok"] is False and stream[3]["error"] == "the vault refused"
    assert stream[-2]["text"] == "It is locked." and stream[-1]["outcome"] == "answered"
    for path in run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert stream[2]["arguments"] == {"token": "[REDACTED]"}


@pytest.mark.slow
def test_key_names_one_run_only_and_export_never_overwrites(tmp_path):
    two = tmp_path / "two.json"
    a = span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, "01" * 8)
    b = span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, "02" * 8, start=5)
    two.write_text(otlp(a, b))
    done = evalkit("import", "otel", two, "--out", tmp_path / "runs", "--key", "k")
    assert done.returncode == 2 and "--key names one run" in done.stderr
    out = tmp_path / "spans.json"
    out.write_text("{}")
    done = evalkit("export", "otel", ROOT / "recordings" / "stub" / "good", "--out", out)
    assert done.returncode == 2 and "already exists" in done.stderr
    assert out.read_text() == "{}"
    done = evalkit("export", "otel", tmp_path, "--out", tmp_path / "new.json")
    assert done.returncode == 2 and "no mission folder" in done.stderr
