"""Suites: the missions an agent is graded on, read from YAML or JSON.

The loader answers one question, "is this file a suite at all?": the right
shape, known keys, the right types. Every such problem is collected and
raised together in one ``SuiteError``, each naming the mission and field (and
the file line where the parser knows it), so a user fixes the file in one
pass instead of one error per run. Whether a well-shaped suite can be
*graded* (vocabulary, duplicate keys, regexes that compile, the held-out
share, ...) is ``evalkit.eval.check``'s question; the loader deliberately
accepts such suites so check can report everything at once.

The schema is the seed harness's (see docs/suites-and-scoring.md), and a
suite written for it loads unchanged. A mission's fields are its core ones
(``evalkit.eval.mission``) and those of the registered checks
(``evalkit.eval.checks``), so a field no check claims is refused as unknown,
like any other. evalkit adds these optional top-level keys of its own:

``vocabulary``
    list of extra capability words this suite adds to the 11 in
    ``CAPABILITIES`` (a domain's own capabilities).
``agent_flags``
    list of CLI flags the target agent publishes. When given, a mission's
    ``flags`` are checked against it instead of against evalkit's own
    mission flags. An entry written ``"--name VALUE"`` or ``"--name=VALUE"``
    declares that the flag takes a value; a bare ``"--name"`` takes one only
    when evalkit's contract says a flag of that name does.
``skill``
    path of a default skill manifest, relative to the suite file.
``agents``
    folder of scripted agents, relative to the suite file.
``plane``
    name of the tool plane the missions run against (e.g. ``"stub"``).
``profile``
    capability profile the missions run under.
``fixtures``
    folder of data the missions run against, relative to the suite file.
``description``
    free text for people.

They are kept, as written, in ``Suite.extras``; ``Suite.resolve`` turns the
relative paths into paths. Any other unknown key is refused.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalkit.eval import checks
from evalkit.eval.mission import CORE_FIELDS, MISSION_FIELDS, REQUIRED_FIELDS, Mission
from evalkit.eval.suite_text import (
    SUITE_FILES,
    UNREADABLE,
    SuiteError,
    decoded,
    large_json,
    parse,
    read_bytes,
)
from evalkit.eval.suite_text import Tree as _Tree  # suite_pieces builds with it
from evalkit.eval.suite_text import counted as counted
from evalkit.eval.suite_text import suite_file as _suite_file

#: The capability vocabulary every suite starts from.
CAPABILITIES: tuple[str, ...] = (
    "orientation", "chaining", "absence", "state", "boundary", "disambiguation",
    "submission", "synthesis", "routing", "partial_synthesis", "protocol_shape",
)

#: The two halves; train and test are never blended into one number.
SPLITS: tuple[str, ...] = ("train", "test")

#: evalkit's own optional top-level keys that hold paths relative to the suite file.
PATH_KEYS: tuple[str, ...] = ("skill", "agents", "fixtures")

# Field kinds: how a value is checked and stored (a check field's kind is one of the first six).
_STR, _STRS, _BOOL, _INT, _SETTINGS, _NUMBER = checks.KINDS
#: A mapping of string to string (``fixture_for``: mission key -> fixture name).
_MAP = "map"

SUITE_FIELDS: dict[str, str] = {
    "name": _STR, "missions": "missions", "tools": _STRS, "assets": "assets",
    "identifier_pattern": _STR, "flags": _STRS, "rubric_changes": "rubric",
}
EXTRA_FIELDS: dict[str, str] = {
    "vocabulary": _STRS, "agent_flags": _STRS, "skill": _STR, "agents": _STR,
    "plane": _STR, "profile": _STR, "fixtures": _STR, "description": _STR,
    "fixture_for": _MAP, "serve": _STR, "serve_port": _INT,
}
RUBRIC_FIELDS: tuple[str, ...] = ("date", "key", "what", "why")


def mission_kinds() -> dict[str, str]:
    """Every field a mission may have -> its kind: the core ones, then each check's."""
    return {f.name: f.kind for f in (*CORE_FIELDS, *checks.fields())}


@dataclass(frozen=True)
class Suite:
    """A loaded suite. ``vocabulary`` is the 11 capabilities plus the suite's extension."""

    name: str
    path: Path
    missions: tuple[Mission, ...]
    tools: tuple[str, ...] | None = None
    assets: dict[str, str] = field(default_factory=dict)
    identifier_pattern: str | None = None
    #: The top-level ``flags``: capabilities this suite claims to measure; None = all.
    claimed_flags: tuple[str, ...] | None = None
    rubric_changes: tuple[dict[str, Any], ...] = ()
    vocabulary: tuple[str, ...] = CAPABILITIES
    #: evalkit's own optional top-level keys, as written (lists become tuples).
    extras: dict[str, Any] = field(default_factory=dict)

    def mission(self, key: str) -> Mission | None:
        """The first mission with this key, or None (like ``dict.get``)."""
        return next((m for m in self.missions if m.key == key), None)

    def split_of(self, half: str) -> tuple[Mission, ...]:
        """The missions of one half, in file order."""
        if half not in SPLITS:
            raise ValueError(f"unknown half {half!r}; use one of {', '.join(SPLITS)}")
        return tuple(m for m in self.missions if m.split == half)

    @property
    def claimed(self) -> tuple[str, ...]:
        """The capabilities this suite measures: its claim, or the whole vocabulary."""
        return self.vocabulary if self.claimed_flags is None else self.claimed_flags

    @property
    def agent_flags(self) -> tuple[str, ...] | None:
        """The target agent's published flags, when the suite names them."""
        return self.extras.get("agent_flags")

    def resolve(self, key: str) -> Path | None:
        """An extras path (``skill``, ``agents``, ``fixtures``) made relative to the suite file."""
        value = self.extras.get(key)
        return None if value is None else self.path.parent / value


@dataclass(frozen=True)
class Loaded:
    """The part of a refused suite that loaded: its fields, and the missions that had no problem."""

    suite: Suite
    #: Whether every mission loaded (else the suite-wide counts would be of a part).
    whole: bool
    #: Where in the file's list each loaded mission stands (0-based).
    positions: tuple[int, ...]
    #: The missions that did not load, as far as their good fields go: (position, the
    #: mission with a blank for each bad required field, the names of the bad fields),
    #: so check also names what is wrong with their other fields.
    partial: tuple[tuple[int, Mission, frozenset[str]], ...] = ()
    #: The suite fields given but refused (the loader has said why): the rules that
    #: read them are not run over the blank left in their place.
    refused: frozenset[str] = frozenset()


def load_suite(path: str | Path) -> Suite:
    """Read a suite file (or a directory holding one); raise ``SuiteError`` if it is not one."""
    file = _suite_file(Path(path))
    raw = read_bytes(file)
    large = large_json(raw)
    if large is not None:
        # Build a large JSON suite without its YAML node tree; compose the tree
        # only when there is a problem whose line it can name.
        try:
            return _Builder(file, _Tree(), default_name(Path(path))).suite(large)
        except SuiteError:
            pass
    data, tree = parse(file, decoded(file, raw))
    return _Builder(file, tree, default_name(Path(path))).suite(data)


def default_name(given: Path) -> str:
    """A suite's name when it gives none: the file stem, as the spec says (so
    ``pack/missions.yaml`` is ``missions``); for a folder given as the suite
    (evalkit's addition), the folder's name."""
    return given.resolve().name if given.is_dir() else given.stem


# -- shaping -----------------------------------------------------------------


_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
    (list, "a list"), (dict, "a mapping"), (_dt.date, "a date"), (set, "a set"),
    (bytes, "binary data"),
)


def _describe(value: Any) -> str:
    """A value's type for a person, with the value itself when it is short."""
    if value is None:
        return "null"
    name = next((n for t, n in _TYPE_NAMES if isinstance(value, t)), type(value).__name__)
    if isinstance(value, (bool, int, float, str, _dt.date)):
        shown = repr(value) if isinstance(value, str) else str(value)
        if len(shown) <= 40:
            return f"{name} ({shown})"
    return name


def _as_text(item: Any) -> str | None:
    """A list-of-strings item as its text, or None when it cannot be one.

    An unquoted number or date in such a list (``- 1284``, ``- 2024-05-01``)
    reads as the text of its value (``- 18.40`` is "18.4"), as the seed harness
    reads it; its suites must load unchanged. true and false (YAML's yes, no,
    on, off) are refused: nobody writing ``- yes`` meant the text "True".
    """
    if isinstance(item, str):
        return item
    if isinstance(item, bool):
        return None
    if isinstance(item, int) or (isinstance(item, float) and math.isfinite(item)):
        return str(item)
    if isinstance(item, _dt.date):
        return _plain_date(item)
    return None


def _plain_date(value: Any) -> Any:
    """YAML reads 2024-05-01 as a date; JSON cannot. Store both as the same text."""
    return value.isoformat() if isinstance(value, _dt.date) else value


class _Builder:
    """Turns parsed data into a Suite, collecting every problem before raising."""

    def __init__(self, path: Path, tree: _Tree, default_name: str) -> None:
        self.path = path
        self.default_name = default_name
        self.root = tree.root
        self.repeated = tree.repeated
        self.problems: list[str] = []
        self.positions: tuple[int, ...] = ()
        self.partial: list[tuple[int, Mission, frozenset[str]]] = []
        self.kinds = mission_kinds()
        #: Field -> the one type its value has in the common case, checked without ``value``:
        #: str, bool or int (a bool is no int here) stored as it is, or a list (of strings,
        #: stored as a tuple).
        self.plain = {name: _PLAIN[kind] for name, kind in self.kinds.items() if kind in _PLAIN}

    def find(self, steps: tuple[str | int, ...]) -> tuple[yaml.Node | None, yaml.Node | None]:
        """Walk the node tree: (the node whose line names the step, the value's node)."""
        marker, node = None, self.root
        for step in steps:
            if isinstance(node, yaml.MappingNode) and isinstance(step, str):
                pair = next(((k, v) for k, v in node.value
                             if isinstance(k, yaml.ScalarNode) and k.value == step), None)
                if pair is None:
                    return None, None
                marker, node = pair
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) \
                    and step < len(node.value):
                marker = node = node.value[step]
            else:
                return None, None
        return marker, node

    def line(self, *steps: str | int) -> int | None:
        """The 1-based line of a key or item, when the parser knows it."""
        marker = self.find(steps)[0]
        return marker.start_mark.line + 1 if marker is not None else None

    def problem(self, where: str, name: str | None, steps: tuple[str | int, ...],
                text: str, *, line: int | None = None) -> None:
        line = line or self.line(*steps)
        at = f" (line {line})" if line else ""
        label = f"{where} field {name!r}{at}" if name is not None else f"{where}{at}"
        self.problems.append(f"{label}: {text}")

    def duplicates(self, where: str, steps: tuple[str | int, ...]) -> None:
        """YAML lets a later key silently replace an earlier one; say so instead."""
        if not self.repeated:
            return
        node = self.find(steps)[1] if steps else self.root
        if not isinstance(node, yaml.MappingNode):
            return
        for key, _ in node.value:
            if id(key) in self.repeated:
                self.problem(where, key.value, (), "is given more than once; keep one",
                             line=key.start_mark.line + 1)

    def value(self, where: str, name: str, kind: str, value: Any,
              steps: tuple[str | int, ...]) -> tuple[bool, Any]:
        """Check one value against its kind; (ok, stored value)."""
        if kind == _STR:
            if isinstance(value, str):
                return True, value
            hint = "; quote it" if isinstance(value, (int, float, _dt.date)) else ""
            self.problem(where, name, steps, f"must be a string, not {_describe(value)}{hint}")
        elif kind == _STRS:
            if isinstance(value, list):
                ok, items = True, []
                for i, item in enumerate(value):
                    text = _as_text(item)
                    if text is None:
                        ok = False
                        self.problem(where, name, (*steps, i),
                                     f"item {i + 1} must be a string, not {_describe(item)}")
                    items.append(text)
                return ok, tuple(items)
            hint = f"; write [{value!r}]" if isinstance(value, str) and len(value) <= 40 else ""
            self.problem(where, name, steps,
                         f"must be a list of strings, not {_describe(value)}{hint}")
        elif kind == _BOOL:
            if isinstance(value, bool):
                return True, value
            self.problem(where, name, steps, f"must be true or false, not {_describe(value)}")
        elif kind == _INT:
            if isinstance(value, int) and not isinstance(value, bool):
                return True, value
            self.problem(where, name, steps, f"must be an integer, not {_describe(value)}")
        elif kind == _SETTINGS:
            if isinstance(value, dict) and all(isinstance(key, str) for key in value):
                return True, checks.freeze(value)
            what = "its keys must be strings" if isinstance(value, dict) else \
                f"not {_describe(value)}"
            self.problem(where, name, steps, f"must be a mapping of settings; {what}")
        elif kind == _NUMBER:
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                return True, value
            self.problem(where, name, steps, f"must be a number, not {_describe(value)}")
        elif kind == _MAP:
            if isinstance(value, dict):
                ok = True
                for key, item in value.items():
                    if not isinstance(key, str) or not isinstance(item, str):
                        ok = False
                        self.problem(where, name, (*steps, str(key)),
                                     f"entry {key!r} must map a string to a string, not "
                                     f"{_describe(key)} to {_describe(item)}; quote it")
                return ok, dict(value)
            self.problem(where, name, steps,
                         f"must be a mapping of string to string, not {_describe(value)}")
        return False, None

    def unknown(self, where: str, name: Any, known: list[str], steps: tuple) -> None:
        close = difflib.get_close_matches(str(name), known, n=1) if isinstance(name, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(known)}"
        self.problem(where, str(name), steps, f"unknown field{hint}")

    # -- the document ---------------------------------------------------------

    def suite(self, data: Any) -> Suite:
        if not isinstance(data, dict):
            shape = "empty" if data is None else f"{_describe(data)}, not a mapping"
            raise SuiteError(f"suite {self.path} must be a mapping of suite fields "
                             f"(name, missions, tools, ...); the document is {shape}",
                             exit_code=UNREADABLE)
        fields: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        defaults = suite_defaults()
        known = [*SUITE_FIELDS, *EXTRA_FIELDS, *defaults]
        self.duplicates("suite", ())
        for name, raw in data.items():
            steps = (str(name),)
            kind = _kind(name, SUITE_FIELDS) or _kind(name, EXTRA_FIELDS) or _kind(name, defaults)
            if kind is None:
                self.unknown("suite", name, known, steps)
            elif raw is None:
                continue  # an empty value means "not given"
            elif kind == "missions":
                fields[name] = self.missions(raw)
            elif kind == "assets":
                fields[name] = self.assets(raw)
            elif kind == "rubric":
                fields[name] = self.rubric(raw)
            else:
                ok, value = self.value("suite", name, kind, raw, steps)
                if ok:
                    (fields if name in SUITE_FIELDS else extras)[name] = value
        if data.get("missions") is None:
            self.problem("suite", "missions", ("missions",),
                         "missing; a suite is a list of missions under 'missions'")
        if "missions" in fields and any(name in extras for name in defaults):
            fields["missions"] = tuple(_laid_over(m, extras, defaults)
                                       for m in fields["missions"])
        if self.problems:
            raw = data.get("missions")
            refused = frozenset(str(name) for name, value in data.items()
                                if value is not None and name not in fields and name not in extras)
            loaded = None if "missions" not in fields else Loaded(
                self.new_suite(fields, extras),
                whole=isinstance(raw, list) and len(raw) == len(fields["missions"]),
                positions=self.positions, partial=tuple(self.partial), refused=refused)
            raise SuiteError.from_problems(self.path, self.problems, loaded=loaded)
        return self.new_suite(fields, extras)

    def new_suite(self, fields: dict[str, Any], extras: dict[str, Any]) -> Suite:
        return Suite(
            name=fields.get("name", self.default_name),
            path=self.path,
            missions=fields["missions"],
            tools=fields.get("tools"),
            assets=fields.get("assets", {}),
            identifier_pattern=fields.get("identifier_pattern"),
            claimed_flags=fields.get("flags"),
            rubric_changes=fields.get("rubric_changes", ()),
            vocabulary=tuple(dict.fromkeys((*CAPABILITIES, *extras.get("vocabulary", ())))),
            extras=extras,
        )

    def missions(self, raw: Any) -> tuple[Mission, ...]:
        if not isinstance(raw, list):
            self.problem("suite", "missions", ("missions",),
                         f"must be a list of missions, not {_describe(raw)}")
            return ()
        built = [(i, self.mission(i, item)) for i, item in enumerate(raw)]
        self.positions = tuple(i for i, m in built if m is not None)  # for check's message
        return tuple(m for _, m in built if m is not None)

    def mission(self, index: int, raw: Any) -> Mission | None:
        """The mission, or None with every problem it has recorded."""
        steps: tuple[str | int, ...] = ("missions", index)
        if not isinstance(raw, dict):
            self.problem(f"mission #{index + 1}", None, steps,
                         f"must be a mapping of mission fields, not {_describe(raw)}")
            return None
        before = len(self.problems)
        if self.repeated:
            self.duplicates(_where(raw, index), steps)
        values: dict[str, Any] = {}
        bad: set[str] = set()
        kinds, plain = self.kinds, self.plain
        for name, value in raw.items():
            shape = plain.get(name) if type(name) is str else None
            if type(value) is shape:  # the common case, stored as ``value`` stores it
                if shape is not list:
                    values[name] = value
                    continue
                if _ONLY_STR.issuperset(map(type, value)):
                    values[name] = tuple(value)
                    continue
            kind = kinds.get(name) if type(name) is str else None
            if kind is None:
                self.unknown(_where(raw, index), name, list(kinds), (*steps, str(name)))
            elif value is None:
                continue  # an empty value means "not given"
            else:
                ok, stored = self.value(_where(raw, index), name, kind, value, (*steps, name))
                if ok:
                    values[name] = stored
                else:
                    bad.add(name)
        for name in REQUIRED_FIELDS:
            if raw.get(name) is None:
                said = "has no value" if name in raw else "is missing"
                self.problem(_where(raw, index), name, steps,
                             f"{said}; every mission needs key, flag and prompt")
                bad.add(name)
        line = self.line(*steps) if self.root is not None else None
        if len(self.problems) > before:
            blanks = {name: "" for name in REQUIRED_FIELDS if name in bad}
            self.partial.append((index, Mission(**values, **blanks, line=line), frozenset(bad)))
            return None
        return Mission(**values, line=line)

    def assets(self, raw: Any) -> dict[str, str]:
        steps = ("assets",)
        if isinstance(raw, list):
            ok, ids = self.value("suite", "assets", _STRS, raw, steps)
            return dict.fromkeys(ids, "") if ok else {}
        if not isinstance(raw, dict):
            self.problem("suite", "assets", steps, "must be a mapping of id to description "
                         f"or a list of ids, not {_describe(raw)}")
            return {}
        assets: dict[str, str] = {}
        for asset, text in raw.items():
            if not isinstance(asset, str):
                self.problem("suite", "assets", steps,
                             f"asset id {_describe(asset)} must be a string; quote it")
            elif text is not None and not isinstance(text, str):
                self.problem("suite", "assets", (*steps, asset), f"the description of "
                             f"{asset!r} must be a string, not {_describe(text)}")
            else:
                assets[asset] = text or ""
        return assets

    def rubric(self, raw: Any) -> tuple[dict[str, Any], ...]:
        steps = ("rubric_changes",)
        if not isinstance(raw, list):
            self.problem("suite", "rubric_changes", steps,
                         f"must be a list of {{date, key, what, why}}, not {_describe(raw)}")
            return ()
        changes = []
        for i, item in enumerate(raw):
            if isinstance(item, list) and len(item) == len(RUBRIC_FIELDS):
                item = dict(zip(RUBRIC_FIELDS, item, strict=True))  # the seed's list form
            if not isinstance(item, dict):
                self.problem(f"rubric change #{i + 1}", None, (*steps, i),
                             "must be a mapping of date, key, what and why (or a list of those "
                             f"four), not {_describe(item)}")
                continue
            change = {str(k): _plain_date(v) for k, v in item.items()}
            for name in RUBRIC_FIELDS:
                value = change.get(name)
                if value is not None and not isinstance(value, str):
                    self.problem(f"rubric change #{i + 1}", name, (*steps, i, name),
                                 f"must be a string, not {_describe(value)}")
            changes.append(change)
        return tuple(changes)


def suite_defaults() -> dict[str, str]:
    """The check fields a suite may also give at its top level (``Field.suite_default``),
    each with its kind."""
    return {f.name: f.kind for f in checks.fields() if f.suite_default}


def _laid_over(m: Mission, extras: dict[str, Any], defaults: dict[str, str]) -> Mission:
    """The mission with each of its suite-default fields laid over the suite's value."""
    given = {name: checks.freeze({**extras[name], **m.settings[name]})
             for name in defaults if name in extras and name in m.settings}
    if not given:
        return m
    return Mission(**{**dict(m._fields()), **given}, line=m.line)


def _kind(name: Any, table: dict[str, str]) -> str | None:
    return table.get(name) if isinstance(name, str) else None


#: The type a value of each kind has in the common case (see ``_Builder.plain``); a number,
#: a mapping and anything else goes the long way, through ``_Builder.value``.
_PLAIN: dict[str, type] = {_STR: str, _BOOL: bool, _INT: int, _STRS: list}
_ONLY_STR = frozenset({str})


def _where(raw: dict[Any, Any], index: int) -> str:
    """How a problem names a mission: by its key when it has one, else by its place."""
    key = raw.get("key")
    return f"mission {key!r}" if isinstance(key, str) and key.strip() else f"mission #{index + 1}"


__all__ = [
    "CAPABILITIES", "SPLITS", "SUITE_FILES", "MISSION_FIELDS", "SUITE_FIELDS", "EXTRA_FIELDS",
    "Mission", "Suite", "SuiteError", "default_name", "load_suite", "mission_kinds",
]
