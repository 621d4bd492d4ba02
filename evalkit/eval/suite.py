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
suite written for it loads unchanged. evalkit adds these optional top-level
keys of its own:

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
import json
import math
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from evalkit.errors import EvalkitError
from evalkit.eval import strict_json
from evalkit.gcpause import collector_paused

#: The capability vocabulary every suite starts from.
CAPABILITIES: tuple[str, ...] = (
    "orientation", "chaining", "absence", "state", "boundary", "disambiguation",
    "submission", "synthesis", "routing", "partial_synthesis", "protocol_shape",
)

#: The two halves; train and test are never blended into one number.
SPLITS: tuple[str, ...] = ("train", "test")

#: What a directory given as a suite is searched for, first found wins.
SUITE_FILES: tuple[str, ...] = ("missions.yaml", "missions.yml", "missions.json", "suite.yaml")

#: evalkit's own optional top-level keys that hold paths relative to the suite file.
PATH_KEYS: tuple[str, ...] = ("skill", "agents", "fixtures")

_FAST_LOADER = getattr(yaml, "CSafeLoader", None)

#: libyaml's composer recurses in C and crashes the process (a segfault, not an
#: exception) somewhere past 20,000 levels of nesting; the pure-Python loader
#: raises RecursionError instead. Texts whose nesting *could* exceed this bound
#: take the slow, safe path.
_FAST_MAX_NESTING = 2000

# Field kinds: how a value is checked and stored.
_STR, _STRS, _BOOL, _INT = "str", "strs", "bool", "int"
#: A mapping of string to string (``fixture_for``: mission key -> fixture name).
_MAP = "map"

MISSION_FIELDS: dict[str, str] = {
    "key": _STR, "flag": _STR, "prompt": _STR,
    "must": _STRS, "must_not": _STRS, "because": _STR, "split": _STR,
    "expects_tools": _STRS, "forbids_tools": _STRS, "expects_outcome": _STR,
    "expects_caveat_ok": _BOOL, "expects_grounded": _BOOL,
    "answer_must_match": _STRS, "answer_must_not_match": _STRS,
    "max_reply_rejected": _INT, "must_not_stage": _BOOL, "flags": _STRS,
}
REQUIRED_FIELDS: tuple[str, ...] = ("key", "flag", "prompt")

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


@dataclass(frozen=True)
class Mission:
    """One question, graded the same way every time. ``None`` means "not checked"."""

    key: str
    flag: str
    prompt: str
    must: tuple[str, ...] = ()
    must_not: tuple[str, ...] = ()
    because: str = ""
    split: str = "train"
    expects_tools: tuple[str, ...] | None = None
    forbids_tools: tuple[str, ...] | None = None
    expects_outcome: str | None = None
    expects_caveat_ok: bool = False
    expects_grounded: bool | None = None
    answer_must_match: tuple[str, ...] | None = None
    answer_must_not_match: tuple[str, ...] | None = None
    max_reply_rejected: int | None = None
    must_not_stage: bool = False
    #: Extra CLI tokens the mission is spawned with (not capabilities).
    flags: tuple[str, ...] = ()
    #: 1-based line where the mission starts in its file, when known; not part of equality.
    line: int | None = field(default=None, compare=False)


#: Mission's fields in declaration order, each with its default (MISSING when required).
_MISSION_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Mission)}
assert not hasattr(Mission, "__post_init__") and all(
    f.default_factory is MISSING for f in fields(Mission)), "_new_mission builds Missions directly"


def _new_mission(state: dict[str, Any], line: int | None) -> Mission:
    """``Mission(**state, line=line)`` for a ``_plain_mission`` state, a fraction of the cost.

    The frozen dataclass ``__init__`` sets each of its 18 fields through
    ``object.__setattr__``, which dominates building a 100,000-mission suite.
    The instance dict this installs has the same keys, in the same order,
    with the same values, so the object is indistinguishable (equality, hash,
    repr, pickling). That holds while Mission has no ``__post_init__`` and no
    default factories, which the assertion above guards.
    """
    mission = object.__new__(Mission)
    state["line"] = line
    object.__setattr__(mission, "__dict__", state)
    return mission


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


class SuiteError(EvalkitError):
    """A file that is not a suite; ``problems`` lists every reason, one sentence each."""

    exit_code = 1

    def __init__(self, message: str, problems: list[str] | None = None, *,
                 exit_code: int | None = None, loaded: Loaded | None = None) -> None:
        super().__init__(message, exit_code=exit_code)
        self.problems: list[str] = list(problems) if problems is not None else [message]
        #: What did load despite the problems, so ``check`` can name the rest in the same message.
        self.loaded = loaded

    @classmethod
    def from_problems(cls, path: Path, problems: list[str], *,
                      loaded: Loaded | None = None) -> SuiteError:
        lines = [f"suite {path} cannot be loaded ({counted(problems)}):"]
        lines += [f"  - {p}" for p in problems]
        return cls("\n".join(lines), problems, loaded=loaded)


def counted(problems: list[str]) -> str:
    """"1 problem", "3 problems": how every suite and check message counts them."""
    return f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"


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
    with collector_paused():
        return _load(_suite_file(Path(path)), default_name(Path(path)))


def default_name(given: Path) -> str:
    """A suite's name when it gives none: the file stem, as the spec says (so
    ``pack/missions.yaml`` is ``missions``); for a folder given as the suite
    (evalkit's addition), the folder's name."""
    return given.resolve().name if given.is_dir() else given.stem


def _load(file: Path, name: str) -> Suite:
    text = _read_text(file)
    fast = _json_fast_path(text) if len(text) > _FAST_PATH_FROM else None
    if fast is not None:
        # Machine-written JSON suites can be large: build without the YAML node
        # tree (missions then carry no line), and compose it only on a problem.
        try:
            return _Builder(file, _Tree(), name).suite(fast)
        except SuiteError:
            pass
    data, tree = _parse(file, text)
    return _Builder(file, tree, name).suite(data)


#: Above this many characters a JSON suite is built without its node tree.
_FAST_PATH_FROM = 256 * 1024


def _json_fast_path(text: str) -> Any | None:
    """The document, when ``text`` is a JSON object without repeated keys; else None."""
    if not text.lstrip().startswith("{"):
        return None
    return strict_json.loads(text.encode("utf-8"))


# -- reading -----------------------------------------------------------------


def _suite_file(path: Path) -> Path:
    if path.is_dir():
        for name in SUITE_FILES:
            if (path / name).is_file():
                return path / name
        raise SuiteError(f"no suite in folder {path}: expected one of {', '.join(SUITE_FILES)}",
                         exit_code=2)
    if not path.exists():
        raise SuiteError(f"no suite at {path}: the path does not exist", exit_code=2)
    if not path.is_file():
        raise SuiteError(f"suite {path} is not a regular file", exit_code=2)
    return path


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"cannot read suite {path}: {exc.strerror or exc}", exit_code=2) from None
    if b"\0" in raw:
        raise SuiteError(f"suite {path} is a binary file, not YAML or JSON text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"suite {path} is not UTF-8 text "
                         f"(byte {raw[exc.start]:#04x} at offset {exc.start})") from None


@dataclass(frozen=True)
class _Tree:
    """The YAML node tree (it knows the lines) and the keys a mapping repeats.

    Repeats are found before construction: constructing a merge key (``<<``)
    splices the merged pairs into the node, which would look like repeats.
    """

    root: yaml.Node | None = None
    repeated: frozenset[int] = frozenset()  # id() of each repeating key node


def _parse(path: Path, text: str) -> tuple[Any, _Tree]:
    """The data, plus the node tree when the parser can give one."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"suite {path} is not valid JSON: {exc.msg} "
                             f"(line {exc.lineno}, column {exc.colno})") from None
        except RecursionError:
            raise SuiteError(f"suite {path} is not valid JSON: it nests too deeply") from None
        except ValueError as exc:
            raise SuiteError(f"suite {path} is not valid JSON: {_reason(exc)}") from None
        try:  # JSON is (nearly) YAML: borrow its node tree for line numbers, best effort
            return data, _compose(text)[1]
        except Exception:
            return data, _Tree()
    try:
        return _compose(text)
    except RecursionError:
        raise SuiteError(f"suite {path} is not valid YAML: it nests too deeply") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SuiteError(f"suite {path} is not valid YAML: {exc.problem or exc.context}{where}"
                         ) from None
    except Exception as exc:  # anything the third-party parser throws is about the file
        raise SuiteError(f"suite {path} is not valid YAML: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    """A parser's complaint as a reason about the file: Python's limit on digits in an
    integer comes with advice for programmers (sys.set_int_max_str_digits), not for a suite."""
    text = str(exc)
    if "integer string conversion" in text:
        return "it holds an integer of more than 4,300 digits, more than any field takes"
    return text.splitlines()[0] if text else type(exc).__name__


def _compose(text: str) -> tuple[Any, _Tree]:
    loader = (_FAST_LOADER if _FAST_LOADER and _nesting_bound(text) <= _FAST_MAX_NESTING
              else yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, _Tree()
        tree = _Tree(node, _repeated_keys(node))
        return loader.construct_document(node), tree
    finally:
        loader.dispose()


def _repeated_keys(root: yaml.Node) -> frozenset[int]:
    """Key nodes that repeat an earlier key of the same mapping (later one wins, silently)."""
    repeated: set[int] = set()
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # aliases share nodes, and may even loop
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[tuple[str, str]] = set()  # (tag, text): 1 and "1" are different keys
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and not key.tag.endswith(":merge"):
                    if (key.tag, key.value) in keys:
                        repeated.add(id(key))
                    keys.add((key.tag, key.value))
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return frozenset(repeated)


def _nesting_bound(text: str) -> int:
    """An upper bound on how deep YAML can nest in ``text``.

    Every collection opens with, or holds, at least one indicator of its own
    (``[``, ``{``, ``-``, ``?`` or ``:``), so counting them all over-counts
    but never under-counts.
    """
    flow = text.count("[") + text.count("{")
    if flow > _FAST_MAX_NESTING:
        flow = _flow_depth(text)
    block = max((len(line) - len(line.lstrip(" ")) + sum(line.count(c) for c in "-?:")
                 for line in text.splitlines()), default=0)
    return 1 + flow + block


_FLOW_TOKENS = re.compile(r"""[\[\]{}'"#\n]""")


def _flow_depth(text: str) -> int:
    """The deepest flow nesting (``[``/``{``), skipping quoted text and comments.

    Brackets in block plain scalars can only over-count (a close is clamped at
    zero), so the bound stays safe for the C loader's recursion limit.
    """
    depth = deepest = 0
    quote: str | None = None
    comment = False
    pos = 0
    for match in _FLOW_TOKENS.finditer(text):
        ch, at = match.group(), match.start()
        if comment:
            comment = ch != "\n"
            continue
        if quote == "'":
            if ch == "'":
                quote = None  # '' (an escaped quote) reopens at the next one
            continue
        if quote == '"':
            if ch == '"' and not _escaped(text, at, pos):
                quote = None
            continue
        if ch in "'\"":
            quote = ch
            pos = at
        elif ch == "#" and (at == 0 or text[at - 1] in " \t\n"):
            comment = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def _escaped(text: str, at: int, start: int) -> bool:
    """Whether the character at ``at`` is preceded by an odd run of backslashes."""
    n = 0
    while at - n - 1 > start and text[at - n - 1] == "\\":
        n += 1
    return n % 2 == 1


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
                             f"(name, missions, tools, ...); the document is {shape}")
        fields: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        known = [*SUITE_FIELDS, *EXTRA_FIELDS]
        self.duplicates("suite", ())
        for name, raw in data.items():
            steps = (str(name),)
            kind = _kind(name, SUITE_FIELDS) or _kind(name, EXTRA_FIELDS)
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
        """One mission: a plain one is built directly, anything else is looked at closely.

        A suite with a repeated key anywhere takes the close look throughout,
        since only that path reports repeats.
        """
        if not self.repeated and isinstance(raw, dict):
            state = _plain_mission(raw)
            if state is not None:
                line = self.line("missions", index) if self.root is not None else None
                return _new_mission(state, line)
        return self.checked_mission(index, raw)

    def checked_mission(self, index: int, raw: Any) -> Mission | None:
        """The mission, or None with every problem it has recorded (the detailed path)."""
        steps: tuple[str | int, ...] = ("missions", index)
        if not isinstance(raw, dict):
            self.problem(f"mission #{index + 1}", None, steps,
                         f"must be a mapping of mission fields, not {_describe(raw)}")
            return None
        key = raw.get("key")
        where = f"mission {key!r}" if isinstance(key, str) and key.strip() else \
            f"mission #{index + 1}"
        before = len(self.problems)
        self.duplicates(where, steps)
        values: dict[str, Any] = {}
        bad: set[str] = set()
        for name, value in raw.items():
            kind = _kind(name, MISSION_FIELDS)
            if kind is None:
                self.unknown(where, name, list(MISSION_FIELDS), (*steps, str(name)))
            elif value is not None:
                ok, stored = self.value(where, name, kind, value, (*steps, name))
                if ok:
                    values[name] = stored
                else:
                    bad.add(name)
        for name in REQUIRED_FIELDS:
            if raw.get(name) is None:
                said = "has no value" if name in raw else "is missing"
                self.problem(where, name, steps, f"{said}; every mission needs key, flag and prompt")
                bad.add(name)
        if len(self.problems) > before:
            blanks = {name: "" for name in REQUIRED_FIELDS if name in bad}
            self.partial.append((index, Mission(**values, **blanks, line=self.line(*steps)),
                                 frozenset(bad)))
            return None
        return Mission(**values, line=self.line(*steps))

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


def _kind(name: Any, table: dict[str, str]) -> str | None:
    return table.get(name) if isinstance(name, str) else None


#: The exact type of an acceptable value of each mission field (a bool is no int here).
_PLAIN_TYPES: dict[str, type] = {
    name: {_STR: str, _STRS: list, _BOOL: bool, _INT: int}[kind]
    for name, kind in MISSION_FIELDS.items()
}
_REQUIRED = frozenset(REQUIRED_FIELDS)


def _plain_mission(raw: dict[Any, Any]) -> dict[str, Any] | None:
    """Every Mission field of a mission with nothing wrong (for ``_new_mission``), or None.

    Exact type checks are enough to know that ``_Builder.value`` would accept
    every value unchanged (lists become tuples), so the common case skips the
    per-field bookkeeping that exists only to word problems. None is not a
    verdict: ``_Builder.checked_mission`` then decides, with its messages.
    """
    state = dict(_MISSION_DEFAULTS)
    for name, value in raw.items():
        try:
            plain = _PLAIN_TYPES[name]
        except KeyError:  # an unknown field
            return None
        if type(value) is not plain:
            if value is None and name not in _REQUIRED:
                continue  # an empty optional value means "not given"
            return None
        if plain is list:
            for item in value:
                if type(item) is not str:
                    return None
            value = tuple(value)
        state[name] = value
    for name in REQUIRED_FIELDS:
        if state[name] is MISSING:
            return None
    return state


__all__ = [
    "CAPABILITIES", "SPLITS", "SUITE_FILES", "MISSION_FIELDS", "SUITE_FIELDS", "EXTRA_FIELDS",
    "Mission", "Suite", "SuiteError", "default_name", "load_suite",
]
