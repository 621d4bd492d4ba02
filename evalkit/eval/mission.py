"""One mission: the question, how a reader judges the answer, and the checks it sets.

Every mission has the same few fields (``CORE_FIELDS``). The rest configure
machine checks, and belong to whichever check the registry
(``evalkit.eval.checks``) says owns them: a mission keeps the ones its suite
gave in ``settings`` and answers ``mission.expects_tools`` (or any check
field) from there, else with the field's default, "not checked".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from evalkit.eval.checks import Field, field, field_table

#: The fields of every mission, in the order EVAL.md's table lists them.
CORE_FIELDS: tuple[Field, ...] = (
    Field("key", "str", "str, required", "unique; also the run-directory name under `--runs`"),
    Field("flag", "str", "str, required", "the one capability this mission captures"),
    Field("prompt", "str", "str, required", "given verbatim as the objective"),
    Field("must", "strs", "list of str, required from 8 missions",
          "the reader's rubric: shown in reports, never auto-scored"),
    Field("must_not", "strs", "list of str, required from 8 missions",
          "the reader's rubric: shown in reports, never auto-scored"),
    Field("because", "str", "str, required from 8 missions", "why the mission exists"),
    Field("split", "str", "`train` or `test` (default train)", "which half"),
    Field("flags", "strs", "list of str", "extra CLI tokens the mission is spawned with, e.g. "
          '`["--swarm"]`, `["--gate-tool", "mcp.cancel_job"]`'),
)
REQUIRED_FIELDS: tuple[str, ...] = ("key", "flag", "prompt")

#: The mission fields of the seed harness's schema (docs/suites-and-scoring.md): a suite
#: written for it uses no others, and each is a core field or one of evalkit's own checks'.
MISSION_FIELDS: tuple[str, ...] = (
    "key", "flag", "prompt", "must", "must_not", "because", "split", "expects_tools",
    "forbids_tools", "expects_outcome", "expects_caveat_ok", "expects_grounded",
    "answer_must_match", "answer_must_not_match", "max_reply_rejected", "must_not_stage",
    "flags",
)

_CORE = ("key", "flag", "prompt", "must", "must_not", "because", "split", "flags")


class Mission:
    """One question, graded the same way every time; immutable.

    ``line`` (where the mission starts in its file, when known) is not part of
    equality. Check fields are given as keywords (``expects_tools=("mcp.add",)``);
    None, or a field's default, means not given.
    """

    # ``__dict__`` holds the check fields the suite gave (``settings``): an attribute read
    # finds a given value there before ``_CheckField`` (which answers only the defaults),
    # at the cost of a plain lookup (the checks read their fields for every verdict).
    __slots__ = (*_CORE, "line", "__dict__")

    key: str
    flag: str
    prompt: str
    must: tuple[str, ...]
    must_not: tuple[str, ...]
    because: str
    split: str
    flags: tuple[str, ...]
    line: int | None

    def __init__(self, key: str, flag: str, prompt: str, must: tuple[str, ...] = (),
                 must_not: tuple[str, ...] = (), because: str = "", split: str = "train",
                 flags: tuple[str, ...] = (), *, line: int | None = None,
                 **settings: Any) -> None:
        given = {}
        table = field_table()
        for name, value in settings.items():
            spec = table.get(name)
            if spec is None:
                raise TypeError(f"Mission() got an unexpected keyword argument {name!r}: "
                                "no registered check has that field")
            if value is not None and value != spec.default:
                given[name] = value
        put = object.__setattr__
        put(self, "key", key)
        put(self, "flag", flag)
        put(self, "prompt", prompt)
        put(self, "must", must)
        put(self, "must_not", must_not)
        put(self, "because", because)
        put(self, "split", split)
        put(self, "flags", flags)
        put(self, "__dict__", given)
        put(self, "line", line)

    @property
    def settings(self) -> Mapping[str, Any]:
        """The check fields the suite gave (name -> value), in its order; read only."""
        return self.__dict__

    def __getattr__(self, name: str) -> Any:
        """A check field met for the first time: from now on ``_CheckField`` answers it."""
        if field(name) is None:
            raise AttributeError(f"a Mission has no field {name!r}")
        check_field = _CheckField(name)
        type.__setattr__(Mission, name, check_field)
        return check_field.__get__(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Mission is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Mission is immutable: cannot delete {name!r}")

    def _identity(self) -> tuple[Any, ...]:
        return (*(getattr(self, name) for name in _CORE), dict(self.settings))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mission):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        core = tuple(getattr(self, name) for name in _CORE)
        return hash((core, frozenset(self.settings.items())))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self._fields())
        return f"Mission({shown}, line={self.line!r})"

    def _fields(self) -> Iterator[tuple[str, Any]]:
        yield from ((name, getattr(self, name)) for name in _CORE)
        yield from self.settings.items()

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (dict(self._fields()), self.line)


class _CheckField:
    """A check field read as an attribute and not given by the suite: the field's default.

    Installed on ``Mission`` the first time each field is read (a lookup that
    falls through to ``__getattr__`` costs ten times a slot's). A given value
    is found in the mission's ``__dict__`` first, as for any descriptor without
    ``__set__``. A check taken out of the registry takes its field with it:
    reading it is an ``AttributeError`` again.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, mission: Mission | None, owner: type | None = None) -> Any:
        if mission is None:
            return self
        spec = field(self.name)
        if spec is None:
            raise AttributeError(f"a Mission has no field {self.name!r}")
        return spec.default


def _rebuild(fields: dict[str, Any], line: int | None) -> Mission:
    return Mission(**fields, line=line)


__all__ = ["CORE_FIELDS", "MISSION_FIELDS", "REQUIRED_FIELDS", "Mission"]
