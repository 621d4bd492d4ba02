"""A suite file's text as data, with the YAML node tree that knows each value's line;
``SuiteError`` when the file is not a suite's text at all.

YAML is read by libyaml's parser where PyYAML was built with it, and by
PyYAML's own otherwise; either way the node tree is composed by PyYAML's
Python composer. libyaml's own composer recurses in C and takes the process
down (a segfault, not an exception) somewhere past 20,000 levels of nesting;
the Python one stops at Python's recursion limit with a ``RecursionError``,
which is refused as a suite that nests too deeply (as is the same case when
libyaml's parser stops it first: libyaml 0.2.6 has a nesting limit of its own). No real suite nests past
a few levels, so that limit is the only one that shows. JSON is read as JSON
(a repeated key and a line number still come from the YAML tree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer

from evalkit.errors import EvalkitError
from evalkit.eval import strict_json

if TYPE_CHECKING:
    from evalkit.eval.suite import Loaded

#: What a directory given as a suite is searched for, first found wins.
SUITE_FILES: tuple[str, ...] = ("missions.yaml", "missions.yml", "missions.json", "suite.yaml")

#: Above this many characters a JSON suite is built without its node tree, which
#: costs more than the rest of loading: its missions then carry no line, and the
#: tree is composed only to name the lines of the problems it has.
_FAST_PATH_FROM = 256 * 1024

#: The exit code of a file that cannot be read as a suite at all (binary, not UTF-8,
#: not YAML or JSON, a document that is no mapping): unreadable input, as a missing
#: path is. A suite that reads but is wrong (an unknown field, a bad value) is 1.
UNREADABLE = 2


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


def suite_file(path: Path) -> Path:
    """The file a suite path names: itself, or the first of ``SUITE_FILES`` in a folder."""
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


def read_bytes(path: Path) -> bytes:
    """The suite file's bytes, when it is text at all."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"cannot read suite {path}: {exc.strerror or exc}", exit_code=2) from None
    if b"\0" in raw:
        raise SuiteError(f"suite {path} is a binary file, not YAML or JSON text",
                         exit_code=UNREADABLE)
    return raw


def decoded(path: Path, raw: bytes) -> str:
    """A suite file's text from its bytes (``read_bytes``)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"suite {path} is not UTF-8 text "
                        f"(byte {raw[exc.start]:#04x} at offset {exc.start})", exit_code=UNREADABLE) from None


@dataclass(frozen=True)
class Tree:
    """The YAML node tree (it knows the lines) and the keys a mapping repeats.

    Repeats are found before construction: constructing a merge key (``<<``)
    splices the merged pairs into the node, which would look like repeats.
    """

    root: yaml.Node | None = None
    repeated: frozenset[int] = frozenset()  # id() of each repeating key node


def large_json(raw: bytes) -> Any | None:
    """The document of a large JSON suite (``read_bytes``) in strict UTF-8 without repeated
    keys, to be built without its tree; None otherwise (a small one, YAML, a byte-order
    mark, anything odd: ``parse`` its text)."""
    if len(raw) <= _FAST_PATH_FROM or not raw.lstrip().startswith(b"{"):
        return None
    return strict_json.loads(raw)


def parse(path: Path, text: str) -> tuple[Any, Tree]:
    """The data, plus the node tree when the parser can give one."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"suite {path} is not valid JSON: {exc.msg} "
                            f"(line {exc.lineno}, column {exc.colno})", exit_code=UNREADABLE) from None
        except RecursionError:
            raise SuiteError(f"suite {path} is not valid JSON: {_TOO_DEEP}",
                             exit_code=UNREADABLE) from None
        except ValueError as exc:
            raise SuiteError(f"suite {path} is not valid JSON: {_reason(exc)}",
                             exit_code=UNREADABLE) from None
        try:  # JSON is (nearly) YAML: borrow its node tree for line numbers, best effort
            return data, compose(text)[1]
        except Exception:
            return data, Tree()
    try:
        return compose(text)
    except RecursionError:
        raise SuiteError(f"suite {path} is not valid YAML: {_TOO_DEEP}",
                         exit_code=UNREADABLE) from None
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml 0.2.6's own limit (PyYAML 6.0.4)
            raise SuiteError(f"suite {path} is not valid YAML: {_TOO_DEEP}",
                             exit_code=UNREADABLE) from None
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SuiteError(f"suite {path} is not valid YAML: {exc.problem or exc.context}{where}",
                         exit_code=UNREADABLE) from None
    except Exception as exc:  # anything the third-party parser throws is about the file
        raise SuiteError(f"suite {path} is not valid YAML: {_reason(exc)}",
                         exit_code=UNREADABLE) from None


#: Why a suite nested past a parser's limit is refused, whichever parser's limit it was.
_TOO_DEEP = "it nests too deeply"


def _reason(exc: Exception) -> str:
    """A parser's complaint as a reason about the file: Python's limit on digits in an
    integer comes with advice for programmers (sys.set_int_max_str_digits), not for a suite."""
    text = str(exc)
    if "integer string conversion" in text:
        return "it holds an integer of more than 4,300 digits, more than any field takes"
    return text.splitlines()[0] if text else type(exc).__name__


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader), Composer):  # type: ignore[misc]
    """The safe loader (libyaml's parser when there is one), composing in Python."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        Composer.__init__(self)

    get_single_node = Composer.get_single_node


def compose(text: str) -> tuple[Any, Tree]:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Tree()
        tree = Tree(node, _repeated_keys(node))
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


__all__ = ["SUITE_FILES", "SuiteError", "Tree", "compose", "counted", "decoded", "large_json",
           "parse", "read_bytes", "suite_file"]
