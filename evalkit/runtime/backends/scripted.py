"""The scripted backend: a model written down as data.

A script is a YAML or JSON list served in order, one item per model call. A
string item is the reply's text. A mapping item may carry ``content``,
``tool_calls`` (native protocol: a list of ``{name, arguments, id?, ...}``,
any further keys being provider extras the loop must echo back) and
``usage``. This is how good and bad agents are written for tests and the
shipped corpus: the loop, the tool plane and the recording are all real, only
the model is a list.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.runtime.backends import Reply, ScriptExhausted

_ITEM_KEYS = frozenset({"content", "tool_calls", "usage"})


class ScriptedBackend:
    """Serves a fixed list of replies, then refuses with ``ScriptExhausted``."""

    provider = "scripted"

    def __init__(self, replies: Sequence[Any], *, model: str = "script") -> None:
        self.model = model
        self._replies = [_reply_of(item, n) for n, item in enumerate(replies, start=1)]
        self._served = 0
        self._lock = threading.Lock()  # parallel swarm steps ask from several threads

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedBackend:
        """Load a YAML/JSON script; a malformed one is an EvalkitError naming the item."""
        target = Path(path)
        try:
            text = target.read_text(encoding="utf-8")
        except OSError as exc:
            raise EvalkitError(f"cannot read script {target}: {exc.strerror or exc}") from None
        try:
            if target.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                import yaml  # lazily: only a scripted run pays for it

                data = yaml.safe_load(text)
        except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's parents
            raise EvalkitError(f"script {target} does not parse: {exc}") from None
        except Exception as exc:  # yaml.YAMLError is not a ValueError
            raise EvalkitError(f"script {target} does not parse: {exc}") from None
        if not isinstance(data, list):
            raise EvalkitError(f"script {target} must be a list of replies")
        return cls(data, model=target.name)

    @property
    def served(self) -> int:
        return self._served

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        with self._lock:
            if self._served >= len(self._replies):
                raise ScriptExhausted(self._served)
            reply = copy.deepcopy(self._replies[self._served])
            self._served += 1
        return reply


def _reply_of(item: Any, number: int) -> Reply:
    if isinstance(item, str):
        return Reply(content=item)
    if not isinstance(item, dict):
        raise EvalkitError(f"script item {number} must be a string or a mapping")
    unknown = sorted(set(item) - _ITEM_KEYS)
    if unknown:
        raise EvalkitError(
            f"script item {number} has unknown key(s) {', '.join(unknown)}: "
            "use content, tool_calls and usage")
    content = item.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    calls = item.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise EvalkitError(f"script item {number}: tool_calls must be a list of {{name, arguments}}")
    usage = item.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise EvalkitError(f"script item {number}: usage must be a mapping")
    tool_calls = [{**c, "arguments": c.get("arguments", {})} for c in calls]
    return Reply(content=content, tool_calls=tool_calls, usage=usage)
