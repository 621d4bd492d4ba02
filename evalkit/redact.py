"""The one redactor: every text evalkit writes down passes through here.

The stream's free-text fields, stderr, the audit log, approvals and the
recordings all use this module, so a credential is scrubbed the same way
wherever it would have landed. Two kinds of secret are found:

* known credential shapes (OpenAI/Anthropic ``sk-``, GitHub, AWS, Slack keys,
  ``Bearer`` tokens, ``Authorization:`` values, ``NAME_KEY=value`` style
  assignments), and
* the literal values of this process's credential-named environment
  variables, read at call time so a key set after import is still caught.

Only the secret itself becomes ``[REDACTED]``; names, quotes and everything
else stay verbatim, because recordings must otherwise be the run as it was.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

#: Environment variables whose values are secrets, by name.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)

#: Shorter values are ignored: redacting "abc" everywhere would wreck the text.
MIN_SECRET_LEN = 6

#: Texts at least this long are remembered once scrubbed: a mission's model log
#: repeats the whole conversation at every call, so the same long texts (the
#: prompt, earlier tool results) come back again and again.
_MEMO_MIN_LEN = 128
_MEMO_MAX_LEN = 1 << 20
_MEMO_MAX_CHARS = 16 << 20  # what the memo may hold before it starts over

# How the pattern stays fast: every top-level alternative starts with a plain
# literal character, so the regex engine can skip ahead to candidate characters
# instead of trying each branch at every position. The "no word character
# before" checks therefore come after that first character, as lookbehinds
# covering it: ``s(?<![A-Za-z0-9_-]s)k-`` is "sk-" not preceded by a word char.


def _starting(literal: str, before: str, rest: str) -> str:
    """``literal`` + ``rest``, where the character before ``literal`` is not in ``before``."""
    first = re.escape(literal[0])
    return first + f"(?<!{before}{first})" + re.escape(literal[1:]) + rest


_WORD = "[A-Za-z0-9_]"
# A secret after a kept prefix: quoted (quotes kept) or a bare run of characters
# (which may start with an unclosed quote).
_QUOTED = r"\"[^\"\r\n]+\"|'[^'\r\n]+'"

# Shapes replaced whole.
_WHOLE = (
    _starting("sk-", "[A-Za-z0-9_-]", r"[A-Za-z0-9_-]{16,}"),            # OpenAI, Anthropic
    _starting("g", _WORD, r"(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})"),
    _starting("A", "[A-Za-z0-9]", r"(?:KIA|SIA)[0-9A-Z]{16}(?![0-9A-Z])"),  # AWS key ids
    _starting("xox", _WORD, r"[abposr]-[A-Za-z0-9-]{10,}"),              # Slack
)

# Shapes whose prefix is kept; the secret is the one capture group.
_BEARER_TOKEN = r"[ \t]+([A-Za-z0-9._~+/=_-]{8,})"
_AUTH_VALUE = r"[\"']?[ \t]*:[ \t]*(" + _QUOTED + r"|[\"']?[^\s\"'][^\r\n\"']*)"
_KEPT = (
    *(_starting(word, _WORD, _BEARER_TOKEN) for word in ("Bearer", "bearer", "BEARER")),
    *(_starting(word, _WORD, _AUTH_VALUE)
      for word in ("Authorization", "authorization", "AUTHORIZATION")),
)

# NAME_KEY=value and friends, anchored on the "=": the name is checked behind it.
_NAMES = ("_KEY", "_CREDENTIAL", "_CREDENTIALS", *(
    f"(?<![A-Za-z0-9]){bare}" for bare in ("APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")))
_ASSIGN = ("=(?i:" + "|".join(f"(?<={name}{gap}=)" for gap in ("", "[ \t]") for name in _NAMES)
           + r")(?!=)[ \t]*(" + _QUOTED + r"|[\"']?[^\s\"'&]+)")

# Cheap substring checks: if none occurs, no shape can match and the regex is skipped.
_MARKERS = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "ASIA",
            "xox", "earer", "EARER", "uthorization", "UTHORIZATION", "=")


def _compile(values: Iterable[str]) -> re.Pattern[str]:
    """One alternation: credential shapes, then the literal secret values, longest first."""
    literals = sorted(set(values), key=len, reverse=True)
    return re.compile("|".join((*_KEPT, _ASSIGN, *_WHOLE, *map(re.escape, literals))))


def _replace(match: re.Match[str]) -> str:
    """Keep a kept-prefix branch's prefix (and quotes around the value); replace the secret."""
    group = match.lastindex
    if group is None:
        return REDACTED
    value = match.group(group)
    prefix = match.string[match.start():match.start(group)]
    if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
        return prefix + value[0] + REDACTED + value[0]
    return prefix + REDACTED


def _usable(value: str) -> bool:
    # A value inside the marker itself would make redaction grow the text forever.
    return len(value) >= MIN_SECRET_LEN and value not in REDACTED


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
        self._extra = tuple(v for v in extra_values if isinstance(v, str) and _usable(v))
        self._environ = environ
        # (environment snapshot, scrubber), replaced as one tuple so a thread
        # never sees a pattern paired with another snapshot's literals.
        self._state: tuple[dict[Any, Any] | None, _Scrubber] = (None, _Scrubber(self._extra))

    def _current(self) -> _Scrubber:
        environ = os.environ if self._environ is None else self._environ
        raw = _raw_environ(environ)
        snapshot, scrubber = self._state
        if snapshot is None or raw != snapshot:
            secrets = [v for k, v in environ.items() if CREDENTIAL_NAME.search(k) and _usable(v)]
            scrubber = _Scrubber(tuple(dict.fromkeys((*self._extra, *secrets))))
            self._state = (dict(raw), scrubber)
        return scrubber

    def redact(self, text: str) -> str:
        """The text with every credential replaced by ``[REDACTED]``."""
        return self._current().scrub(text)

    def redact_obj(self, obj: Any) -> Any:
        """A deep copy of a JSON-like object with every string scrubbed; keys kept."""
        return self._current().walk(obj)

    def spans_lines(self) -> bool:
        """Whether a secret value it knows holds a line break: text scrubbed a line at a
        time could then split it, and must be scrubbed whole."""
        return any("\n" in value for value in self._current().literals)


class _Scrubber:
    """The pattern for one set of literal secrets, and a memo of long texts it scrubbed."""

    def __init__(self, literals: tuple[str, ...]) -> None:
        self.literals = literals
        self.pattern = _compile(literals)
        self._memo: dict[str, str] = {}
        self._memo_chars = 0

    def walk(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, Mapping):
            return {k: self.walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.walk(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.walk(v) for v in obj)
        return obj

    def scrub(self, text: str) -> str:
        if not _MEMO_MIN_LEN <= len(text) <= _MEMO_MAX_LEN:
            return self._scrub(text)
        done = self._memo.get(text)
        if done is None:
            done = self._scrub(text)
            if self._memo_chars + len(text) > _MEMO_MAX_CHARS:
                self._memo, self._memo_chars = {}, 0
            self._memo[text] = done
            self._memo_chars += len(text)
        return done

    def _scrub(self, text: str) -> str:
        pattern, literals = self.pattern, self.literals
        if not any(m in text for m in _MARKERS) and not any(v in text for v in literals):
            return text
        # Repeat until nothing changes, so redact(redact(x)) == redact(x) always;
        # in practice the second pass finds nothing.
        for _ in range(4):
            scrubbed = pattern.sub(_replace, text)
            if scrubbed == text:
                break
            text = scrubbed
        return text


_DEFAULT = Redactor()


def redact(text: str) -> str:
    """``text`` with credentials (known shapes, credential env values) replaced."""
    return _DEFAULT.redact(text)


def redact_obj(obj: Any) -> Any:
    """A deep copy of ``obj`` with every string inside scrubbed; dict keys kept."""
    return _DEFAULT.redact_obj(obj)
