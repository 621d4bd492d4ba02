"""The two kinds of judge: a model behind an OpenAI-compatible endpoint, and a scripted
judge that answers from a file of canned judgments (tests, offline demos, the corpus).

Both answer a judge's request with the text of a reply, so what a scripted judge
says is parsed and recorded exactly as a model's would be.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from evalkit.errors import EvalkitError
from evalkit.eval.judging import FAIL, PASS, Spec
from evalkit.patterns import compile_pattern


@dataclass(frozen=True)
class Said:
    """One reply of a judge: its text, the usage it reported, and the request's extra facts."""

    content: str | None
    usage: dict[str, Any] | None = None
    request: dict[str, Any] | None = None


class Judge(Protocol):
    def ask(self, messages: list[dict[str, str]], *, mission: str, answer: str) -> Said | None:
        """The judge's reply, or None when it has nothing to say of this answer."""


class Scripted:
    """Canned judgments: the first entry whose ``mission`` (when given) is the mission's key
    and whose ``answer_matches`` pattern (RE2, when given) is found in the answer.

    The file is YAML: ``judgments: [{mission, answer_matches, grade, score, reasons}]``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise EvalkitError(f"cannot read the scripted judge {path}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
        entries = data.get("judgments") if isinstance(data, dict) else None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise EvalkitError(f"the scripted judge {path} must hold 'judgments:', a list of "
                               "mappings {mission, answer_matches, grade, score, reasons}")
        for i, entry in enumerate(entries, 1):
            if entry.get("grade") not in (PASS, FAIL):
                raise EvalkitError(f"the scripted judge {path} judgment {i} has grade "
                                   f"{entry.get('grade')!r}; use pass or fail")
            pattern = entry.get("answer_matches")
            if pattern is not None:
                try:
                    compile_pattern(str(pattern))
                except ValueError as exc:
                    raise EvalkitError(f"the scripted judge {path} judgment {i} pattern "
                                       f"{pattern!r} cannot be used: {exc}") from None
        self.entries = entries

    def ask(self, messages: list[dict[str, str]], *, mission: str, answer: str) -> Said | None:
        for entry in self.entries:
            if entry.get("mission") not in (None, mission):
                continue
            pattern = entry.get("answer_matches")
            if pattern is not None and compile_pattern(str(pattern)).search(answer) is None:
                continue
            reply = {"grade": entry["grade"], "score": entry.get("score"),
                     "reasons": list(entry.get("reasons") or [])}
            return Said(json.dumps(reply, ensure_ascii=False),
                        request={"scripted": self.path.name})
        return None


class Endpoint:
    """A model behind an OpenAI-compatible endpoint, through the runtime's own backend (the
    same wire, timeouts and fault sentences as a mission's model). The key is read from
    the environment and goes nowhere but the request's header."""

    def __init__(self, spec: Spec, base_url: str | None) -> None:
        from evalkit import redact
        from evalkit.runtime.backends.openai_compat import OpenAIBackend, public_url

        if not base_url:
            raise EvalkitError(f"the judge {spec.judge_id} has no endpoint; give --endpoint URL "
                               "or base_url in the suite's judge settings")
        key = os.environ.get(spec.key_env)
        redact.remember([key])
        try:
            self.backend = OpenAIBackend(model=spec.model, base_url=base_url,
                                         api_key=key or "unused", stream=False)
        except ImportError:
            raise EvalkitError("a model judge needs the openai SDK: pip install "
                               "'evalkit[agent]'") from None
        self.endpoint = public_url(base_url)

    def ask(self, messages: list[dict[str, str]], *, mission: str, answer: str) -> Said | None:
        from evalkit.runtime.backends import EndpointWait

        try:
            reply = self.backend.complete(messages, None, kind="judge")
        except EndpointWait as wait:
            raise EvalkitError(f"the judge could not be asked: {wait.detail}") from None
        return Said(reply.content, reply.usage, {"endpoint": self.endpoint})
