"""The questions `evalkit sql --query NAME` asks, and `--show` prints: one owner of their SQL.

Each reads the views of ``evalkit.eval.views`` and the typed columns of tables
schema 2 (times, durations, integer token counts), so each is also an example
of asking the tables a question. docs/TABLES.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.errors import EvalkitError


@dataclass(frozen=True)
class NamedQuery:
    name: str
    meaning: str
    sql: str


QUERIES: tuple[NamedQuery, ...] = (
    NamedQuery("pass-rates", "missions passed, and the pass rate, per suite, configuration "
               "and split (one verdict per mission: `verdicts_latest`)", """\
SELECT suite, config, split,
       count(*) AS missions,
       count(*) FILTER (WHERE passed) AS passed,
       round(avg(passed::INTEGER), 3) AS pass_rate
FROM verdicts_latest
GROUP BY suite, config, split
ORDER BY suite, config NULLS FIRST, split
"""),
    NamedQuery("slowest-tools", "each tool's calls and how long they took, slowest median "
               "first (calls whose start was not recorded are counted, not timed)", """\
SELECT tool,
       count(*) AS calls,
       count(duration_ms) AS timed,
       round(median(duration_ms), 1) AS median_ms,
       round(max(duration_ms), 1) AS max_ms,
       round(sum(duration_ms), 1) AS total_ms
FROM tool_calls
GROUP BY tool
ORDER BY median_ms DESC NULLS LAST, tool
LIMIT 20
"""),
    NamedQuery("token-cost", "tokens and cost per run, as each run counted them at its end "
               "(`mission_finished.usage`), most tokens first", """\
SELECT r.run, r.run_id,
       e.calls AS model_calls,
       e.prompt_tokens, e.completion_tokens, e.total_tokens,
       e.cost,
       r.wall_s
FROM runs_latest r
JOIN events_latest e USING (events_path)
WHERE e.event = 'mission_finished'
ORDER BY e.total_tokens DESC NULLS LAST, e.cost DESC NULLS LAST, r.run
"""),
    NamedQuery("flaky", "missions that both passed and failed under one configuration "
               "(across repeats), with the repeats that failed", """\
SELECT suite, config, key,
       count(*) AS tries,
       count(*) FILTER (WHERE passed) AS passed,
       list(rep ORDER BY rep) FILTER (WHERE NOT passed) AS failed_reps
FROM verdicts_latest
GROUP BY suite, config, key
HAVING count(*) FILTER (WHERE passed) BETWEEN 1 AND count(*) - 1
ORDER BY suite, config NULLS FIRST, key
"""),
)


def named(name: str) -> NamedQuery:
    """The named query ``name``; an unknown name is one sentence listing the known ones."""
    for query in QUERIES:
        if query.name == name:
            return query
    known = ", ".join(q.name for q in QUERIES)
    raise EvalkitError(f"there is no named query {name!r}; the named queries are {known}")
