"""What a credential looks like, for ``evalkit.redact`` (its one user).

Each shape comes with a cheap test of whether a text could hold it at all
(substring searches, which run at memory speed). Only the shapes a text may
hold go into the one alternation that scans it: most texts hold none and are
never scanned, and the rest are scanned by a pattern of a few branches, not
all of them. No branch can backtrack more than a bounded distance, so a
hostile text costs time in proportion to its length.

How each pattern stays fast: every top-level alternative starts with a plain
literal character, so the regex engine skips ahead to candidate characters
instead of trying each branch at every position. The "no word character
before" checks therefore come after that first character, as lookbehinds
covering it: ``sk-(?<![A-Za-z0-9_-]sk-)`` is "sk-" not preceded by a word char.
A JSON escape (``\n``, ``\t``, ``\r``) before a word is a boundary too, though
it ends in a letter: a model's reply is often JSON text inside a string.

A shape either replaces its whole match, or keeps a prefix (a header name, a
``password:``, a URL's ``scheme://user:``) and replaces its one capture group,
keeping the quotes around it. Nothing a shape keeps after its value is part of
the match (lookaheads), so the replacement is always ``prefix + [REDACTED]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

REDACTED = "[REDACTED]"

#: Shorter values are ignored: redacting "abc" everywhere would wreck the text.
MIN_SECRET_LEN = 6


def _after_boundary(before: str, covered: str = "") -> str:
    """Asserts that what precedes ``covered`` (just matched) is not in ``before``, or is a
    JSON escape of a line break or tab."""
    return f"(?:(?<!{before}{covered})|(?<=\\\\[nrt]{covered}))"


def _starting(literal: str, before: str, rest: str) -> str:
    """``literal`` + ``rest``, where the character before ``literal`` is not in ``before``.

    The check follows the whole literal, so most candidates fail on its second
    character before any lookbehind is tried."""
    escaped = re.escape(literal)
    return escaped + _after_boundary(before, escaped) + rest


_WORD = "[A-Za-z0-9_]"
# A secret after a kept prefix: quoted (quotes kept) or a bare run of characters
# (which may start with an unclosed quote).
_QUOTED = r"\"[^\"\r\n]+\"|'[^'\r\n]+'"
_NOT_AGAIN = r"(?!\[REDACTED\])"  # a value already withheld is not withheld twice

# -- shapes replaced whole ------------------------------------------------------------------

_OPENAI = _starting("sk-", "[A-Za-z0-9_-]", r"[A-Za-z0-9_-]{16,}")            # OpenAI, Anthropic
_GITHUB = (_starting("gh", _WORD, r"[pousr]_[A-Za-z0-9]{20,}") + "|"
           + _starting("github_pat_", _WORD, r"[A-Za-z0-9_]{20,}"))
_AWS = "|".join(_starting(prefix, "[A-Za-z0-9]", r"[0-9A-Z]{16}(?![0-9A-Z])")  # AWS key ids
                for prefix in ("AKIA", "ASIA"))
_SLACK = _starting("xox", _WORD, r"[abposr]-[A-Za-z0-9-]{10,}")
# A JSON Web Token: base64url header and payload (both JSON objects, so both "eyJ"),
# then a signature, which an unsigned token leaves empty.
_B64URL = "[A-Za-z0-9_-]"
_JWT = f"eyJ{_after_boundary(_B64URL, 'eyJ')}{_B64URL}{{8,}}\\.eyJ{_B64URL}{{8,}}\\.{_B64URL}*"

# -- shapes whose prefix is kept; the secret is the one capture group -----------------------

_BEARER_TOKEN = r"[ \t]+([A-Za-z0-9._~+/=_-]{8,})"
_AUTH_VALUE = (r"[\"']?[ \t]*:[ \t]*(" + _QUOTED
               + r"|[\"']?[^\s\"'\\](?:[^\r\n\"'\\]|\\(?![\\nrt\"']))*)")  # to the line's end
_BEARER = "|".join(_starting(w, _WORD, _BEARER_TOKEN) for w in ("Bearer", "bearer", "BEARER"))
_AUTHORIZATION = "|".join(_starting(w, _WORD, _AUTH_VALUE)
                          for w in ("Authorization", "authorization", "AUTHORIZATION"))

def _ending(names: tuple[str, ...], gaps: tuple[str, ...], mark: str) -> str:
    """A quick first check that a name of ``names`` may end just before ``mark`` (after one
    of ``gaps``): their last three letters. Most candidates fail it, and never reach the
    lookbehind per name and gap that follows it."""
    tails = "|".join(sorted({name[-3:] for name in names}))
    return "(?i:" + "|".join(f"(?<=(?:{tails}){gap}{mark})" for gap in gaps) + ")"


# NAME_KEY=value and friends, anchored on the "=": the name is checked behind it.
_BARE_NAMES = ("APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
_NAMES = ("_KEY", "_CREDENTIAL", "_CREDENTIALS",
          *(_after_boundary("[A-Za-z0-9]") + bare for bare in _BARE_NAMES))
_ASSIGN = ("=" + _ending(("KEY", "CREDENTIAL", "CREDENTIALS", *_BARE_NAMES), ("", "[ \t]"), "=")
           + "(?i:" + "|".join(f"(?<={name}{gap}=)" for gap in ("", "[ \t]") for name in _NAMES)
           + r")(?!=)[ \t]*(?:(" + _QUOTED + r")|(?:\\*[\"'])?" + _NOT_AGAIN
           + r"((?:[^\s\"'\\&]|\\(?![\\\"'nrt]))+))")

# password: x, "token": "x", X-Api-Key: x … anchored on the ":", the name checked behind
# it. A bare name (YAML, a header, prose) needs a space after its colon, so that code
# such as ``token::Kind`` or ``s[token:end]`` is left alone; a quoted one (JSON) need not.
_COLON_NAMES = ("password", "passwd", "token", "secret", "api-key", "api_key", "apikey")
_NAME_START = _after_boundary("[A-Za-z0-9]")
_QUOTES = tuple(re.escape(q + gap) for q in ('"', "'", '\\"', '\\\\\\"') for gap in ("", " "))
_BARE_NAME = _ending(_COLON_NAMES, ("",), ":") + "(?i:" + "|".join(
    f"(?<={_NAME_START}{name}:)" for name in _COLON_NAMES) + ")"
_QUOTED_NAME = _ending(_COLON_NAMES, _QUOTES, ":") + "(?i:" + "|".join(
    f"(?<={_NAME_START}{name}{quote}:)" for name in _COLON_NAMES for quote in _QUOTES) + ")"
# What follows such a colon and is no secret: a type annotation (``password: str``; in
# ``password: str = "x"`` the secret is the quoted value after the "="), the empty values
# of JSON, YAML and Python, and a ``${VARIABLE}`` reference.
_TYPE = r"(?:str|bytes|string|String|int|bool|Any|Optional|Union|SecretStr|SecretBytes)"
_EMPTY = r"(?:None|null|nil|true|false|True|False|undefined|\$\{[A-Za-z_][A-Za-z0-9_.]*\})"
_ANNOTATION = _TYPE + r"(?![A-Za-z0-9_])[^\r\n=\"']{0,40}?=[ \t]*"  # bounded: no backtracking
_NOT_A_VALUE = r"(?!(?:" + _TYPE + "|" + _EMPTY + r")(?![A-Za-z0-9_]))"
# The value: quoted (with a letter or digit in it: ``token: '<'`` in a parser's error is
# no secret; JSON's escapes inside), or a bare run up to a space, a quote, a separator, a
# closing bracket or a JSON-escaped quote, line break or tab.
_COLON_QUOTED = (r"\"(?=[^\"\r\n]*[A-Za-z0-9])(?:[^\"\\\r\n]|\\[^\r\n])+\""
                 r"|'(?=[^'\r\n]*[A-Za-z0-9])[^'\r\n]+'")
_COLON_BARE = (r"(?:\\*[\"'])?" + _NOT_AGAIN + _NOT_A_VALUE
               + r"(?=[^\s\"'\\,;}\]]*[A-Za-z0-9])((?:[^\s\"'\\,;}\]]|\\(?![\\\"'nrt]))+)")
_COLON_VALUE = "(?:(?:" + _ANNOTATION + ")?(" + _COLON_QUOTED + ")|" + _COLON_BARE + ")"
_COLON = (":(?!:)" + _BARE_NAME + r"[ \t]+" + _COLON_VALUE
          + "|:" + _QUOTED_NAME + r"[ \t]*" + _COLON_VALUE)

# scheme://user:password@host — the password; the user and the host are kept. The
# password runs to the last "@" before the path, so one holding an "@" goes whole.
_URL_PASSWORD = (r":(?<=[A-Za-z0-9+.-]:)//[^\s/?#@:\"'<>]*:" + _NOT_AGAIN
                 + r"(?=[^\s/?#\"'<>]*[A-Za-z0-9%])([^\s/?#\"'<>]+)(?=@)")

# A PEM private key: the BEGIN line is kept, the body (base64, and the header lines of
# an encrypted key) replaced up to the END line, which is kept. Line breaks may be
# real or JSON-escaped. A key cut short (a truncated output) loses all of its body.
_PEM_CHAR = r"(?:[A-Za-z0-9+/=:,. \t]|-(?!----))"
_PEM_BREAK = r"(?:\r?\n|(?:\\+r)?\\+n)"  # real, or escaped once or more
_PEM_BEGIN = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM = (_PEM_BEGIN + r"[ \t]*" + _PEM_BREAK
        + "((?:" + _PEM_CHAR + "|(?:" + _PEM_BREAK + ")+(?=" + _PEM_CHAR + "))+)")
_PEM_BLOCK = re.compile(_PEM)
_PEM_START = re.compile(_PEM_BEGIN)


#: Whether a text may hold a shape, given the text and, when it is ASCII, its lower case.
Possible = Callable[[str, "str | None"], bool]


def _holding(*markers: str) -> Possible:
    return lambda text, low: any(m in text for m in markers)


def _folded(*words: str) -> Possible:
    """Any of ``words`` (lower case) in any case; where the text is not ASCII (its lower
    case would cost more than the searches), the lower, Capitalised and UPPER spellings."""
    spellings = tuple(dict.fromkeys(v for w in words for v in (w, w.capitalize(), w.upper())))
    return lambda text, low: (any(w in low for w in words) if low is not None
                              else any(v in text for v in spellings))


# A single character is found at memory speed, a pattern with a literal prefix nearly
# so: both go first, before a search for a longer marker.
_GITHUB_HINT = re.compile(r"g(?:h[pousr]|ithub_pat)_")
_AWS_HINT = re.compile(r"A[KS]IA")
_COLON_WORDS = _folded("assw", "oken", "ecret", "key")


@dataclass(frozen=True)
class _Shape:
    pattern: str
    possible: Possible


#: Alternation order decides which shape wins where two match at the same place:
#: the kept-prefix shapes first (their prefix is the more telling), as before.
SHAPES: tuple[_Shape, ...] = (
    _Shape(_BEARER, _folded("earer")),
    _Shape(_AUTHORIZATION, _folded("uthorization")),
    _Shape(_ASSIGN, _holding("=")),
    _Shape(_COLON, lambda text, low: ":" in text and _COLON_WORDS(text, low)),
    _Shape(_URL_PASSWORD, lambda text, low: "@" in text and "://" in text),
    _Shape(_PEM, _holding("PRIVATE KEY")),
    _Shape(_OPENAI, _holding("sk-")),
    _Shape(_GITHUB, lambda text, low: "_" in text and _GITHUB_HINT.search(text) is not None),
    _Shape(_AWS, lambda text, low: _AWS_HINT.search(text) is not None),
    _Shape(_SLACK, _holding("xox")),
    _Shape(_JWT, lambda text, low: "J" in text and "eyJ" in text),
)
_CHECKS = tuple(enumerate(shape.possible for shape in SHAPES))


def shapes_in(text: str) -> tuple[int, ...]:
    """The indices (in ``SHAPES``) of the shapes ``text`` may hold."""
    if len(text) < MIN_SECRET_LEN:  # shorter than the least any shape matches
        return ()
    low = text.lower() if text.isascii() else None
    return tuple(i for i, possible in _CHECKS if possible(text, low))


class Pattern:
    """One alternation over some shapes and some literal secrets, and how it replaces."""

    def __init__(self, source: str) -> None:
        self._regex = re.compile(source)
        self._sub: Callable[..., str] = self._regex.sub

    def scrub(self, text: str) -> str:
        return self._sub(_replace, text)


def pattern_for(shapes: tuple[int, ...], literals: tuple[str, ...]) -> Pattern:
    """The alternation for these shapes, then these literal secrets, longest first."""
    values = sorted(set(literals), key=len, reverse=True)
    return Pattern("|".join((*(SHAPES[i].pattern for i in shapes), *map(re.escape, values))))


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


def ends_inside_block(text: str) -> bool:
    """Whether ``text`` ends inside a private-key block, so that lines still to come may
    be more of the key (a line-at-a-time writer must hold it until the block is over)."""
    if "PRIVATE KEY" not in text:
        return False
    starts = list(_PEM_START.finditer(text))
    if not starts:
        return False
    last = starts[-1].start()
    block = _PEM_BLOCK.match(text, last)
    end = block.end() if block is not None else starts[-1].end()
    return _PEM_GAP.fullmatch(text, end) is not None


#: What may stand between a key's BEGIN line (or its body so far) and more of the key:
#: blanks and line breaks, real or escaped.
_PEM_GAP = re.compile(r"(?:[ \t]|" + _PEM_BREAK + ")*")


__all__ = ["MIN_SECRET_LEN", "REDACTED", "SHAPES", "Pattern", "ends_inside_block",
           "pattern_for", "shapes_in"]
