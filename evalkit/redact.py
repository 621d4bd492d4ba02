"""The one redactor: every text evalkit writes down passes through here.

The stream's free-text fields, stderr, the audit log, approvals, the
recordings and the harness's capture all use this module, so a credential is
scrubbed the same way wherever it would have landed. Two kinds of secret are
found:

* the secrets it was handed: the values of this process's credential-named
  environment variables (read at call time, so a key set after import is
  still caught — the same names the runtime withholds from tool processes),
  and values a caller declares (``remember``: the ``--api-key`` value, the
  variables named by ``--secret``), with their JSON-escaped and URL-quoted
  spellings;
* credential shapes (``evalkit.redact_shapes``): provider keys, JWTs, PEM
  private keys, ``Bearer``/``Authorization:`` values, URL passwords,
  ``NAME_KEY=value`` assignments and ``password: value`` colon forms.

Only the secret itself becomes ``[REDACTED]``; names, quotes and everything
else stay verbatim, because recordings must otherwise be the run as it was.
Keys of JSON objects are scrubbed like values (``redact_obj``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from evalkit.errors import EvalkitError
from evalkit.redact_shapes import (
    MIN_SECRET_LEN,
    REDACTED,
    Pattern,
    ends_inside_block,
    pattern_for,
    shapes_in,
)

#: Which environment variables hold credentials, by name. The one rule: the runtime
#: withholds these from tool processes and the redactor scrubs their values.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)

#: Texts are remembered once scrubbed: a mission's model log repeats the whole
#: conversation at every call, so the same long texts (the prompt, earlier tool
#: results) come back again and again, and short ones (keys, tool names) always do.
_MEMO_MIN_LEN = 128
_MEMO_MAX_LEN = 1 << 20
_MEMO_MAX_CHARS = 16 << 20  # what the memo may hold before it starts over
#: How many short texts (object keys, tool names, ids) the memo of those holds.
_SHORT_MEMO_MAX = 1 << 13
#: Patterns compiled for the sets of shapes and values texts turned out to hold.
_PATTERNS_MAX = 256


def is_credential_name(name: str) -> bool:
    """Whether an environment variable of this name holds a credential."""
    return CREDENTIAL_NAME.search(name) is not None


def _usable(value: str) -> bool:
    # Shorter values would wreck ordinary text; a value inside the marker itself
    # would make redaction grow the text forever.
    return len(value) >= MIN_SECRET_LEN and value not in REDACTED


def _spellings(value: str) -> list[str]:
    """How a secret may be written down: as is, JSON-escaped (a PEM key's line breaks in a
    JSON line), URL-quoted (a password in a query string)."""
    out = [value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
           quote(value, safe=""), quote(value)]
    return [v for v in dict.fromkeys(out) if _usable(v)]


def declared_secrets(names: Iterable[str], environ: Mapping[str, str] | None = None
                     ) -> list[str]:
    """The values of the environment variables ``--secret NAME`` declares secret.

    A name that is not set is refused rather than skipped: it is most often a typo,
    and the variable meant would then be recorded in the clear. An empty value has
    nothing to hide; a value too short to tell from ordinary text is refused, since
    evalkit could not keep it out of the records.
    """
    env = os.environ if environ is None else environ
    values: list[str] = []
    for name in names:
        value = env.get(name)
        if value is None:
            raise EvalkitError(f"--secret {name}: no environment variable {name} is set; "
                               "--secret takes the name of a variable whose value is secret")
        if not value:
            continue
        if not _usable(value):
            raise EvalkitError(f"--secret {name}: its value is too short to find in text "
                               f"without wrecking it (evalkit redacts values of "
                               f"{MIN_SECRET_LEN} characters or more)")
        values.append(value)
    return values


def _raw_environ(environ: Mapping[str, str]) -> Mapping[Any, Any]:
    """What to compare to notice that the environment changed.

    ``os.environ`` keeps its raw bytes in ``_data``; comparing that dict is a
    C-level operation, unlike decoding every item, so the check per call is cheap.
    """
    raw = getattr(environ, "_data", None)
    return raw if isinstance(raw, dict) else environ


class Redactor:
    """Scrubs credentials from text; ``extra_values`` are secrets a caller knows.

    ``environ`` defaults to ``os.environ``, read at every call; the compiled
    pattern is cached per environment snapshot so repeated calls stay fast.
    """

    def __init__(self, extra_values: Iterable[str] = (),
                 environ: Mapping[str, str] | None = None) -> None:
        self._extra: tuple[str, ...] = ()
        self._environ = environ
        self._lock = threading.Lock()
        # (environment snapshot, the known values it was built with, scrubber), replaced as
        # one tuple so a thread never sees a pattern paired with other secrets.
        self._state: tuple[dict[Any, Any] | None, tuple[str, ...], _Scrubber] = (
            None, (), _Scrubber(()))
        self.add(extra_values)

    def add(self, values: Iterable[str]) -> None:
        """Secrets to scrub from now on, besides those already known."""
        with self._lock:
            fresh = [s for v in values if isinstance(v, str) for s in _spellings(v)]
            self._extra = tuple(dict.fromkeys((*self._extra, *fresh)))

    def _current(self) -> _Scrubber:
        environ = os.environ if self._environ is None else self._environ
        raw = _raw_environ(environ)
        extra = self._extra
        snapshot, built_with, scrubber = self._state
        if snapshot is None or built_with is not extra or raw != snapshot:
            secrets = [s for k, v in environ.items() if is_credential_name(k)
                       for s in _spellings(v)]
            scrubber = _Scrubber(tuple(dict.fromkeys((*extra, *secrets))))
            self._state = (dict(raw), extra, scrubber)
        return scrubber

    def redact(self, text: str) -> str:
        """The text with every credential replaced by ``[REDACTED]``."""
        return self._current().scrub(text)

    def redact_obj(self, obj: Any) -> Any:
        """A deep copy of a JSON-like object with every string scrubbed, keys included.

        A key that scrubs to the text of another key of the same object is not allowed
        to overwrite it: it gets ``#2`` (then ``#3``…) appended, handed out in the order
        of the original keys, so the same object always gives the same copy whatever
        its key order, and no value is lost.
        """
        return self._current().walk(obj)

    def spans_lines(self) -> bool:
        """Whether a secret value it knows holds a line break: text scrubbed a line at a
        time could then split it, and must be scrubbed whole."""
        return any("\n" in value for value in self._current().literals)

    def must_wait(self, text: str) -> bool:
        """Whether ``text``, the lines written so far, may not be scrubbed on its own yet:
        a known secret could span lines, or the text ends inside a private-key block whose
        next lines are still part of the key."""
        return self.spans_lines() or ends_inside_block(text)


class _Scrubber:
    """The secrets of one snapshot, the patterns built for them, and memos of what it did."""

    def __init__(self, literals: tuple[str, ...]) -> None:
        self.literals = literals
        self._patterns: dict[tuple[Any, ...], Pattern] = {}
        self._memo: dict[str, str] = {}
        self._memo_chars = 0
        self._short: dict[str, str] = {}

    def walk(self, obj: Any) -> Any:
        kind = type(obj)  # the JSON types first, by identity: isinstance on an ABC is slow
        if kind is str:
            return self.scrub(obj)
        if kind is dict:
            return self._mapping(obj)
        if kind is list:
            return [self.walk(v) for v in obj]
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, Mapping):
            return self._mapping(obj)
        if isinstance(obj, list):
            return [self.walk(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.walk(v) for v in obj)
        return obj

    def _mapping(self, obj: Mapping[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        renamed: list[tuple[str, str, Any]] = []  # (scrubbed key, key, value)
        for key, value in obj.items():
            clean = self.scrub(key) if isinstance(key, str) else key
            if clean == key:
                out[key] = self.walk(value)
            else:
                out[key] = None  # holds the key's place; renamed below
                renamed.append((clean, key, self.walk(value)))
        if not renamed:
            return out
        originals = {key for _, key, _ in renamed}
        taken = {k for k in out if k not in originals}
        names: dict[str, tuple[str, Any]] = {}
        for clean, key, value in sorted(renamed, key=lambda r: r[1]):
            name, n = clean, 1
            while name in taken:
                n += 1
                name = f"{clean}#{n}"
            taken.add(name)
            names[key] = (name, value)
        return dict(names[k] if k in originals else (k, v) for k, v in out.items())

    def scrub(self, text: str) -> str:
        size = len(text)
        if size < _MEMO_MIN_LEN:  # keys, tool names, ids: the same few, over and over
            done = self._short.get(text)
            if done is None:
                if len(self._short) >= _SHORT_MEMO_MAX:
                    self._short = {}
                done = self._short[text] = self._scrub(text)
            return done
        if size > _MEMO_MAX_LEN:
            return self._scrub(text)
        done = self._memo.get(text)
        if done is None:
            done = self._scrub(text)
            if self._memo_chars + size > _MEMO_MAX_CHARS:
                self._memo, self._memo_chars = {}, 0
            self._memo[text] = done
            self._memo_chars += size
        return done

    def _scrub(self, text: str) -> str:
        literals = tuple(v for v in self.literals if v in text)
        shapes = shapes_in(text)
        if not shapes and not literals:
            return text
        # The known values first, each replaced whole: a shape that keeps a prefix (a URL's
        # user) must not keep part of a value it overlaps.
        passes = [self._pattern((), literals)] if literals else []
        if shapes:
            passes.append(self._pattern(shapes, ()))
        # Repeat until nothing changes, so redact(redact(x)) == redact(x) always; in practice
        # the second round finds nothing. Replacing never makes a marker that was not there
        # ("[REDACTED]" holds none), so the shapes found at first are all there can be.
        for _ in range(4):
            scrubbed = text
            for pattern in passes:
                scrubbed = pattern.scrub(scrubbed)
            if scrubbed == text:
                break
            text = scrubbed
        return text

    def _pattern(self, shapes: tuple[int, ...], literals: tuple[str, ...]) -> Pattern:
        key = (shapes, literals)
        pattern = self._patterns.get(key)
        if pattern is None:
            if len(self._patterns) >= _PATTERNS_MAX:
                self._patterns = {}
            pattern = self._patterns[key] = pattern_for(shapes, literals)
        return pattern


_DEFAULT = Redactor()


def remember(values: Iterable[str | None]) -> None:
    """Secrets this process was handed (an ``--api-key``, ``--secret`` values): everything
    it writes down from now on is scrubbed of them. Values too short to find in text
    without wrecking it (a dummy key such as ``x``) are ignored."""
    _DEFAULT.add(v for v in values if v)


def redact(text: str) -> str:
    """``text`` with credentials (known shapes, known and credential env values) replaced."""
    return _DEFAULT.redact(text)


def redact_obj(obj: Any) -> Any:
    """A deep copy of ``obj`` with every string inside scrubbed, object keys included."""
    return _DEFAULT.redact_obj(obj)


__all__ = ["CREDENTIAL_NAME", "MIN_SECRET_LEN", "REDACTED", "Redactor", "declared_secrets",
           "is_credential_name", "redact", "redact_obj", "remember"]
