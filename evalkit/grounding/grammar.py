"""The grounding grammar: what a skill's ``grounding:`` block may say, checked whole.

A grammar is declared per skill and never built in. ``parse_grammar`` reads
the raw mapping of a manifest's ``grounding:`` block and refuses it with
every problem in one message (unknown keys, wrong types, regexes that do not
compile or match the empty string, a ``must_cite`` naming a check the block
does not configure). ``Grammar`` may also be built directly (tests, library
callers); it runs the same checks.

Which checks a grammar configures:

- ``identifiers`` — ``identifier_pattern`` is given;
- ``figures`` — ``number_pattern`` or ``figures_from`` is given (without a
  ``number_pattern`` the answer's figures are found by a built-in number
  shape: plain, thousands-grouped and decimal numbers);
- ``claims`` — ``claim_table: true``;
- ``planes`` — ``planes`` names at least one plane.

A block that configures none of them is refused: it would report a clean
check over nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.patterns import Pattern, compile_pattern

#: The checks, in report order.
CHECKS: tuple[str, ...] = ("identifiers", "figures", "claims", "planes")

#: The keys a ``grounding:`` block may hold.
KEYS: tuple[str, ...] = (
    "identifier_pattern", "number_pattern", "ignore", "max_repairs", "must_cite",
    "figures_from", "claim_table", "planes",
)

PLANE_KEYS: tuple[str, ...] = ("tools", "claims")

DEFAULT_MAX_REPAIRS = 1


@dataclass(frozen=True)
class Plane:
    """A kind of work: the tools that do it and the phrases that claim it was done."""

    name: str
    tools: tuple[str, ...]
    claims: tuple[str, ...]


@dataclass(frozen=True)
class Grammar:
    """A validated grounding grammar. Construction checks everything ``parse_grammar`` checks.

    ``must_cite`` may be given as the manifest writes it (``True``, a list of
    checks, or a mapping check -> minimum); it is kept as a mapping of every
    configured check to its minimum (0 when not required). ``planes`` may be a
    mapping name -> ``{tools, claims}`` or ``Plane`` objects.
    """

    identifier_pattern: str | None = None
    number_pattern: str | None = None
    ignore: tuple[str, ...] = ()
    max_repairs: int = DEFAULT_MAX_REPAIRS
    must_cite: Any = None
    figures_from: tuple[str, ...] | None = None
    claim_table: bool = False
    planes: Any = ()
    identifier_re: Pattern | None = field(init=False, repr=False, compare=False,
                                                  default=None)
    number_re: Pattern | None = field(init=False, repr=False, compare=False,
                                              default=None)

    def __post_init__(self) -> None:
        problems: list[str] = []
        values = _normalise({k: getattr(self, k) for k in KEYS}, problems)
        if problems:
            raise EvalkitError(_message(problems))
        for key, value in values.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "identifier_re", values["_identifier_re"])
        object.__setattr__(self, "number_re", values["_number_re"])

    def configures(self, check: str) -> bool:
        """Whether ``check`` (one of ``CHECKS``) runs under this grammar."""
        return check in _configured(self.identifier_pattern, self.number_pattern,
                                    self.figures_from, self.claim_table, self.planes)

    @property
    def configured(self) -> tuple[str, ...]:
        return tuple(c for c in CHECKS if self.configures(c))

    def minimum(self, check: str) -> int:
        """The ``must_cite`` minimum of ``check`` (0 when none is required)."""
        return int(self.must_cite.get(check, 0))


def parse_grammar(mapping: Any) -> Grammar:
    """A manifest's raw ``grounding:`` mapping -> ``Grammar``; every problem in one EvalkitError."""
    if not isinstance(mapping, Mapping):
        raise EvalkitError(f"grounding: must be a mapping of {', '.join(KEYS)}; "
                           f"got {type(mapping).__name__}")
    problems = [f"unknown key {key!r} (keys: {', '.join(KEYS)})"
                for key in mapping if key not in KEYS]
    raw = {key: mapping.get(key) for key in KEYS}
    if raw["ignore"] is None:
        raw["ignore"] = ()
    if raw["max_repairs"] is None and "max_repairs" not in mapping:
        raw["max_repairs"] = DEFAULT_MAX_REPAIRS
    if raw["claim_table"] is None and "claim_table" not in mapping:
        raw["claim_table"] = False
    if raw["planes"] is None and "planes" not in mapping:
        raw["planes"] = ()
    values = _normalise(raw, problems)
    if problems:
        raise EvalkitError(_message(problems))
    return Grammar(**{key: values[key] for key in KEYS})


# --- the checks of every key ---------------------------------------------------------------

def _message(problems: list[str]) -> str:
    noun = "problem" if len(problems) == 1 else "problems"
    return f"grounding: {len(problems)} {noun}: " + "; ".join(problems)


def _configured(identifier: Any, number: Any, figures_from: Any, claim_table: Any,
                planes: Any) -> set[str]:
    found = set()
    if identifier:
        found.add("identifiers")
    if number or figures_from:
        found.add("figures")
    if claim_table is True:
        found.add("claims")
    if planes:
        found.add("planes")
    return found


def _pattern(key: str, value: Any, problems: list[str]) -> Pattern | None:
    """The compiled pattern (RE2: it runs on the model's answer and tool output), or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        problems.append(f"{key} must be a regular expression (a non-empty string)")
        return None
    try:
        compiled = compile_pattern(value)
    except ValueError as refused:
        problems.append(f"{key} /{value}/ {refused}")
        return None
    if compiled.fullmatch(""):
        problems.append(f"{key} /{value}/ matches the empty string")
        return None
    return compiled


def _names(key: str, value: Any, problems: list[str], *, allow_numbers: bool = False,
           allow_empty: bool = True) -> tuple[str, ...] | None:
    """A list of non-empty strings (numbers too when ``allow_numbers``) as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) \
            or isinstance(value, Mapping):
        problems.append(f"{key} must be a list, not {type(value).__name__}")
        return None
    items = list(value)
    out: list[str] = []
    for item in items:
        if isinstance(item, str) and item:
            out.append(item)
        elif allow_numbers and isinstance(item, (int, float)) and not isinstance(item, bool):
            out.append(str(item))
        else:
            what = "strings or numbers" if allow_numbers else "non-empty strings"
            problems.append(f"{key} holds {item!r}; it must hold {what}")
            return None
    if not out and not allow_empty:
        problems.append(f"{key} is empty")
        return None
    return tuple(out)


def _planes(value: Any, problems: list[str]) -> tuple[Plane, ...]:
    if value is None or value == ():
        return ()
    if isinstance(value, (list, tuple)) and all(isinstance(p, Plane) for p in value):
        pairs = [(p.name, {"tools": p.tools, "claims": p.claims}) for p in value]
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        problems.append("planes must be a mapping of plane name -> {tools, claims}")
        return ()
    planes = []
    for name, spec in pairs:
        if not isinstance(name, str) or not name:
            problems.append(f"planes: {name!r} is not a plane name")
            continue
        if not isinstance(spec, Mapping):
            problems.append(f"planes.{name} must be a mapping with tools and claims")
            continue
        problems.extend(f"planes.{name}: unknown key {key!r} (keys: tools, claims)"
                        for key in spec if key not in PLANE_KEYS)
        tools = claims = None
        for key in PLANE_KEYS:
            if spec.get(key) is None:
                problems.append(f"planes.{name} needs {key}")
        if spec.get("tools") is not None:
            tools = _names(f"planes.{name}.tools", spec["tools"], problems, allow_empty=False)
        if spec.get("claims") is not None:
            claims = _names(f"planes.{name}.claims", spec["claims"], problems,
                            allow_empty=False)
        if tools is not None and claims is not None:
            planes.append(Plane(name, tools, claims))
    return tuple(planes)


def _must_cite(value: Any, configured: set[str], problems: list[str]) -> dict[str, int]:
    """``must_cite`` as written -> {check: minimum} over the configured checks."""
    wanted: dict[str, int] = {}
    if value is None or value is False:
        pass
    elif value is True:
        wanted = dict.fromkeys(configured, 1)
    elif isinstance(value, Mapping):
        for check, minimum in value.items():
            if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
                problems.append(f"must_cite.{check} must be a whole number of 0 or more, "
                                f"not {minimum!r}")
                continue
            wanted[str(check)] = minimum
    elif isinstance(value, (list, tuple)):
        for check in value:
            if not isinstance(check, str):
                problems.append(f"must_cite holds {check!r}; it must name checks")
                continue
            wanted[check] = 1
    else:
        problems.append("must_cite must be true, a list of checks, or a mapping check -> "
                        f"minimum; got {type(value).__name__}")
    for check in list(wanted):
        if check not in CHECKS:
            problems.append(f"must_cite names {check!r}, which is not a check "
                            f"({', '.join(CHECKS)})")
            del wanted[check]
        elif check not in configured:
            problems.append(f"must_cite names {check}, which this grammar does not configure")
            del wanted[check]
    return {check: wanted.get(check, 0) for check in CHECKS if check in configured}


def _normalise(raw: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Every key checked and put in its kept form; problems appended, never raised."""
    out: dict[str, Any] = {}
    out["_identifier_re"] = _pattern("identifier_pattern", raw["identifier_pattern"], problems)
    out["_number_re"] = _pattern("number_pattern", raw["number_pattern"], problems)
    out["identifier_pattern"] = raw["identifier_pattern"]
    out["number_pattern"] = raw["number_pattern"]
    ignore = raw["ignore"]
    out["ignore"] = (_names("ignore", ignore, problems, allow_numbers=True)
                     if ignore is not None else ()) or ()
    repairs = raw["max_repairs"]
    if isinstance(repairs, bool) or not isinstance(repairs, int) or repairs < 0:
        problems.append(f"max_repairs must be a whole number of 0 or more, not {repairs!r}")
        repairs = DEFAULT_MAX_REPAIRS
    out["max_repairs"] = repairs
    figures_from = raw["figures_from"]
    if figures_from is not None:
        figures_from = _names("figures_from", figures_from, problems, allow_empty=False)
    out["figures_from"] = figures_from
    claim_table = raw["claim_table"]
    if not isinstance(claim_table, bool):
        problems.append(f"claim_table must be true or false, not {claim_table!r}")
        claim_table = False
    out["claim_table"] = claim_table
    out["planes"] = _planes(raw["planes"], problems)
    configured = _configured(raw["identifier_pattern"], raw["number_pattern"], figures_from,
                             claim_table, out["planes"])
    if not configured and not problems:
        problems.append("the block configures no check: give identifier_pattern, "
                        "number_pattern or figures_from, claim_table: true, or planes")
    out["must_cite"] = _must_cite(raw["must_cite"], configured, problems)
    return out
