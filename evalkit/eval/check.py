"""``check``: refuse a suite that cannot be graded, before a model is spent on it.

A suite that loads can still be ungradeable: a flag outside the vocabulary
makes the by-flag table lie, a prompt that names its tool measures reading
rather than reasoning, too few held-out missions make the test half noise.
Every rule runs on every mission and all problems come back together, each
one plain sentence naming the mission and field, so a suite is fixed in one
pass. Every other subcommand runs ``check`` first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from evalkit import contract
from evalkit.eval.suite import SPLITS, Mission, Suite, load_suite

#: The held-out share a suite must keep, inclusive, as (numerator, denominator).
MIN_TEST_SHARE, MAX_TEST_SHARE = (1, 4), (2, 5)
MIN_TEST_MISSIONS = 3

_BOUNDARY = "A-Za-z0-9_"


@dataclass
class CheckResult:
    """What ``check`` found; ``summary`` is the one line a clean suite prints."""

    suite: Suite
    problems: list[str]
    summary: str

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def message(self) -> str:
        """The summary when clean; otherwise a header and every problem on its own line."""
        if self.ok:
            return self.summary
        return "\n".join([self.summary + ":", *(f"  - {p}" for p in self.problems)])


def check_path(path: str | Path) -> CheckResult:
    """Load then check; a ``SuiteError`` from loading propagates unchanged."""
    return check_suite(load_suite(path))


def check_suite(suite: Suite) -> CheckResult:
    """Run every rule of the spec's "check" section over one loaded suite."""
    problems: list[str] = []
    pattern = _compile(suite.identifier_pattern)
    published = _published(suite.agent_flags)
    seen: dict[str, int] = {}
    for index, mission in enumerate(suite.missions):
        where = _where(mission, index)
        if mission.key.strip():
            if mission.key in seen:
                problems.append(f"{where} field 'key': already used by mission #{seen[mission.key]};"
                                " keys must be unique (each names a run directory)")
            else:
                seen[mission.key] = index + 1
        problems += [f"{where} field {name!r}: {text}"
                     for name, text in _mission_problems(suite, mission, pattern, published)]
    problems += _suite_problems(suite)
    return CheckResult(suite, problems, _summary(suite, problems))


def _where(mission: Mission, index: int) -> str:
    return f"mission {mission.key!r}" if mission.key.strip() else f"mission #{index + 1}"


# -- per mission -------------------------------------------------------------


def _mission_problems(suite: Suite, m: Mission, pattern: re.Pattern[str] | None | str,
                      published: dict[str, bool]) -> Iterable[tuple[str, str]]:
    """(field, sentence) for every rule this mission breaks."""
    if not m.key.strip():
        yield "key", "is empty; every mission needs a key (it names its run directory)"
    elif m.key in (".", "..") or any(c in m.key for c in "/\\\0"):
        yield "key", f"{m.key!r} cannot name a run directory; avoid / \\ . and .."
    if m.flag not in suite.vocabulary:
        yield "flag", f"{m.flag!r} is not in the vocabulary ({', '.join(suite.vocabulary)})"
    if not m.prompt.strip():
        yield "prompt", "is empty; it is given verbatim as the objective"
    for name, hint in (("must", "what a good answer shows"), ("must_not", "what it must avoid")):
        if not any(item.strip() for item in getattr(m, name)):
            yield name, f"is missing or empty; write {hint}, for the reader"
    if not m.because.strip():
        yield "because", "is missing or empty; say why this mission exists"
    if suite.tools is not None:
        for name in ("expects_tools", "forbids_tools"):
            for tool in getattr(m, name) or ():
                if tool not in suite.tools:
                    yield name, f"{tool!r} is not a served tool ({', '.join(suite.tools) or 'none'})"
        for tool, said in _tools_named(m.prompt, suite.tools):
            also = "" if said.lower() == tool.lower() else f" (as {said!r})"
            yield "prompt", (f"names the served tool {tool!r}{also}; write it as a person would, "
                             "without tool names")
    if isinstance(pattern, re.Pattern):
        known = set(suite.assets) | set(suite.tools or ())
        for ident in dict.fromkeys(x.group(0) for x in pattern.finditer(m.prompt)):
            if ident and ident not in known:
                yield "prompt", (f"names {ident!r}, which is neither a declared asset nor a tool; "
                                 "declare it under 'assets'")
    if m.split not in SPLITS:
        yield "split", f"{m.split!r} is not a split; use train or test"
    if m.expects_outcome is not None and m.expects_outcome not in contract.OUTCOMES:
        yield "expects_outcome", (f"{m.expects_outcome!r} is not an outcome "
                                  f"({', '.join(contract.OUTCOMES)})")
    if m.max_reply_rejected is not None and m.max_reply_rejected < 0:
        yield "max_reply_rejected", f"{m.max_reply_rejected} is negative; use 0 or more"
    for name in ("answer_must_match", "answer_must_not_match"):
        for regex in getattr(m, name) or ():
            error = _compile(regex)
            if isinstance(error, str):
                yield name, f"pattern {regex!r} does not compile: {error}"
    yield from (("flags", text) for text in _flag_problems(m.flags, published))


def _tools_named(prompt: str, tools: Iterable[str]) -> Iterable[tuple[str, str]]:
    """(tool, the text naming it) for each served tool the prompt names."""
    tools = tuple(dict.fromkeys(tools))
    matcher, names = _tool_matcher(tools)
    if matcher is None:
        return
    said: dict[str, str] = {}
    for hit in matcher.finditer(prompt):
        said.setdefault(hit.group(1).lower(), hit.group(1))
    for tool in tools:
        for name in names[tool]:
            if name.lower() in said:
                yield tool, said[name.lower()]
                break


@functools.lru_cache(maxsize=32)
def _tool_matcher(tools: tuple[str, ...]) -> tuple[re.Pattern[str] | None, dict[str, tuple[str, ...]]]:
    """One pattern finding every tool name or last dotted segment, overlaps included."""
    names = {t: tuple(dict.fromkeys(n for n in (t, t.rsplit(".", 1)[-1]) if n)) for t in tools}
    every = sorted({n for ns in names.values() for n in ns}, key=len, reverse=True)
    if not every:
        return None, names
    alternation = "|".join(re.escape(n) for n in every)
    pattern = rf"(?=(?<![{_BOUNDARY}])({alternation})(?![{_BOUNDARY}]))"
    return re.compile(pattern, re.IGNORECASE), names


def _published(agent_flags: tuple[str, ...] | None) -> dict[str, bool]:
    """Flag name -> whether it takes a value, for the agent the suite targets."""
    takes = {f["flag"]: f["value"] is not None for f in contract.CLI_FLAGS}
    if agent_flags is None:
        return takes
    published: dict[str, bool] = {}
    for entry in agent_flags:
        name, sep, _ = entry.strip().replace("=", " ", 1).partition(" ")
        published[name] = bool(sep) or takes.get(name, False)
    return published


def _flag_problems(tokens: tuple[str, ...], published: dict[str, bool]) -> Iterable[str]:
    """Read mission CLI tokens as a command line would, and say what is wrong with them."""
    harness = set(contract.harness_flags())
    taking = {f["flag"] for f in contract.CLI_FLAGS if f["value"] is not None}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or token == "--":
            yield f"{token!r} is not a flag (a flag starts with --); values follow their flag"
            continue
        name, eq, _ = token.partition("=")
        if name in harness:
            yield f"{name!r} is set by the harness itself, never by a mission"
            takes_value = name in taking
        elif name not in published:
            yield f"{name!r} is not a flag the agent publishes"
            # Unknown arity: read a following non-flag as its value rather than blame it too.
            takes_value = i < len(tokens) and not tokens[i].startswith("--")
        else:
            takes_value = published[name]
            if eq and not takes_value:
                yield f"{name!r} takes no value, but is given one in {token!r}"
        if takes_value and not eq:
            if i < len(tokens):
                i += 1
            else:
                yield f"{name!r} needs a value after it"


# -- the suite as a whole ----------------------------------------------------


def _suite_problems(suite: Suite) -> Iterable[str]:
    pattern = _compile(suite.identifier_pattern)
    if isinstance(pattern, str):
        yield (f"suite field 'identifier_pattern': {suite.identifier_pattern!r} "
               f"does not compile: {pattern}")
    vocabulary = ", ".join(suite.vocabulary)
    for flag in suite.claimed_flags or ():
        if flag not in suite.vocabulary:
            yield f"suite field 'flags': {flag!r} is not in the vocabulary ({vocabulary})"
    captured = {m.flag for m in suite.missions}
    claimed_by = "claimed" if suite.claimed_flags is not None else \
        "in the vocabulary, which a suite without 'flags' claims whole"
    for flag in dict.fromkeys(suite.claimed):
        if flag in suite.vocabulary and flag not in captured:
            yield f"suite field 'flags': no mission captures {flag!r}, {claimed_by}"
    total, held = len(suite.missions), len(suite.split_of("test"))
    if held < MIN_TEST_MISSIONS:
        yield (f"suite field 'missions': only {held} test mission{'s' if held != 1 else ''}; "
               f"hold out at least {MIN_TEST_MISSIONS} with split: test")
    if total and not _share_ok(held, total):
        yield (f"suite field 'missions': {held} of {total} missions held out "
               f"({round(100 * held / total)}%); the test share must be 25% to 40%")
    keys = {m.key for m in suite.missions}
    for index, change in enumerate(suite.rubric_changes):
        where = f"rubric change #{index + 1}"
        for name in ("date", "key", "what", "why"):
            value = change.get(name)
            if value is None or (isinstance(value, str) and not value.strip()):
                yield f"{where} field {name!r}: is missing or empty; a change says date, key, what and why"
        key = change.get("key")
        if isinstance(key, str) and key.strip() and key not in keys:
            yield f"{where} field 'key': {key!r} names no mission in this suite"


def _share_ok(held: int, total: int) -> bool:
    """25% <= held/total <= 40%, in integers so 40% is exactly allowed."""
    (lo_n, lo_d), (hi_n, hi_d) = MIN_TEST_SHARE, MAX_TEST_SHARE
    return held * lo_d >= total * lo_n and held * hi_d <= total * hi_n


def _summary(suite: Suite, problems: list[str]) -> str:
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        return f"suite '{suite.name}' cannot be graded: {count}"
    total, held = len(suite.missions), len(suite.split_of("test"))
    share = round(100 * held / total) if total else 0
    claimed = tuple(dict.fromkeys(suite.claimed))
    captured = len({m.flag for m in suite.missions} & set(claimed))
    return (f"suite '{suite.name}' is gradeable: {total} missions, {held} held out ({share}%), "
            f"{captured} of {len(claimed)} claimed flags captured")


def _compile(regex: str | None) -> re.Pattern[str] | str | None:
    """The compiled pattern, or the compile error as text (None when there is no pattern)."""
    if regex is None:
        return None
    try:
        return re.compile(regex)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return str(exc)


__all__ = ["CheckResult", "check_path", "check_suite"]


def gate_for_scoring(path: str | Path, warn: Callable[[str], None]) -> Suite:
    """Load and check a suite before scoring it.

    A suite that cannot be loaded is refused (SuiteError). A loaded suite's
    gradeability problems are reported through ``warn`` but do not stop
    ``score``: no model is spent re-deriving verdicts, and a mission whose
    check cannot be evaluated (a regex that does not compile) fails with that
    sentence as its reason. ``run`` and ``measure``, which spend a model,
    refuse such a suite instead.
    """
    result = check_path(path)
    if not result.ok:
        warn(f"warning: suite '{result.suite.name}' does not pass check "
             f"({len(result.problems)} problems); scoring anyway:")
        for problem in result.problems:
            warn(f"  - {problem}")
    return result.suite
