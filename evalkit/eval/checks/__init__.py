"""The check registry: every machine check a mission can ask for, each defined once.

A ``Check`` carries everything about one rule: the mission fields that
configure it (their types, defaults and the words EVAL.md's table shows),
what ``check`` refuses about their values before anything runs, how a run
is judged and the sentence a failure reads as, the run facts it reads, and
how a report's sentence is read back to it. The suite loader, ``check``,
the verdict, ``diff`` and the docs all ask the registry; none of them names
a check. So adding a check is one module here (listed in ``BUILT_IN``), or,
outside evalkit, one ``Check`` registered with ``register_check`` or through
the ``evalkit.checks`` entry point group.

Registration is per process: a worker forked after it sees the same checks,
one started afresh loads the built-ins and the entry points again (a check
registered only by calling ``register_check`` is not there).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.suite import Mission
    from evalkit.eval.summary import RunSummary

#: How a field's value is read: text, a list of texts, true/false, a whole number, a
#: mapping of settings (read as a ``Frozen`` mapping; its check's ``validate`` says what
#: may be in it), or any finite number (an amount of money, say).
Kind = Literal["str", "strs", "bool", "int", "mapping", "number"]
KINDS: tuple[str, ...] = ("str", "strs", "bool", "int", "mapping", "number")

#: What a rule yields: a sentence (under the check's own name, or about its first
#: field), or a (name, sentence) pair naming one of the check's ``emits`` (or fields).
Said = str | tuple[str, str]

#: The group a distribution names its checks under (each entry point loads a ``Check``,
#: or an iterable of them).
ENTRY_POINT_GROUP = "evalkit.checks"

#: The built-in checks, by module, in the order a verdict lists their reasons.
BUILT_IN: tuple[str, ...] = (
    "expects_tools", "forbids_tools", "expects_outcome", "expects_grounded", "answer",
    "max_reply_rejected", "must_not_stage", "max_model_calls", "budgets", "judge",
)


@dataclass(frozen=True)
class Field:
    """One mission field: how the loader reads it and how EVAL.md's table states it.

    A field left out, or given as null, has its ``default``: "not checked".
    Adjacent fields of one check with the same ``type`` and ``meaning`` share
    a row of the table (``answer_must_match``, ``answer_must_not_match``).
    ``suite_default``: a ``mapping`` field a suite may also give at its top level;
    there it holds defaults each mission's own mapping is laid over (a mission
    without the field stays unset: the suite's value configures, it does not opt in).
    """

    name: str
    kind: Kind
    type: str
    meaning: str
    default: Any = None
    suite_default: bool = False


@dataclass(frozen=True)
class Check:
    """One machine check. ``judge`` and ``validate`` see a mission only when the suite
    set one of its ``fields``; either yields nothing when all is well.

    ``judge(mission, summary)`` yields why the run fails this mission, one plain
    sentence each, saying what happened and what the mission wanted.
    ``validate(mission, rules)`` yields why the mission's values for the check's fields
    cannot be graded (``rules``: the suite's served tools, cached pattern checks; see
    ``evalkit.eval.check.Rules``); a bare sentence is about the first field. It reads
    only those fields (and the suite): what it says is reused for every mission that
    gives the same values.
    ``reads`` names the ``RunSummary`` facts ``judge`` reads. ``emits`` lists other
    names its reasons go under besides ``name``, and ``reasons`` maps regexes over a
    reason sentence to those names, so ``diff`` can read reports that name no checks.
    ``note(mission, summary)``, when given, is what a verdict carries under the
    check's name besides its reasons (a JSON value, None for nothing): facts a
    sentence cannot hold for a program, e.g. which model judged the answer.
    """

    name: str
    fields: tuple[Field, ...]
    judge: Callable[[Mission, RunSummary], Iterable[Said]]
    validate: Callable[[Mission, Rules], Iterable[Said]] | None = None
    reads: tuple[str, ...] = ()
    emits: tuple[str, ...] = ()
    reasons: tuple[tuple[str, str], ...] = ()
    note: Callable[[Mission, RunSummary], Any] | None = None
    #: The flags the built-in agent is spawned with for a mission that sets this check's
    #: fields (a budget it should hold, not only be judged by); None: none.
    spawn_flags: Callable[[Mission], Iterable[str]] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a reason of this check may carry in ``Verdict.checks``."""
        return (self.name, *self.emits)

    def named(self, said: Said) -> tuple[str, str]:
        """(check, sentence) of one thing ``judge`` said."""
        return (self.name, said) if isinstance(said, str) else _named(said, self.name, self.names)

    def problems(self, mission: Mission, rules: Rules) -> list[tuple[str, str]]:
        """(field, sentence) for every reason the mission cannot be graded by this check."""
        if self.validate is None:
            return []
        found = list(self.validate(mission, rules))
        if not found:
            return found
        own = tuple(f.name for f in self.fields)
        return [_named(said, own[0], own) for said in found]


def _named(said: Said, default: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    if isinstance(said, str):
        return default, said
    name, sentence = said
    if name not in allowed:
        raise ValueError(f"a check said {sentence!r} under {name!r}, which is none of "
                         f"its names ({', '.join(allowed)})")
    return name, sentence


class Frozen(dict):  # type: ignore[type-arg]
    """A ``mapping`` field's value: a dict that cannot change and can be hashed (a
    ``Mission`` is immutable and hashable), nested mappings frozen and lists made tuples."""

    def __init__(self, value: Any = ()) -> None:
        super().__init__((k, freeze(v)) for k, v in dict(value).items())

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted((str(k), _hashable(v)) for k, v in self.items())))

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TypeError("a mission's settings cannot change")

    __setitem__ = __delitem__ = _refuse  # type: ignore[assignment]
    update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return Frozen, (dict(self),)


def freeze(value: Any) -> Any:
    """``value`` with every mapping a ``Frozen`` one and every list a tuple."""
    if isinstance(value, dict) and not isinstance(value, Frozen):
        return Frozen(value)
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


class CheckError(EvalkitError):
    """A check that cannot be registered: a name or field already taken, a broken plugin."""


class _Registry:
    """The checks of this process, in the order a verdict lists their reasons: the
    built-ins, then those of installed distributions, then those registered in code."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.by_field: dict[str, Check] = {}
        #: Every check field by name: what a mission looks up on each read of one.
        self.fields: dict[str, Field] = {}
        #: The fields a mission gives (in its order) -> the checks they set: suites repeat
        #: a few such sets over all their missions.
        self.configured: dict[tuple[str, ...], list[Check]] = {}
        self.loaded = False
        #: Bumped by every change, so what is derived from the checks knows when to redo it.
        self.version = 0

    def ensure(self) -> None:
        if self.loaded:
            return
        self.loaded = True
        try:
            for module in BUILT_IN:
                self.add(importlib.import_module(f"{__name__}.{module}").CHECK)
            for check in _installed():
                self.add(check)
        except BaseException:
            self.loaded = False
            self.checks.clear()
            self.by_field.clear()
            self.fields.clear()
            self.configured.clear()
            raise

    def add(self, check: Check) -> None:
        from evalkit.eval.mission import CORE_FIELDS  # a mission reads this registry

        if not isinstance(check, Check):
            raise CheckError(f"{check!r} is not an evalkit Check")
        if any(c.name == check.name for c in self.checks):
            raise CheckError(f"a check named {check.name!r} is registered already")
        if not check.fields:
            raise CheckError(f"check {check.name!r} names no mission field that sets it")
        core = {f.name for f in CORE_FIELDS}
        for f in check.fields:
            if not f.name.isidentifier() or f.name.startswith("_") or f.name in _TAKEN:
                raise CheckError(f"check {check.name!r} cannot name a mission field "
                                 f"{f.name!r}: a field is an identifier not starting with _, "
                                 "and not 'settings' or 'line'")
            if f.kind not in KINDS:
                raise CheckError(f"check {check.name!r} field {f.name!r} has kind {f.kind!r}; "
                                 f"use one of {', '.join(KINDS)}")
            if f.suite_default and f.kind != "mapping":
                raise CheckError(f"check {check.name!r} field {f.name!r} takes a suite "
                                 "default, which only a mapping field can")
            owner = "every mission" if f.name in core else (
                f"check {self.by_field[f.name].name!r}" if f.name in self.by_field else None)
            if owner is not None:
                raise CheckError(f"check {check.name!r} cannot take the mission field "
                                 f"{f.name!r}: it belongs to {owner}")
        for pattern, name in check.reasons:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise CheckError(f"check {check.name!r} reads reasons back with {pattern!r}, "
                                 f"which does not compile: {exc}") from None
            if name not in check.names:
                raise CheckError(f"check {check.name!r} reads reasons back as {name!r}, "
                                 "which is none of its names")
        self.checks.append(check)
        self.by_field.update((f.name, check) for f in check.fields)
        self.fields.update((f.name, f) for f in check.fields)
        self.configured.clear()
        self.version += 1

    def remove(self, name: str) -> Check:
        found = next((c for c in self.checks if c.name == name), None)
        if found is None:
            raise CheckError(f"no check named {name!r} is registered")
        self.checks.remove(found)
        for f in found.fields:
            del self.by_field[f.name]
            del self.fields[f.name]
        self.configured.clear()
        self.version += 1
        return found


_REGISTRY = _Registry()

#: Names a mission answers to that are not fields of any check.
_TAKEN = frozenset({"settings", "line"})


def _installed() -> Iterator[Check]:
    """The checks installed distributions offer under ``ENTRY_POINT_GROUP``, by entry name."""
    from importlib.metadata import entry_points

    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            found = point.load()
        except Exception as exc:
            raise CheckError(f"the check {point.name!r} ({point.value}, entry point "
                             f"{ENTRY_POINT_GROUP}) cannot be loaded: "
                             f"{type(exc).__name__}: {exc}") from None
        offered = [found] if isinstance(found, Check) else found
        if not isinstance(offered, Iterable) or not all(isinstance(c, Check) for c in offered):
            raise CheckError(f"the entry point {point.name!r} ({point.value}) in "
                             f"{ENTRY_POINT_GROUP} is not an evalkit Check")
        yield from offered


def register_check(check: Check) -> Check:
    """Add ``check`` for every suite this process loads from now on; returns it.

    Refused (``CheckError``, one sentence) when its name or a field is taken.
    """
    _REGISTRY.ensure()
    _REGISTRY.add(check)
    return check


def unregister_check(name: str) -> Check:
    """Take a check out again (a test's clean-up); returns it."""
    _REGISTRY.ensure()
    return _REGISTRY.remove(name)


def registered() -> tuple[Check, ...]:
    """Every check, in the order a verdict lists their reasons."""
    _REGISTRY.ensure()
    return tuple(_REGISTRY.checks)


def built_in() -> tuple[Check, ...]:
    """evalkit's own checks (what EVAL.md documents), whatever else is installed."""
    return tuple(importlib.import_module(f"{__name__}.{module}").CHECK for module in BUILT_IN)


def field(name: str) -> Field | None:
    """The check field of that name, or None."""
    if not _REGISTRY.loaded:
        _REGISTRY.ensure()
    return _REGISTRY.fields.get(name)


def field_table() -> Mapping[str, Field]:
    """Every check field by name (read only): for a caller looking up many at once."""
    if not _REGISTRY.loaded:
        _REGISTRY.ensure()
    return _REGISTRY.fields


def fields() -> tuple[Field, ...]:
    """Every check field, check by check."""
    return tuple(f for c in registered() for f in c.fields)


def configured(settings: Iterable[str]) -> list[Check]:
    """The checks a mission sets (``settings``: the fields it gives), in registry order."""
    if not _REGISTRY.loaded:
        _REGISTRY.ensure()
    given = tuple(settings)
    found = _REGISTRY.configured.get(given)
    if found is None:
        by_field = _REGISTRY.by_field
        owners = {by_field[name].name for name in given if name in by_field}
        found = _REGISTRY.configured[given] = [c for c in _REGISTRY.checks if c.name in owners]
    return found


def version() -> int:
    """Changes whenever a check is added or removed."""
    _REGISTRY.ensure()
    return _REGISTRY.version


__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "KINDS", "Check", "CheckError", "Field", "Frozen",
           "Kind", "Said", "built_in", "configured", "field", "field_table", "fields", "freeze",
           "register_check", "registered", "unregister_check", "version"]
