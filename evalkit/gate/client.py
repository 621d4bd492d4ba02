"""``evalkit.gate.Client``: a Python framework's side of the gate sidecar.

Standard library only (threads, pipes, JSON), so any agent can use it without
evalkit's extras. The client spawns ``evalkit gate serve`` (or is handed the two
streams of one already running), registers the tool bodies it can run, and
then asks the gate before every call::

    with Client(policy="policy.yaml") as gate:
        gate.register_tool("send_email", send_email)
        result = gate.govern("send_email", {"to": "a@b.c"}, idempotency_key="run7:3:0")
        if result.completed: ...

The tool body never runs in ``govern``'s own thread of control: it runs only
when the gate, after arbitration, sends ``run_tool``. One reader thread reads the
gate's lines and hands each reply to the caller waiting on its request id, so
any number of threads may call ``govern`` at once; each ``run_tool`` runs on a
thread of its own and is answered with ``tool_result`` or ``tool_error``
carrying the same ``id`` and ``correlation_id``.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from evalkit.gate import protocol as P

#: Seconds a caller waits for the gate's reply beyond the wait it asked the gate for.
REPLY_MARGIN = 120.0


class GateError(RuntimeError):
    """The gate refused a request (``code`` from ``protocol.ERRORS``) or went away."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class GovernResult:
    """What the gate said about one call (``govern_result``)."""

    id: str
    idempotency_key: str
    phase: str
    kind: str
    reason: str
    digest: str | None
    policy_hash: str
    replayed: bool
    result: Any = None
    error: str | None = None
    deadline: str | None = None

    @property
    def completed(self) -> bool:
        return self.phase == "completed"

    @classmethod
    def of(cls, message: Mapping[str, Any]) -> GovernResult:
        return cls(**{k: v for k, v in message.items() if k != "type"})


class _Waiter:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] | None = None


class Client:
    """One connection to a gate. Spawns ``evalkit gate serve --policy POLICY`` unless
    ``streams`` (the gate's input, the gate's output) are given."""

    def __init__(self, policy: str | Path | None = None, *, ledger: str | Path | None = None,
                 runs: str | Path | None = None, suite_key: str | None = None,
                 objective: str | None = None, approvals: str | Path | None = None,
                 tool_timeout: float | None = None, extra_args: Sequence[str] = (),
                 streams: tuple[IO[bytes], IO[bytes]] | None = None,
                 env: Mapping[str, str] | None = None, python: str = sys.executable,
                 start_timeout: float = 60.0) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        if streams is None:
            if policy is None:
                raise ValueError("give the policy file to spawn the gate, or its streams")
            command = [python, "-m", "evalkit.cli", "gate", "serve", "--policy", str(policy)]
            for flag, value in (("--ledger", ledger), ("--runs", runs),
                                ("--suite-key", suite_key), ("--objective", objective),
                                ("--approvals", approvals), ("--tool-timeout", tool_timeout)):
                if value is not None:
                    command += [flag, str(value)]
            command += list(extra_args)
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env=dict(os.environ if env is None else env), close_fds=True)
            assert self._process.stdin is not None and self._process.stdout is not None
            self._to, self._from = self._process.stdin, self._process.stdout
        else:
            self._to, self._from = streams
        self._tools: dict[str, Callable[..., Any]] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]
        self._gone: str | None = None
        #: ``error`` lines that named no request (a line the gate could not read).
        self.unmatched: list[dict[str, Any]] = []
        self.ready: dict[str, Any] | None = None
        self._ready = threading.Event()
        self.closed: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, name="evalkit-gate-reader",
                                        daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout) or self.ready is None:
            self._kill()
            raise GateError(f"the gate did not say ready within {start_timeout:g} s"
                            + (f": {self._gone}" if self._gone else ""))
        if self.ready.get("protocol_version") != P.PROTOCOL_VERSION:
            self._kill()
            raise GateError(f"the gate speaks protocol {self.ready.get('protocol_version')}, "
                            f"this client {P.PROTOCOL_VERSION}")

    @property
    def run_id(self) -> str | None:
        """The gate's recording."""
        return self.ready.get("run_id") if self.ready else None

    # -- requests ------------------------------------------------------------------------------

    def register_tool(self, name: str, fn: Callable[..., Any], *, description: str = ""
                      ) -> bool:
        """Let the gate run ``fn(**arguments)`` as ``name``; True when the policy names it."""
        self._tools[name] = fn
        reply = self._request({"type": "register_tool", "tool": name,
                               **({"description": description} if description else {})},
                              timeout=REPLY_MARGIN)
        return bool(reply["in_policy"])

    def govern(self, tool: str, arguments: Mapping[str, Any], *,
               idempotency_key: str | None = None, run_id: str | None = None,
               step: int | None = None, wait_ms: int = 0) -> GovernResult:
        """Propose one call and wait for the gate's word; the body runs in between only if
        the gate allows it. Without a key, a fresh one: such a call cannot be retried
        safely — give a key derived from your run, step and call to make retries safe."""
        message: dict[str, Any] = {"type": "govern",
                                   "idempotency_key": idempotency_key or uuid.uuid4().hex,
                                   "tool": tool, "arguments": dict(arguments),
                                   "wait_ms": wait_ms}
        if run_id is not None:
            message["run_id"] = run_id
        if step is not None:
            message["step"] = step
        return GovernResult.of(self._request(message, timeout=wait_ms / 1000 + REPLY_MARGIN))

    def resume(self, idempotency_key: str, wait_ms: int = 0) -> GovernResult:
        """Ask again about a key: a held call runs once a signed approval is found."""
        return GovernResult.of(self._request(
            {"type": "resume", "idempotency_key": idempotency_key, "wait_ms": wait_ms},
            timeout=wait_ms / 1000 + REPLY_MARGIN))

    def close(self, answer: str | None = None, timeout: float = 60.0) -> dict[str, Any] | None:
        """Shut the gate down (its recording is sealed, with ``answer`` when given) and wait
        for it to exit. Safe to call twice."""
        if self.closed is not None or self._gone is not None:
            self._reap(timeout)
            return self.closed
        message: dict[str, Any] = {"type": "shutdown"}
        if answer is not None:
            message["answer"] = answer
        try:
            self.closed = self._request(message, timeout=timeout)
        finally:
            try:
                self._to.close()
            except OSError:
                pass
            self._reap(timeout)
        return self.closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, line: bytes) -> None:
        """Write one line as it is (tests of the gate's strictness)."""
        with self._write_lock:
            self._to.write(line if line.endswith(b"\n") else line + b"\n")
            self._to.flush()

    # -- inside --------------------------------------------------------------------------------

    def _request(self, message: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        request_id = f"{self._prefix}-{next(self._ids)}"
        message["id"] = request_id
        waiter = _Waiter()
        with self._lock:
            if self._gone is not None:
                raise GateError(f"the gate is gone: {self._gone}")
            self._waiters[request_id] = waiter
        try:
            self._write(message)
            if not waiter.done.wait(timeout):
                raise GateError(f"no answer from the gate to {message['type']} within "
                                f"{timeout:g} s")
        finally:
            with self._lock:
                self._waiters.pop(request_id, None)
        reply = waiter.message
        if reply is None:
            raise GateError(f"the gate is gone: {self._gone}")
        if reply["type"] == "error":
            raise GateError(f"the gate refused {message['type']}: {reply['message']}",
                            reply["code"])
        return reply

    def _write(self, message: Mapping[str, Any]) -> None:
        data = P.dumps(message)
        with self._write_lock:
            try:
                self._to.write(data)
                self._to.flush()
            except (OSError, ValueError) as exc:
                raise GateError(f"cannot write to the gate: {exc}") from None

    def _read(self) -> None:
        why = "the gate closed its output"
        try:
            for line in self._from:
                try:
                    message = P.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                kind = message.get("type")
                if kind == "ready":
                    self.ready = message
                    self._ready.set()
                elif kind == "run_tool":
                    threading.Thread(target=self._run_tool, args=(message,),
                                     name=f"evalkit-tool-{message.get('correlation_id')}",
                                     daemon=True).start()
                else:
                    self._deliver(message)
        except (OSError, ValueError) as exc:
            why = f"reading from the gate failed: {exc}"
        with self._lock:
            self._gone = why
            waiters = list(self._waiters.values())
        self._ready.set()
        for waiter in waiters:
            waiter.done.set()

    def _deliver(self, message: dict[str, Any]) -> None:
        with self._lock:
            waiter = self._waiters.get(message.get("id"))  # type: ignore[arg-type]
        if waiter is None:
            self.unmatched.append(message)
            return
        waiter.message = message
        waiter.done.set()

    def _run_tool(self, message: dict[str, Any]) -> None:
        """Run the body the gate asked for and answer with the same id and correlation id."""
        answer: dict[str, Any] = {"id": message["id"],
                                  "correlation_id": message["correlation_id"]}
        fn = self._tools.get(message["tool"])
        if fn is None:
            answer.update(type="tool_error",
                          error=f"no body is registered for {message['tool']!r}")
        else:
            try:
                answer.update(type="tool_result", output=_jsonable(fn(**message["arguments"])))
            except Exception as exc:  # the body's failure is the tool's result
                answer.update(type="tool_error", error=f"{type(exc).__name__}: {exc}")
        try:
            self._write(answer)
        except GateError:
            pass

    def _reap(self, timeout: float) -> None:
        if self._process is None:
            return
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def _jsonable(value: Any) -> Any:
    """What a body returned, as JSON the protocol can carry (else its text)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value
