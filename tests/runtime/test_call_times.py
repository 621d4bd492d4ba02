"""A run the runtime records says when each model and tool call began, so the tables
time every call (tables schema 2: ``start_ts``, ``duration_ms``) without a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.eval.tables import open_dataset
from evalkit.store.dataset import when
from evalkit.store.ingest import ingest
from tests._agent import answer, call
from tests.runtime.conftest import RunMission


@pytest.mark.slow
def test_every_recorded_call_carries_its_start_and_the_tables_time_it(
        mission: RunMission, tmp_path: Path) -> None:
    done = mission([call("mcp.add", a=2, b=3), answer("The sum is 5.")])
    assert done.run_dir is not None
    for line in done.model_calls:  # a tool call's start is its tool_call record's time
        assert when(line["started"]) <= when(line["at"]), line
    con = open_dataset(ingest(tmp_path / "runs", tmp_path / "ds").out)
    try:
        for table, calls in (("model_calls", 2), ("tool_calls", 1)):
            found = con.execute(
                f"SELECT count(*), count(start_ts), bool_and(duration_ms >= 0), "
                f"bool_and(duration_ms = epoch_ms(ts) - epoch_ms(start_ts)) FROM {table}"
            ).fetchone()
            assert found == (calls, calls, True, True), table
    finally:
        con.close()
