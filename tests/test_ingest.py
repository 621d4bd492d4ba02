"""Ingest: JSONL run directories -> a Parquet dataset that says what the reader says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.store import dataset as ds
from evalkit.store.ingest import discover, ingest
from evalkit.store.reader import read_events_file
from tests._runs import bare, call, envelope, finished, started, write_corpus, write_run
from tests._stream_builders import good_run, write_stream


def _rows(out: Path, table: str) -> list[dict]:
    order = "run" if table == "runs" else "run, line"
    con = duckdb.connect()
    try:
        relation = con.sql(f"SELECT * FROM read_parquet('{out}/{table}.parquet') ORDER BY {order}")
        names = [d[0] for d in relation.description]
        return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]
    finally:
        con.close()


def test_records_round_trip_and_counts_match_the_reader(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    result = ingest(runs)
    events = _rows(result.out, "events")
    by_run = {r["run"]: r for r in _rows(result.out, "runs")}
    assert result.runs == len(by_run) and result.events == len(events)
    for path in sorted(runs.glob("*/events.jsonl")):
        read = read_events_file(path)
        run = path.parent.name
        rows = [e for e in events if e["run"] == run]
        assert [orjson.loads(r["record"]) for r in rows] == read.records, run
        assert [r["line"] for r in rows] == read.lines, run
        assert {r["events_path"] for r in rows} <= {f"{run}/events.jsonl"}
        counts = by_run[run]
        assert (counts["records"], counts["blank"], counts["torn"], counts["non_object"]) == (
            len(read.records), read.blank, read.torn, read.non_object), run


def test_every_column_matches_the_python_reference(tmp_path: Path) -> None:
    """Every row of the corpus is dataset.event_columns of its line, ``record`` text too."""
    runs = tmp_path / "runs"
    write_corpus(runs)
    out = ingest(runs).out
    lines: dict[tuple[str, int], str] = {}
    for path in runs.glob("*/events.jsonl"):
        text = path.read_bytes().decode("utf-8", "replace")
        for number, line in enumerate(text.split("\n"), start=1):
            lines[(path.parent.name, number)] = line
    for row in _rows(out, "events"):
        kind, record, env = ds.classify(lines[(row["run"], row["line"])])
        assert kind == "record"
        want = ds.event_columns(record, env)
        assert {k: row[k] for k in want} == want, (row["run"], row["line"])


def test_envelopes_and_bare_records_read_the_same(tmp_path: Path) -> None:
    records = [started(), call(1, "mcp.a"), finished()]
    write_run(tmp_path / "runs" / "env", [envelope(i, r) for i, r in enumerate(records, 1)])
    write_run(tmp_path / "runs" / "bare", [bare(r) for r in records])
    out = ingest(tmp_path / "runs").out
    rows = _rows(out, "events")
    env = [r for r in rows if r["run"] == "env"]
    plain = [r for r in rows if r["run"] == "bare"]
    assert [orjson.loads(r["record"]) for r in env] == [orjson.loads(r["record"]) for r in plain]
    assert [r["seq"] for r in env] == [1, 2, 3] and all(r["ts"] for r in env)
    assert [r["seq"] for r in plain] == [None] * 3 and [r["ts"] for r in plain] == [None] * 3
    assert [r["event"] for r in env] == ["mission_started", "tool_call", "mission_finished"]
    assert env[2]["total_tokens"] == 120 and env[0]["run_id"] == "run_x-1"


def test_model_and_tool_calls_are_ingested(tmp_path: Path) -> None:
    model = [{"call": 1, "at": "t1", "kind": "mission",
              "request": {"messages": [{"role": "user", "content": "hi"}], "extra": {}},
              "reply": {"content": "hello", "tool_calls": [],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                  "total_tokens": 4}}}]
    tools = [{"call": 0, "at": "t0", "catalogue": [{"name": "mcp.a"}]},
             {"call": 1, "at": "t2", "tool": "mcp.a", "arguments": {"q": 1},
              "result": {"exit_code": 0, "stdout": "ok", "stderr": "", "structured": None}}]
    write_run(tmp_path / "runs" / "r", [bare(started()), bare(finished())],
              meta={"run_id": "run_meta", "meta": {"objective": "o"}}, model=model, tools=tools)
    write_run(tmp_path / "runs" / "none", [bare(finished())])
    write_run(tmp_path / "runs" / "two", [bare(started(run_id="first", objective="a")),
                                          bare(finished("incomplete")),
                                          bare(started(run_id="second", objective="b")),
                                          bare(finished())])
    out = ingest(tmp_path / "runs").out
    (m,) = _rows(out, "model_calls")
    assert (m["run"], m["path"], m["call"], m["kind"], m["content"], m["total_tokens"]) == (
        "r", "r/model.jsonl", 1, "mission", "hello", 4.0)
    assert orjson.loads(m["record"]) == model[0]
    (t1,) = _rows(out, "tool_calls")  # schema 2: the catalogue line is tool_catalogue's
    (t0,) = _rows(out, "tool_catalogue")
    assert json.loads(t0["descriptor"]) == {"name": "mcp.a"} and t0["name"] == "mcp.a"
    assert (t1["tool"], json.loads(t1["arguments"]), t1["exit_code"]) == ("mcp.a", {"q": 1}, 0)
    runs = {r["run"]: r for r in _rows(out, "runs")}
    assert json.loads(runs["r"]["meta"])["run_id"] == "run_meta"
    assert runs["none"]["meta"] is None and runs["none"]["run_id"] is None
    assert runs["r"]["finished"] and runs["r"]["outcome"] == "answered"
    two = runs["two"]  # two missions appended to one file: the later one is the run
    assert (two["run_id"], two["objective"], two["outcome"]) == ("second", "b", "answered")


def test_empty_root_gives_empty_tables_with_their_schema(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    out = ingest(tmp_path / "runs").out
    for table, schema in ds.SCHEMAS.items():
        read = pq.read_table(out / f"{table}.parquet")
        assert read.num_rows == 0 and read.schema.names == schema.names
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["format"] == "evalkit-dataset" and manifest["schema"] == 2
    assert manifest["runs"] == 0 and manifest["events"] == 0


def test_reingest_is_idempotent_and_skips_the_dataset(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    nested = write_run(runs / "deep" / "er" / "run_1", [bare(finished())])
    first = ingest(runs)
    before = {p.name: p.read_bytes() for p in first.out.iterdir()}
    second = ingest(runs)
    after = {p.name: p.read_bytes() for p in second.out.iterdir()}
    assert before == after
    # A stray events.jsonl inside the dataset folder never becomes a run, and is not
    # deleted by replacing the dataset either: that ingest is refused, naming it.
    (first.out / "events.jsonl").write_text(bare(finished()) + "\n")
    assert nested in discover(runs, skip=first.out)
    assert first.out / "events.jsonl" not in [r / "events.jsonl" for r in discover(runs, skip=first.out)]
    with pytest.raises(EvalkitError, match="it holds events.jsonl"):
        ingest(runs)
    assert {p.name: p.read_bytes() for p in first.out.iterdir() if p.name != "events.jsonl"} == before
    assert not list(tmp_path.glob("runs/.dataset.parquet*"))


def test_ingest_replaces_an_earlier_dataset_and_nothing_else(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    precious = tmp_path / "notes.txt"
    precious.write_text("mine")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "mine.txt").write_text("mine too")
    for taken in (precious, folder):
        with pytest.raises(EvalkitError, match="exists and is not an evalkit dataset"):
            ingest(runs, taken)
        result = CliRunner().invoke(main, ["ingest", str(runs), "--out", str(taken)])
        assert result.exit_code == 2
        assert "exists and is not an evalkit dataset" in result.output
        assert "Traceback" not in result.output
    assert precious.read_text() == "mine" and (folder / "mine.txt").read_text() == "mine too"
    assert [p.name for p in folder.iterdir()] == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ingest(runs, empty).runs == ingest(runs, empty).runs > 0  # then replaced: a dataset
    result = CliRunner().invoke(main, ["ingest", str(runs), "--out", str(precious / "ds")])
    assert result.exit_code == 2 and "cannot write a dataset at" in result.output
    assert "Traceback" not in result.output and precious.read_text() == "mine"


def test_ingest_never_deletes_files_beside_a_dataset_nor_replaces_one_with_nothing(
        tmp_path: Path) -> None:
    """Replacing a dataset folder takes everything in it: a folder holding anything but
    the dataset's own files is refused; so is ingesting a dataset into itself or a folder
    with no run over an earlier dataset, each of which would leave nothing of it."""
    runs = tmp_path / "runs"
    write_corpus(runs)
    ds_path = ingest(runs, tmp_path / "ds").out
    names = [p.name for p in ds_path.iterdir()]
    kept = shutil.copytree(ds_path, tmp_path / "kept")
    (kept / "precious.txt").write_text("mine")
    (kept / "sub").mkdir()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / ds.MANIFEST).write_text("{}")
    (tmp_path / "nothing").mkdir()
    before = {p: p.read_bytes() for folder in (ds_path, kept, foreign)
              for p in folder.iterdir() if p.is_file()}
    for source, out, words in ((runs, kept, "it holds precious.txt, sub, which replacing it"),
                               (runs, foreign, "is not an evalkit dataset"),
                               (ds_path, ds_path, "it holds the runs being ingested"),
                               (runs, runs, "it holds the runs being ingested"),
                               (tmp_path / "nothing", ds_path, "found no run directory")):
        result = CliRunner().invoke(main, ["ingest", str(source), "--out", str(out)])
        assert result.exit_code == 2, (source, out, result.output)
        assert words in result.output and "Traceback" not in result.output
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in kept.iterdir()) == sorted([*names, "precious.txt", "sub"])
    assert not list(tmp_path.glob(".*.tmp-*"))
    # A new folder with no run is still written: which folders hold no stream is a fact.
    assert ingest(tmp_path / "nothing", tmp_path / "fresh").runs == 0


def test_the_manifest_names_folders_that_hold_no_stream(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "own", [bare(finished())])
    write_run(runs / "below" / "run_1", [bare(finished())])
    write_run(runs / "two" / "a" / "b", [bare(finished())])
    write_run(runs / "three" / "a" / "b" / "c", [bare(finished())])  # too deep for score
    (runs / "empty").mkdir()
    (runs / "meta-only").mkdir()
    (runs / "meta-only" / "meta.json").write_text("{}")
    (runs / "loose.jsonl").write_text(bare(finished()) + "\n")  # a file: score reads it itself
    result = ingest(runs)
    manifest = json.loads((result.out / ds.MANIFEST).read_text())
    assert manifest[ds.WITHOUT_STREAM] == ["empty", "meta-only", "three"]


def test_invalid_utf8_and_binary_do_not_crash(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "bin", bytes(range(256)) * 64)
    write_run(runs / "utf", b'{"event":"answer","text":"\xff\xfe caf\xe9","outcome":"o"}\n')
    result = ingest(runs)
    rows = {r["run"]: r for r in _rows(result.out, "runs")}
    read = read_events_file(runs / "bin" / "events.jsonl")
    assert (rows["bin"]["records"], rows["bin"]["torn"] + rows["bin"]["blank"]
            + rows["bin"]["non_object"]) == (len(read.records), read.skipped)
    (event,) = _rows(result.out, "events")
    assert event["text"] == "\ufffd\ufffd caf\ufffd"


def test_run_dir_at_root_and_custom_out(tmp_path: Path) -> None:
    write_run(tmp_path / "one", [bare(finished())])
    result = ingest(tmp_path / "one", tmp_path / "elsewhere" / "ds")
    (row,) = _rows(result.out, "runs")
    assert (row["run"], row["events_path"]) == (".", "events.jsonl")
    assert result.bytes == (tmp_path / "one" / "events.jsonl").stat().st_size


def test_worker_processes_give_the_same_tables_as_one_process(tmp_path):
    runs = tmp_path / "runs"
    for i in range(7):
        write_stream(runs / f"m{i}" / "events.jsonl", good_run(), tail="{torn" if i == 3 else "")
    one = ingest(runs, tmp_path / "one", workers=1)
    two = ingest(runs, tmp_path / "two", workers=2, batch_bytes=1)  # a batch a run
    assert (one.runs, one.events) == (two.runs, two.events) == (7, 49)
    for table in ("runs", "events", "model_calls", "tool_calls", "tool_catalogue"):
        a = pq.read_table(tmp_path / "one" / f"{table}.parquet")
        b = pq.read_table(tmp_path / "two" / f"{table}.parquet")
        assert a.to_pylist() == b.to_pylist(), table


# --- any spelling of a line, as the run store writes it or as another writer might ---

_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0.0, -0.0, 1e16, 1e-7, 2.0**63, 3.0]),
                    st.text(max_size=6), st.sampled_from(["\x1f", ",\"record\":", "{", "é"]))
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["a", "which", "record", "seq"]) | st.text(max_size=4),
                                       inner, max_size=3), max_leaves=6)
_EVENT_KEYS = ["event", "branch", "index", "tool", "call", "ok", "injected", "repairing", "ran",
               "grounded", "verified", "repairs", "outcome", "reason", "steps", "max_steps",
               "elapsed_s", "budget", "usage", "text", "run_id", "protocol", "profile",
               "sandbox", "objective", "plan", "schema_version", "record", "seq"]


@st.composite
def _event(draw: st.DrawFn) -> dict:
    record = {"event": draw(st.sampled_from(["mission_started", "mission_finished",
                                              "tool_call", "answer", "step_started"]) | _JSON)}
    for name in draw(st.lists(st.sampled_from(_EVENT_KEYS), unique=True, max_size=6)):
        if name == "usage":
            record[name] = draw(st.dictionaries(st.sampled_from(
                ["prompt_tokens", "completion_tokens", "total_tokens", "calls", "cost"]),
                _SCALAR, max_size=3) | _JSON)
        elif name == "budget":
            record[name] = draw(st.fixed_dictionaries({"which": _SCALAR}) | _JSON)
        else:
            record[name] = draw(_JSON)
    return record


@st.composite
def _plain(draw: st.DrawFn, keys: dict) -> dict:
    return {k: draw(v) for k, v in keys.items() if draw(st.booleans())}


_MODEL = {"call": _SCALAR, "at": _SCALAR, "kind": _SCALAR,
          "reply": st.fixed_dictionaries({}, optional={
              "content": _SCALAR, "usage": st.dictionaries(st.sampled_from(
                  ["prompt_tokens", "completion_tokens", "total_tokens"]), _SCALAR) | _JSON})
          | _JSON}
_TOOLS = {"call": _SCALAR, "at": _SCALAR, "tool": _SCALAR, "arguments": _JSON,
          "result": st.fixed_dictionaries({}, optional={"exit_code": _SCALAR}) | _JSON,
          "catalogue": _JSON}


def _text(value: object, spaced: bool) -> str:
    """A line as the run store writes it (orjson's own text) or as another writer might."""
    if not spaced:
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # integers past 64 bits
            pass
    return json.dumps(value, ensure_ascii=spaced)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=st.lists(st.tuples(_event(), st.booleans(), st.booleans(), _SCALAR,
                                 st.dictionaries(st.sampled_from(["at", "x"]), _JSON)),
                       max_size=8),
       model=st.lists(st.tuples(_plain(_MODEL), st.booleans()), max_size=4),
       tools=st.lists(st.tuples(_plain(_TOOLS), st.booleans()), max_size=4))
@pytest.mark.slow
def test_every_line_reads_as_the_reference_either_way(tmp_path_factory, events, model, tools):
    """Whatever the spelling, a row says what dataset.py says of the line the reader read;
    its ``record`` text is orjson's serialisation of the record (``dataset.dumps``),
    which for a line the run store wrote is the line, or its envelope's record."""
    runs = tmp_path_factory.mktemp("runs")
    run = runs / "r"
    run.mkdir()
    lines = {
        "events": [_text({"seq": seq, **head, "record": r} if wrapped else r, spaced)
                   for r, wrapped, spaced, seq, head in events],
        "model": [_text(m, spaced) for m, spaced in model],
        "tools": [_text(t, spaced) for t, spaced in tools],
    }
    for name, text in lines.items():
        (run / f"{name}.jsonl").write_text("".join(f"{line}\n" for line in text), encoding="utf-8")
    out = ingest(runs, runs / "ds").out
    got = {"events": _rows(out, "events"), "model": _rows(out, "model_calls"),
           "tools": _rows(out, "tool_calls")}
    for name, columns in (("events", None), ("model", ds.model_columns),
                          ("tools", ds.tool_columns)):
        want = []
        for number, line in enumerate(lines[name], start=1):
            kind, record, env = ds.classify(line)
            # Schema 2: a catalogue line is tool_catalogue's rows, not a call.
            if kind == "record" and not (name == "tools" and ds.is_catalogue(
                    env if env is not None else record)):
                row = (ds.event_columns(record, env) if columns is None
                       else columns(env if env is not None else record))
                want.append((number, row))
        assert [r["line"] for r in got[name]] == [n for n, _ in want], name
        for row, (number, expected) in zip(got[name], want, strict=True):
            assert {k: row[k] for k in expected} == expected, (name, row["line"])
            line = lines[name][number - 1]
            _, record, env = ds.classify(line)
            if ds.dumps(env if env is not None else record) == line:  # as the run store writes
                assert row["record"] == line if env is None or name != "events" else \
                    line.endswith(f',"record":{row["record"]}}}'), (name, row["line"])


class _Folds:
    """A derivation that keeps what ingest hands its ``fold``, by events path."""

    schemas: dict = {}
    manifest: dict = {}

    def __init__(self) -> None:
        self.got: dict[str, tuple] = {}

    def fold(self, path: str, records: list, lines: list, skipped: int) -> tuple:
        return path, records, lines, skipped

    def __call__(self, events: object, runs: object, folded: list) -> list:
        self.got.update((path, rest) for path, *rest in folded)
        return []


_ODD_LINES = st.sampled_from([
    "", "  ", "{\"event\":\"to", "[1]", "7", "NaN", "{,}", "\x00\x01",
    '{"event":"answer","text":"cut \\ud83d","outcome":"answered"}',
    '{"seq":3,"record":{"event":"answer","text":"x"},"record":{"event":"tool_call"}}',
    '{"seq":4,"record":[1]}', '{"seq":5,"event":"answer","record":{"event":"x"}}',
    '{"event":"mission_finished","steps":1e400}', '{"a":1,"a":2}'])


@pytest.mark.slow
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(streams=st.lists(st.lists(
    st.tuples(_event(), st.booleans(), st.booleans(), _SCALAR).map(
        lambda e: _text({"seq": e[3], "record": e[0]} if e[1] else e[0], e[2])) | _ODD_LINES,
    max_size=8), min_size=1, max_size=3))
def test_a_derivation_folds_the_records_the_reader_reads(tmp_path_factory, streams):
    """What ingest hands a derivation's fold is reader.parse_text's reading, line for line."""
    runs = tmp_path_factory.mktemp("runs")
    for i, lines in enumerate(streams):
        (runs / f"r{i}").mkdir()
        (runs / f"r{i}" / "events.jsonl").write_text("".join(f"{line}\n" for line in lines),
                                                     encoding="utf-8")
    folds = _Folds()
    ingest(runs, runs / "ds", derive=folds, workers=1)
    assert sorted(folds.got) == [f"r{i}/events.jsonl" for i in range(len(streams))]
    for path, (records, lines, skipped) in folds.got.items():
        read = read_events_file(runs / path)
        assert (records, lines, skipped) == (read.records, read.lines, read.skipped), path


def test_a_tool_call_with_string_arguments_is_ingested(tmp_path: Path) -> None:
    """DuckDB once cast the unwrapped string back to JSON: {"arguments":"x"} failed."""
    run = tmp_path / "runs" / "r"
    write_run(run, [bare(finished())])
    (run / "tools.jsonl").write_text('{"call":1,"arguments":"x"}\n{"call": 2, "arguments": "y"}\n'
                                     '{"call":0,"catalogue":"c"}\n{"call":0,"catalogue":1e+16}\n')
    out = ingest(tmp_path / "runs").out
    rows = _rows(out, "tool_calls")  # schema 2: arguments as JSON text, catalogues apart
    assert [json.loads(r["arguments"]) for r in rows] == ["x", "y"]
    listed = _rows(out, "tool_catalogue")
    assert [json.loads(r["descriptor"]) for r in listed] == ["c", 1e16]


@pytest.mark.slow
def test_a_script_without_a_main_guard_can_ingest_with_workers(tmp_path: Path) -> None:
    """Worker processes must not run the caller's script again: one calling ingest at its
    top level (no ``if __name__ == "__main__":``) once made each worker ingest in turn."""
    runs = tmp_path / "runs"
    for i in range(5):
        write_stream(runs / f"m{i}" / "events.jsonl", good_run())
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from evalkit.eval.tables import ingest\n"
        "from evalkit.report.verdict_table import VerdictTable\n"
        "result = ingest(Path(sys.argv[1]), Path(sys.argv[2]), workers=2,\n"
        "                gather=VerdictTable())\n"
        "print('ingested', result.runs)\n")
    done = subprocess.run([sys.executable, str(script), str(runs), str(tmp_path / "lib")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ingested", "5"]
    cli = CliRunner().invoke(main, ["ingest", str(runs), "--out", str(tmp_path / "cli")])
    assert cli.exit_code == 0, cli.output
    for name in [*ds.TABLES, "summaries", "verdicts"]:
        lib = pq.read_table(tmp_path / "lib" / f"{name}.parquet")
        assert lib.to_pylist() == pq.read_table(tmp_path / "cli" / f"{name}.parquet").to_pylist()
    assert (tmp_path / "lib" / ds.MANIFEST).read_bytes() == \
        (tmp_path / "cli" / ds.MANIFEST).read_bytes()


class _DiesInAWorker:
    """A derivation that kills any worker process running it (and derives nothing)."""

    schemas: dict = {}
    manifest: dict = {}

    def __init__(self) -> None:
        import os

        self.parent = os.getpid()

    def fold(self, *stream: object) -> None:
        return None

    def __call__(self, events: object, runs: object, folded: object) -> list:
        import os

        if os.getpid() != self.parent:
            os._exit(3)
        return []


@pytest.mark.slow
def test_a_worker_process_that_dies_fails_the_ingest(tmp_path: Path) -> None:
    """Run in a process of its own: under pytest-xdist this process has threads, and
    ``evalkit.parallel`` then (rightly) forks no workers at all."""
    runs = tmp_path / "runs"
    for i in range(40):
        write_stream(runs / f"m{i:02}" / "events.jsonl", good_run())
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from evalkit.errors import EvalkitError\n"
        "from evalkit.store.ingest import ingest\n"
        "from tests.test_ingest import _DiesInAWorker\n"
        "try:\n"
        "    ingest(Path(sys.argv[1]), Path(sys.argv[2]), workers=2, batch_bytes=1,\n"
        "           derive=_DiesInAWorker())\n"
        "except EvalkitError as exc:\n"
        "    print(exc.message)\n"
        "    sys.exit(7)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(runs), str(tmp_path / "ds")],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 7, done.stdout + done.stderr
    assert "worker process stopped" in done.stdout
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob(".ds.tmp-*"))


_STALLS = """
import sys, time
from pathlib import Path
from evalkit.store.ingest import ingest

class Stall:  # three small runs, one batch: ingest converts it in this process
    schemas, manifest = {}, {}
    def fold(self, *stream):
        return None
    def __call__(self, *args):
        print("converting", flush=True)
        time.sleep(60)

ingest(Path(sys.argv[1]), Path(sys.argv[2]), derive=Stall())
"""


@pytest.mark.slow
def test_what_an_ingest_killed_with_minus_nine_left_goes_with_the_next_ingest(
        tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i in range(3):
        write_stream(runs / f"m{i}" / "events.jsonl", good_run())
    killed = subprocess.Popen([sys.executable, "-c", _STALLS, str(runs), str(tmp_path / "ds")],
                              stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None and killed.stdout.readline() == "converting\n"
    killed.kill()
    killed.wait()
    left = list(tmp_path.glob(".ds.tmp-*"))
    assert len(left) == 1 and left[0].name.endswith(f"-{killed.pid}")

    here = left[0].name.removesuffix(f"-{killed.pid}")
    before_hosts = tmp_path / f".ds.old-{killed.pid}"  # named as ingest named them before
    running = tmp_path / f"{here}-{os.getppid()}"  # a process that is still there
    elsewhere = tmp_path / f".ds.tmp-another-host-{killed.pid}"  # cannot be told from here
    unrelated = tmp_path / f".dsx.tmp-{killed.pid}"
    for folder in (before_hosts, running, elsewhere, unrelated):
        folder.mkdir()
    ingest(runs, tmp_path / "ds")
    assert json.loads((tmp_path / "ds" / ds.MANIFEST).read_text())["runs"] == 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(
        [running.name, elsewhere.name, unrelated.name])
