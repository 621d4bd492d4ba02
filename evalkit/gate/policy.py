"""Policy as data: tool contracts in a YAML file, and one pure function that decides.

A policy names every tool an agent may call, with its contract: a risk level
0-5, whether its effect can be undone, whether a person must approve each
call, the scopes a caller must hold, and whether running it twice is harmless
(``idempotent``, which lets recovery retry it). Anything the file does not name
is denied: the policy fails closed.

The file::

    version: 1
    max_auto_risk: 2              # a tool riskier than this is held for a person (default 2)
    irreversible_hold_risk: 2     # an irreversible tool this risky or more is held (default 2)
    hold_seconds: 3600            # how long a hold waits before it expires (default 3600)
    tools:
      read_file: {risk: 0, reversible: true, scopes: [fs.read], idempotent: true}
      send_email: {risk: 4, reversible: false, requires_approval: true, hold_seconds: 600}

Unknown keys, wrong types and a risk outside 0-5 are refused with one sentence
naming the file and the key, and so is a key written twice.

``decide`` applies the rules in this order; the first that matches is the decision
(its ``kind`` is one of :data:`KINDS`):

1. the tool is not in the policy -> denied, ``unknown_tool``;
2. the arguments are not a JSON object -> denied, ``bad_arguments``;
3. scopes were given and one the contract needs is missing -> denied, ``scope_missing``
   (``granted_scopes=None`` means the caller does not use scopes: nothing is checked);
4. the contract says ``requires_approval`` -> held, ``requires_approval``;
5. the risk is above ``max_auto_risk`` -> held, ``risk_requires_approval``;
6. the tool is irreversible and its risk is at least ``irreversible_hold_risk`` -> held,
   ``irreversible``;
7. otherwise -> allowed, ``allowed``.

A held decision carries ``hold_seconds`` (the contract's, else the policy's): the
ledger fixes the deadline from it once, when the hold is created.

The policy's ``hash`` is the digest of its normalized form (every default filled
in, scopes sorted) over RFC 8785 canonical JSON: two files that say the same
thing hash the same, and every decision names the hash of the policy that made it.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.store.signing import digest

ALLOWED, DENIED, HELD = "allowed", "denied", "held"
#: What a decision can say.
OUTCOMES = (ALLOWED, DENIED, HELD)
#: Why: one taxonomy, each kind belonging to exactly one outcome.
KINDS: dict[str, str] = {
    "allowed": ALLOWED,
    "unknown_tool": DENIED,
    "bad_arguments": DENIED,
    "scope_missing": DENIED,
    "requires_approval": HELD,
    "risk_requires_approval": HELD,
    "irreversible": HELD,
}
VERSION = 1
DEFAULT_MAX_AUTO_RISK = 2
DEFAULT_IRREVERSIBLE_HOLD_RISK = 2
DEFAULT_HOLD_SECONDS = 3600.0
MAX_RISK = 5

_TOP = ("version", "max_auto_risk", "irreversible_hold_risk", "hold_seconds", "tools")
_TOOL = ("risk", "reversible", "requires_approval", "scopes", "idempotent", "hold_seconds")


class PolicyError(EvalkitError):
    """A policy file that cannot be used, said in one sentence naming the file and key."""


@dataclass(frozen=True)
class ToolContract:
    """What a policy says about one tool."""

    tool: str
    risk: int
    reversible: bool
    requires_approval: bool = False
    scopes: tuple[str, ...] = ()
    idempotent: bool = False
    hold_seconds: float | None = None

    def normalized(self) -> dict[str, Any]:
        return {"risk": self.risk, "reversible": self.reversible,
                "requires_approval": self.requires_approval, "scopes": list(self.scopes),
                "idempotent": self.idempotent, "hold_seconds": self.hold_seconds}


@dataclass(frozen=True)
class Decision:
    """What the policy said about one call, and which policy said it."""

    outcome: str
    reason: str
    kind: str
    policy_hash: str
    risk: int | None = None
    hold_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "kind": self.kind,
                "policy_hash": self.policy_hash, "risk": self.risk,
                "hold_seconds": self.hold_seconds}


@dataclass(frozen=True)
class Policy:
    """A checked policy; build it with :meth:`load` or :meth:`from_mapping`."""

    tools: Mapping[str, ToolContract]
    max_auto_risk: int = DEFAULT_MAX_AUTO_RISK
    irreversible_hold_risk: int = DEFAULT_IRREVERSIBLE_HOLD_RISK
    hold_seconds: float = DEFAULT_HOLD_SECONDS
    source: str = field(default="<policy>", compare=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        """Read and check a policy file; anything wrong is one sentence naming the place."""
        target = Path(path)
        try:
            text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise PolicyError(f"cannot read the policy file {target}: {why}") from None
        return cls.from_mapping(_parse_yaml(text, str(target)), source=str(target))

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "<policy>") -> Policy:
        """Check an already-parsed policy (the shape is in the module's docstring)."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"the policy {source} must be a mapping with a 'tools' key")
        _no_unknown(data, _TOP, source, "")
        version = data.get("version", VERSION)
        if version != VERSION or isinstance(version, bool):
            raise PolicyError(f"the policy {source} has version {version!r}; "
                              f"this evalkit reads version {VERSION}")
        tools = data.get("tools")
        if not isinstance(tools, Mapping):
            raise PolicyError(f"the policy {source} needs 'tools', a mapping of tool name "
                              "to contract")
        contracts = {}
        for name, body in tools.items():
            if not isinstance(name, str) or not name:
                raise PolicyError(f"the policy {source} has a tool named {name!r}; "
                                  "tool names are non-empty strings")
            contracts[name] = _contract(name, body, source)
        return cls(
            tools=MappingProxyType(dict(sorted(contracts.items()))),
            max_auto_risk=_risk(data.get("max_auto_risk", DEFAULT_MAX_AUTO_RISK), source,
                                "max_auto_risk"),
            irreversible_hold_risk=_risk(data.get("irreversible_hold_risk",
                                                  DEFAULT_IRREVERSIBLE_HOLD_RISK),
                                         source, "irreversible_hold_risk"),
            hold_seconds=_seconds(data.get("hold_seconds", DEFAULT_HOLD_SECONDS), source,
                                  "hold_seconds"),
            source=source)

    def normalized(self) -> dict[str, Any]:
        """Every setting spelled out: what the hash covers."""
        return {"version": VERSION, "max_auto_risk": self.max_auto_risk,
                "irreversible_hold_risk": self.irreversible_hold_risk,
                "hold_seconds": self.hold_seconds,
                "tools": {name: c.normalized() for name, c in sorted(self.tools.items())}}

    @functools.cached_property
    def hash(self) -> str:
        """``sha256:`` and the hex digest of the normalized policy's RFC 8785 JSON (computed
        once: every decision names it)."""
        return digest(self.normalized())

    def contract(self, tool: str) -> ToolContract | None:
        return self.tools.get(tool) if isinstance(tool, str) else None


def decide(policy: Policy, tool: str, arguments: Any, *,
           granted_scopes: Iterable[str] | None = None) -> Decision:
    """What ``policy`` says about calling ``tool`` with ``arguments``. Pure: no I/O, no clock."""
    policy_hash = policy.hash
    contract = policy.contract(tool)
    if contract is None:
        return Decision(DENIED, f"{tool!r} is not in the policy, which denies what it does "
                        "not name", "unknown_tool", policy_hash)
    risk = contract.risk
    if not isinstance(arguments, Mapping):
        return Decision(DENIED, f"the arguments to {tool} are not a JSON object",
                        "bad_arguments", policy_hash, risk)
    if granted_scopes is not None:
        missing = sorted(set(contract.scopes) - set(granted_scopes))
        if missing:
            return Decision(DENIED, f"{tool} needs scope(s) {', '.join(missing)}, which the "
                            "caller was not granted", "scope_missing", policy_hash, risk)
    hold = contract.hold_seconds if contract.hold_seconds is not None else policy.hold_seconds
    if contract.requires_approval:
        return Decision(HELD, f"{tool} requires a person's approval for every call",
                        "requires_approval", policy_hash, risk, hold)
    if risk > policy.max_auto_risk:
        return Decision(HELD, f"{tool} has risk {risk}, above the {policy.max_auto_risk} "
                        "allowed without approval", "risk_requires_approval", policy_hash,
                        risk, hold)
    if not contract.reversible and risk >= policy.irreversible_hold_risk:
        return Decision(HELD, f"{tool} cannot be undone and has risk {risk} (irreversible "
                        f"tools from risk {policy.irreversible_hold_risk} are held)",
                        "irreversible", policy_hash, risk, hold)
    return Decision(ALLOWED, f"{tool} is allowed by the policy (risk {risk})", "allowed",
                    policy_hash, risk)


# -- checking --------------------------------------------------------------------------------


def _contract(name: str, body: Any, source: str) -> ToolContract:
    where = f"tools.{name}"
    if not isinstance(body, Mapping):
        raise PolicyError(f"the policy {source} key {where} must be a mapping (risk, "
                          "reversible, ...)")
    _no_unknown(body, _TOOL, source, where + ".")
    for needed in ("risk", "reversible"):
        if needed not in body:
            raise PolicyError(f"the policy {source} key {where} needs '{needed}'")
    scopes = body.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s for s in scopes):
        raise PolicyError(f"the policy {source} key {where}.scopes must be a list of "
                          "non-empty strings")
    hold = body.get("hold_seconds")
    return ToolContract(
        tool=name, risk=_risk(body["risk"], source, where + ".risk"),
        reversible=_bool(body["reversible"], source, where + ".reversible"),
        requires_approval=_bool(body.get("requires_approval", False), source,
                                where + ".requires_approval"),
        scopes=tuple(sorted(set(scopes))),
        idempotent=_bool(body.get("idempotent", False), source, where + ".idempotent"),
        hold_seconds=None if hold is None else _seconds(hold, source, where + ".hold_seconds"))


def _no_unknown(data: Mapping[Any, Any], known: tuple[str, ...], source: str,
                prefix: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise PolicyError(f"the policy {source} has unknown key {prefix}{unknown[0]} "
                          f"(known: {', '.join(known)})")


def _risk(value: Any, source: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RISK:
        raise PolicyError(f"the policy {source} key {key} must be an integer from 0 to "
                          f"{MAX_RISK}, not {value!r}")
    return value


def _bool(value: Any, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(f"the policy {source} key {key} must be true or false, not {value!r}")
    return value


def _seconds(value: Any, source: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise PolicyError(f"the policy {source} key {key} must be a positive number of "
                          f"seconds, not {value!r}")
    return float(value)


def _parse_yaml(text: str, source: str) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if key in seen:
                raise PolicyError(f"the policy {source} names key {key} twice "
                                  f"(line {key_node.start_mark.line + 1})")
            seen.add(key)
        return loader.construct_mapping(node)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PolicyError(f"the policy file {source} is not YAML{at}") from None
    except RecursionError:
        raise PolicyError(f"the policy file {source} nests too deeply") from None
