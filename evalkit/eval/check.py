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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalkit import contract, parallel
from evalkit.errors import EvalkitError
from evalkit.eval import checks
from evalkit.eval.suite import SPLITS, Loaded, Mission, Suite, SuiteError, counted, load_suite
from evalkit.patterns import Pattern, compile_pattern
from evalkit.patterns import problem as pattern_problem

#: The held-out share a suite must keep, inclusive, as (numerator, denominator).
MIN_TEST_SHARE, MAX_TEST_SHARE = (1, 4), (2, 5)
MIN_TEST_MISSIONS = 3
#: From this many missions on, the suite's discipline (the split, the claimed capabilities,
#: the reader's rubric) is held as errors; below it, as warnings unless ``strict``. A suite of
#: one or two cases is how a person tries evalkit on their own agent, and a held-out half of
#: it would be noise either way; a comparison (``measure``) always checks strictly.
SMALL_SUITE = 8
#: Mission fields that are written for a person and never scored.
RUBRIC_FIELDS = frozenset({"must", "must_not", "because"})


_UNCAPTURED = "suite field 'flags': no mission captures "


class Discipline(str):
    """A problem of the suite's discipline, not of whether it can be graded at all: an error
    from ``SMALL_SUITE`` missions on (or under ``strict``), a warning below."""

_BOUNDARY = "A-Za-z0-9_"


@dataclass
class CheckResult:
    """What ``check`` found; ``summary`` is the one line a clean suite prints."""

    suite: Suite
    problems: list[str]
    summary: str
    #: Discipline problems of a small suite, said but not refused.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def message(self) -> str:
        """The summary when clean; otherwise a header and every problem on its own line."""
        if self.ok:
            return self.summary
        return "\n".join([self.summary + ":", *(f"  - {p}" for p in self.problems)])


def lenient(suite: Suite, strict: bool) -> bool:
    """Whether the suite's discipline problems are warnings rather than errors."""
    return not strict and len(suite.missions) < SMALL_SUITE


def _parted(problems: list[str], soft: bool) -> tuple[list[str], list[str]]:
    """(errors, warnings): discipline problems are warnings when ``soft``."""
    if not soft:
        return [str(p) for p in problems], []
    warnings = [str(p) for p in problems if isinstance(p, Discipline)]
    uncaptured = [w for w in warnings if w.startswith(_UNCAPTURED)]
    if len(uncaptured) > 1:  # one warning, not a line per word of the vocabulary
        words = ", ".join(w[len(_UNCAPTURED):].split(",")[0] for w in uncaptured)
        at = warnings.index(uncaptured[0])
        warnings = [w for w in warnings if w not in uncaptured]
        warnings.insert(at, f"suite field 'flags': no mission captures {len(uncaptured)} of the "
                            f"capabilities it claims ({words}); list the ones it measures "
                            "under flags:")
    return [str(p) for p in problems if not isinstance(p, Discipline)], warnings


def check_path(path: str | Path, *, strict: bool = False) -> CheckResult:
    """Load then check. A suite that cannot be loaded raises ``SuiteError``; its
    message names the loading problems and then what the rules find in the part
    that did load, so that one message holds every problem."""
    try:
        suite = load_suite(path)
    except SuiteError as exc:
        if exc.loaded is None:
            raise
        raise _with_rule_problems(exc, exc.loaded, strict) from None
    return check_suite(suite, strict=strict)


def _with_rule_problems(exc: SuiteError, loaded: Loaded, strict: bool = False) -> SuiteError:
    suite = loaded.suite
    # The missions that did not load are checked too, but for their bad fields (said already).
    placed = sorted([*zip(loaded.positions, suite.missions, strict=True),
                     *((index, m) for index, m, _ in loaded.partial)], key=lambda pair: pair[0])
    bad = {index: fields for index, _, fields in loaded.partial}
    found = _missions_problems(Rules.of(suite), tuple(m for _, m in placed),
                               tuple(index for index, _ in placed), bad)
    found += suite_problems(suite, Tally.of(suite.missions), whole=loaded.whole,
                            refused=loaded.refused)
    found, _ = _parted(found, lenient(suite, strict))
    if not found:
        return exc
    lines = [exc.message, f"and what did load cannot be graded ({counted(found)}):",
             *(f"  - {p}" for p in found)]
    return SuiteError("\n".join(lines), [*exc.problems, *found], exit_code=exc.exit_code)


def check_suite(suite: Suite, *, strict: bool = False) -> CheckResult:
    """Run every rule of the spec's "check" section over one loaded suite; under
    ``SMALL_SUITE`` missions, and not ``strict``, the discipline rules only warn."""
    found = _missions_problems(Rules.of(suite), suite.missions)
    found += _suite_problems(suite)
    problems, warnings = _parted(found, lenient(suite, strict))
    return CheckResult(suite, problems, _summary(suite, problems, warnings), warnings)


def _missions_problems(rules: Rules, missions: tuple[Mission, ...],
                       positions: tuple[int, ...] | None = None,
                       bad: dict[int, frozenset[str]] | None = None) -> list[str]:
    """Every per-mission problem; ``positions``: where each mission stands in the file's list;
    ``bad``: by position, the fields already refused by the loader, not looked at again.

    A large suite's missions are looked at in shares over the cores (``evalkit.parallel``),
    as scoring judges them; whether a key is used twice is the one rule that reads
    them all, and is asked here."""
    job = _Missions(rules, missions, positions or tuple(range(len(missions))), bad or {})
    found = {at: problems for share in parallel.ordered(
        _share_problems, parallel.spans(len(missions), SHARE), shared=job,
        workers=parallel.workers_for(len(missions), PER_WORKER)) for at, problems in share}
    problems: list[str] = []
    seen: dict[str, int] = {}
    for at, (index, mission) in enumerate(zip(job.positions, missions, strict=True)):
        if mission.key.strip() and "key" not in job.bad.get(index, ()):
            if mission.key in seen:
                problems.append(f"{_where(mission, index)} field 'key': already used by mission "
                                f"#{seen[mission.key]}; keys must be unique (each names a run "
                                "directory)")
            else:
                seen[mission.key] = index + 1
        problems += found.get(at, ())
    return problems


#: Missions looked at as one share, and how many a process must have to look at to repay
#: its start (a mission's rules cost a third of judging its run, or less).
SHARE, PER_WORKER = 1024, 5000


@dataclass(frozen=True)
class _Missions:
    """What every share of a suite's missions is checked against (inherited by forked
    workers, never pickled)."""

    rules: Rules
    missions: tuple[Mission, ...]
    positions: tuple[int, ...]
    bad: dict[int, frozenset[str]]


def _share_problems(job: _Missions, span: tuple[int, int]) -> list[tuple[int, list[str]]]:
    """(place in the suite's list, its problems) for each mission of ``span`` that has any."""
    out = []
    for at in range(*span):
        mission, index = job.missions[at], job.positions[at]
        skip = job.bad.get(index, frozenset())
        found = [(name, text) for name, text in _mission_problems(job.rules, mission)
                 if name not in skip]
        if found:
            where = _where(mission, index)
            out.append((at, [(Discipline if name in RUBRIC_FIELDS else str)(
                f"{where} field {name!r}: {text}") for name, text in found]))
    return out


def _where(mission: Mission, index: int) -> str:
    return f"mission {mission.key!r}" if mission.key.strip() else f"mission #{index + 1}"


# -- per mission -------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """What the missions of one suite are checked against, worked out once rather than per
    mission; a check's ``validate`` is given it, for ``suite``, ``tools`` (the served tools,
    None when the suite lists none) and ``regex_error``."""

    suite: Suite
    vocabulary: frozenset[str]
    #: The served tools, when the suite lists them (None: tools are not checked).
    tools: frozenset[str] | None
    tool_names: _ToolNames | None
    identifiers: Pattern | None
    #: What a prompt may name by identifier: the declared assets and the tools.
    declared: frozenset[str]
    published: dict[str, bool]
    harness: frozenset[str]
    #: evalkit's own flags that take a value.
    taking: frozenset[str]
    #: Each answer regex met so far -> why it cannot be used, or None when it can.
    regex_errors: dict[str, str | None]
    #: A mission's settings (name, value pairs) -> what every check it sets said of them.
    said: dict[tuple[tuple[str, object], ...], list[tuple[str, str]]]

    @classmethod
    def of(cls, suite: Suite) -> Rules:
        pattern = _compile(suite.identifier_pattern)
        return cls(
            suite=suite,
            vocabulary=frozenset(suite.vocabulary),
            tools=None if suite.tools is None else frozenset(suite.tools),
            tool_names=None if suite.tools is None else _ToolNames.of(suite.tools),
            identifiers=None if isinstance(pattern, str) else pattern,
            declared=frozenset(suite.assets) | frozenset(suite.tools or ()),
            published=_published(suite.agent_flags),
            harness=frozenset(contract.harness_flags()),
            taking=frozenset(f["flag"] for f in contract.CLI_FLAGS if f["value"] is not None),
            regex_errors={},
            said={},
        )

    def regex_error(self, regex: str) -> str | None:
        """Why ``regex`` cannot be used, or None; a suite repeats its regexes, so each is looked
        at once."""
        if regex not in self.regex_errors:
            self.regex_errors[regex] = pattern_problem(regex)
        return self.regex_errors[regex]

    def settings_problems(self, m: Mission) -> list[tuple[str, str]]:
        """What the checks the mission sets say of its values for their fields. A check
        judges its own fields (with the suite), so the answer holds for every mission
        giving the same settings, and a large suite repeats a few sets over all its
        missions: each set is looked at once."""
        key = tuple(m.settings.items())
        try:
            found = self.said.get(key)
        except TypeError:  # a value no suite holds (a list, in a Mission built by hand)
            return self._said(m)
        if found is None:
            found = self.said[key] = self._said(m)
        return found

    def _said(self, m: Mission) -> list[tuple[str, str]]:
        return [said for check in checks.configured(m.settings) if check.validate is not None
                for said in check.problems(m, self)]


def _key_ok(key: str) -> bool:
    return (bool(key.strip()) and key not in (".", "..")
            and "/" not in key and "\\" not in key and "\0" not in key)


def _mission_problems(rules: Rules, m: Mission) -> Iterator[tuple[str, str]]:
    """(field, sentence) for every rule this mission breaks: the rules of every mission's
    own fields, and those of each check it sets (``evalkit.eval.checks``)."""
    if not m.key.strip():
        yield "key", "is empty; every mission needs a key (it names its run directory)"
    elif not _key_ok(m.key):
        yield "key", f"{m.key!r} cannot name a run directory; avoid / \\ . and .."
    if m.flag not in rules.vocabulary:
        yield "flag", f"{m.flag!r} is not in the vocabulary ({', '.join(rules.suite.vocabulary)})"
    if not m.prompt.strip():
        yield "prompt", "is empty; it is given verbatim as the objective"
    if not any(map(str.strip, m.must)):
        yield "must", "is missing or empty; write what a good answer shows, for the reader"
    if not any(map(str.strip, m.must_not)):
        yield "must_not", "is missing or empty; write what it must avoid, for the reader"
    if not m.because.strip():
        yield "because", "is missing or empty; say why this mission exists"
    if m.settings:
        yield from rules.settings_problems(m)
    for tool, said in rules.tool_names.named(m.prompt) if rules.tool_names else ():
        also = "" if said.lower() == tool.lower() else f" (as {said!r})"
        yield "prompt", (f"names the served tool {tool!r}{also}; write it as a person would, "
                         "without tool names")
    if rules.identifiers is not None:
        for ident in dict.fromkeys(x.group(0) for x in rules.identifiers.finditer(m.prompt)):
            if ident and ident not in rules.declared:
                yield "prompt", (f"names {ident!r}, which is neither a declared asset nor a "
                                 "tool; declare it under 'assets'")
    if m.split not in SPLITS:
        yield "split", f"{m.split!r} is not a split; use train or test"
    if m.flags:
        yield from (("flags", text) for text in _flag_problems(m.flags, rules))


#: Byte -> itself lowercased for ASCII identifier characters, a space for any other byte.
_ASCII_WORDS = bytes(b if re.fullmatch(f"[{_BOUNDARY}]", chr(b)) else 32 for b in range(256)).lower()


@dataclass(frozen=True)
class _ToolNames:
    """Finds the served tools a prompt names, by full name or last dotted segment,
    ignoring case, only between identifier boundaries (``mcp.add`` is not in ``address``).

    A name right after a dot is not named: ``.git`` or ``fix.patch`` in a prompt
    is a file, not the ``git`` or ``patch`` tool. The seed harness draws the
    boundary there too, and its suites must load unchanged.
    """

    tools: tuple[str, ...]
    matcher: re.Pattern[str]
    #: Each tool with its names lowercased, in the order they are tried.
    lowered: tuple[tuple[str, tuple[str, ...]], ...]
    #: A word each name contains, lowercased; None when a name is not ASCII or has no word.
    words: frozenset[bytes] | None

    @classmethod
    def of(cls, tools: Iterable[str]) -> _ToolNames | None:
        tools = tuple(dict.fromkeys(tools))
        matcher, names = _tool_matcher(tools)
        if matcher is None:
            return None
        lowered = tuple((t, tuple(n.lower() for n in names[t])) for t in tools)
        words = [_longest_word(n) for ns in names.values() for n in ns]
        usable = all(word is not None for word in words)
        return cls(tools, matcher, lowered,
                   frozenset(word for word in words if word is not None) if usable else None)

    def named(self, prompt: str) -> list[tuple[str, str]]:
        """(tool, the text naming it) for each tool the prompt names, in the tools' order."""
        if self.words is not None and prompt.isascii() and self.words.isdisjoint(
                prompt.encode("ascii").translate(_ASCII_WORDS).split()):
            return []
        said: dict[str, str] = {}
        for hit in self.matcher.finditer(prompt):
            said.setdefault(hit.group(1).lower(), hit.group(1))
        if not said:
            return []
        found = []
        for tool, names in self.lowered:
            name = next((n for n in names if n in said), None)
            if name is not None:
                found.append((tool, said[name]))
        return found


def _longest_word(name: str) -> bytes | None:
    """The longest run of identifier characters in an ASCII ``name``, lowercased; else None.

    It makes a safe filter: a name matches only between identifier boundaries,
    so each such run of it is a whole word of the prompt; and for ASCII text,
    ``re.IGNORECASE`` is exactly ASCII lowercasing. A prompt without any of
    these words names no tool, and the regex is not run on it.
    """
    runs = re.findall(f"[{_BOUNDARY}]+", name) if name.isascii() else []
    return max(runs, key=len).lower().encode("ascii") if runs else None


@functools.lru_cache(maxsize=32)
def _tool_matcher(tools: tuple[str, ...]) -> tuple[re.Pattern[str] | None, dict[str, tuple[str, ...]]]:
    """One pattern finding every tool name or last dotted segment, overlaps included."""
    names = {t: tuple(dict.fromkeys(n for n in (t, t.rsplit(".", 1)[-1]) if n)) for t in tools}
    every = sorted({n for ns in names.values() for n in ns}, key=len, reverse=True)
    if not every:
        return None, names
    alternation = "|".join(re.escape(n) for n in every)
    pattern = rf"(?=(?<![\w.])({alternation})(?!\w))"
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


def _flag_problems(tokens: tuple[str, ...], rules: Rules) -> Iterable[str]:
    """Read mission CLI tokens as a command line would, and say what is wrong with them."""
    harness, taking, published = rules.harness, rules.taking, rules.published
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or token == "--":
            yield f"{token!r} is not a flag (a flag starts with --); values follow their flag"
            continue
        name, eq, _ = token.partition("=")
        blamed = True  # one sentence per flag: a flag that may not be here needs no value either
        if name in harness:
            yield f"{name!r} is set by the harness itself, never by a mission"
            takes_value = name in taking
        elif name not in published:
            yield f"{name!r} is not a flag the agent publishes"
            # Unknown arity: read a following non-flag as its value rather than blame it too.
            takes_value = i < len(tokens) and not tokens[i].startswith("--")
        else:
            blamed = False
            takes_value = published[name]
            if eq and not takes_value:
                yield f"{name!r} takes no value, but is given one in {token!r}"
        if takes_value and not eq:
            if i < len(tokens):
                i += 1
            elif not blamed:
                yield f"{name!r} needs a value after it"


# -- the suite as a whole ----------------------------------------------------


@dataclass
class Tally:
    """What the suite-wide rules need of the missions."""

    total: int = 0
    held: int = 0
    captured: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, missions: Iterable[Mission]) -> Tally:
        tally = cls()
        for m in missions:
            tally.count(m)
        return tally

    def count(self, m: Mission) -> None:
        self.total += 1
        self.held += m.split == "test"
        self.captured.add(m.flag)
        self.keys.add(m.key)


def _suite_problems(suite: Suite) -> Iterable[str]:
    return suite_problems(suite, Tally.of(suite.missions))


def suite_problems(suite: Suite, tally: Tally, *, whole: bool = True,
                   refused: frozenset[str] = frozenset()) -> Iterable[str]:
    """The suite-wide rules, over ``suite``'s own fields and the tally of all its missions.

    ``whole`` False: the tally is of the missions that loaded, not all of them,
    so the rules that count missions are left for when the suite loads.
    ``refused``: suite fields the loader refused, whose rules are not run (a
    ``flags`` that is not a list does not make the suite claim every flag).
    """
    pattern = _compile(suite.identifier_pattern)
    if isinstance(pattern, str):
        yield f"suite field 'identifier_pattern': {suite.identifier_pattern!r} {pattern}"
    vocabulary = ", ".join(suite.vocabulary)
    if "vocabulary" not in refused:
        for flag in suite.claimed_flags or ():
            if flag not in suite.vocabulary:
                yield f"suite field 'flags': {flag!r} is not in the vocabulary ({vocabulary})"
    if whole and not refused & {"flags", "vocabulary"}:
        captured = tally.captured
        claimed_by = "claimed" if suite.claimed_flags is not None else \
            "in the vocabulary, which a suite without 'flags' claims whole"
        for flag in dict.fromkeys(suite.claimed):
            if flag in suite.vocabulary and flag not in captured:
                yield Discipline(f"suite field 'flags': no mission captures {flag!r}, {claimed_by}")
    if whole:
        total, held = tally.total, tally.held
        if held < MIN_TEST_MISSIONS:
            yield Discipline(
                f"suite field 'missions': only {held} test mission{'s' if held != 1 else ''}; "
                f"hold out at least {MIN_TEST_MISSIONS} with split: test")
        if total and not _share_ok(held, total):
            yield Discipline(f"suite field 'missions': {held} of {total} missions held out "
                             f"({round(100 * held / total)}%); the test share must be 25% to 40%")
    yield from _rubric_problems(suite)


def _rubric_problems(suite: Suite) -> Iterable[str]:
    """Incomplete rubric changes. A change's key may name no mission of the suite: a
    ledger outlives missions that were renamed or removed, and ``*`` stands for all."""
    for index, change in enumerate(suite.rubric_changes):
        where = f"rubric change #{index + 1}"
        for name in ("date", "key", "what", "why"):
            value = change.get(name)
            if value is None or (isinstance(value, str) and not value.strip()):
                yield f"{where} field {name!r}: is missing or empty; a change says date, key, what and why"


def _share_ok(held: int, total: int) -> bool:
    """25% <= held/total <= 40%, in integers so 40% is exactly allowed."""
    (lo_n, lo_d), (hi_n, hi_d) = MIN_TEST_SHARE, MAX_TEST_SHARE
    return held * lo_d >= total * lo_n and held * hi_d <= total * hi_n


def _summary(suite: Suite, problems: list[str], warnings: Sequence[str] = ()) -> str:
    if problems:
        return f"suite '{suite.name}' cannot be graded: {counted(problems)}"
    if warnings:
        return (f"suite '{suite.name}' is gradeable: {len(suite.missions)} "
                f"mission{'s' if len(suite.missions) != 1 else ''}, too small for a held-out "
                f"half ({len(warnings)} warning{'s' if len(warnings) != 1 else ''}; "
                f"errors from {SMALL_SUITE} missions on or under --strict)")
    total, held = len(suite.missions), len(suite.split_of("test"))
    share = round(100 * held / total) if total else 0
    claimed = tuple(dict.fromkeys(suite.claimed))
    captured = len({m.flag for m in suite.missions} & set(claimed))
    return (f"suite '{suite.name}' is gradeable: {total} missions, {held} held out ({share}%), "
            f"{captured} of {len(claimed)} claimed flags captured")


def _compile(regex: str | None) -> Pattern | str | None:
    """The compiled pattern, or why it cannot be used (None when there is no pattern)."""
    if regex is None:
        return None
    try:
        return compile_pattern(regex)
    except ValueError as refused:
        return str(refused)



def gradeable(path: str | Path, *, refusing: str, strict: bool = False) -> Suite:
    """The suite at ``path`` if it passes ``check``; else refused, exit 1, every problem named.

    Every subcommand runs ``check`` first, as the spec says: a score of a suite
    that cannot be graded is a number nobody can compare with anything, and a
    run of one spends a model on it. ``refusing`` says what is not done. ``strict``
    holds a small suite to the discipline of a large one (a comparison needs a held-out half).
    """
    result = check_path(path, strict=strict)
    if not result.ok:
        lines = [f"suite '{result.suite.name}' is not gradeable "
                 f"({counted(result.problems)}); {refusing}:",
                 *(f"  - {p}" for p in result.problems)]
        raise EvalkitError("\n".join(lines), exit_code=1)
    return result.suite


__all__ = ["SMALL_SUITE", "CheckResult", "check_path", "check_suite", "gradeable", "lenient"]
