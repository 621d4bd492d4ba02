"""``run``: spawn the agent once per mission, capture what it wrote, score it.

The agent is any program that speaks the stream. The harness adds only:

- the objective — substituted for ``{objective}`` in the spawn line, or else
  appended as the first argument after it;
- ``--events fd:N`` — the write end of a pipe the harness drains into
  ``DIR/<key>/events.jsonl`` (also as ``EVALKIT_EVENTS=fd:N`` in the environment,
  where ``evalkit.record`` finds it);
- the run store root — ``EVALKIT_RUNS=DIR/<key>/runs`` in the environment, and
  substituted for ``{runs}`` when the spawn line has it;
- the mission's own ``flags`` (and, under ``measure``, the row's delta).

Each mission runs in a folder of its own, ``DIR/<key>/work`` — the suite's
fixtures staged there, or empty — which holds nothing of the harness: the
capture is written beside it, where an agent confined to its working folder
(the built-in runtime's tools are) cannot reach. A spawn line's relative
paths that name something in the folder ``run`` was started in are made
absolute, so ``-- python my_agent.py`` still finds its program. When the
agent is done, the harness seals the mission folder (``evalkit.store.seal``);
when every mission is done, the output folder, whose seal the scoring then
requires of every stream. An agent spawned without a sandbox of its own runs
as the user who started ``run`` and is trusted not to reach past its folder.

With no spawn line the agent is evalkit's own runtime, spawned as a
subprocess (``python -m evalkit.cli mission``; never imported — this package
must run where no agent stack is installed), driven by the suite's scripted
agents. Per mission ``DIR/<key>/`` holds ``events.jsonl``, ``runs/``,
``stdout.txt``, ``stderr.txt`` (scrubbed a line at a time on their way in:
``evalkit.eval.outputs``) and ``command.json`` (the spawn line with
credentials withheld, exit code, timed out, wall seconds). A mission that
outlives ``--timeout`` gets SIGTERM (the contract's "wind up" signal), then its
whole process group is killed, and it is scored from what it wrote.

Missions run on an executor: ``local`` (``--jobs N`` threads, each minding one
agent process) or ``ray`` (each mission a Ray task writing its folder to
storage every node shares; Ray is imported only on that path).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TextIO

from evalkit.errors import EvalkitError
from evalkit.eval import staging, taxonomy
from evalkit.eval.check import gradeable
from evalkit.eval.harness_files import (
    MATRIX_FILE,
    MATRIX_FORMAT,
    RUN_FILE,
    RUN_FORMAT,
    RUN_VERSION,
    STDERR_FILE,
    STDOUT_FILE,
)
from evalkit.eval.outputs import Drain, Scrubbed, Sink, Tapped, Verbatim
from evalkit.eval.score import missions_in, score
from evalkit.eval.suite import Mission, Suite
from evalkit.extras import BUILTIN_RUNTIME, RAY_EXECUTOR, require
from evalkit.forkserver import client as forkserver
from evalkit.redact import REDACTED, Redactor, declared_secrets, is_credential_name, remember
from evalkit.store.layout import EVENTS_FILE, MANIFEST_FILE
from evalkit.store.replace import replace_file
from evalkit.store.seal import Checker, seal_folder, seal_mission, signer_or_none
from evalkit.store.sink import EVENTS_ENV

if TYPE_CHECKING:
    from evalkit.pricing import Pricing

EXECUTORS = ("local", "ray")
DEFAULT_TIMEOUT_S = 600.0
#: After SIGTERM at the timeout, how long the agent has to close its stream.
TERM_GRACE_S = 3.0
#: After the agent exits, how long its stream pipe may stay open (a straggling child).
DRAIN_GRACE_S = 2.0

OBJECTIVE, RUNS = "{objective}", "{runs}"
_PLACEHOLDER = re.compile(r"\{(objective|runs)\}")

#: What an agent says on stderr when it refuses a flag at startup (exit 2, no record).
_REFUSAL = re.compile(r"not available|no such option|unrecognized argument|unknown option|"
                      r"unexpected argument|not supported", re.IGNORECASE)

#: Planes a suite may name with its top-level ``plane:`` key.
PLANES = ("stub",)
#: Script file suffixes in a suite's ``agents:`` folder, in lookup order.
SCRIPT_SUFFIXES = (".yaml", ".yml", ".json")
#: The agent a mission's ``<key>.yaml`` script is (``<key>.<variant>.yaml`` are the others).
GOOD = "good"
_VARIANT = re.compile(r"^[A-Za-z0-9_-]+$")


def script_variants(agents: Path, keys: Iterable[str]) -> list[str]:
    """The scripted agents a folder holds for missions ``keys``: ``good`` (``<key>.yaml``)
    first, then every ``<key>.<variant>.yaml`` variant, sorted."""
    keys = set(keys)
    seen: set[str] = set()
    for path in agents.iterdir():
        if not path.is_file() or path.suffix not in SCRIPT_SUFFIXES:
            continue
        key, _, variant = path.stem.partition(".")
        if key in keys and (not variant or _VARIANT.match(variant)):
            seen.add(variant or GOOD)
    return sorted(seen, key=lambda v: (v != GOOD, v))


# -- credentials ------------------------------------------------------------------------------

#: A flag whose name says it takes a credential (``--api-key``, ``--token``): its value is
#: withheld. Which words make a credential is ``evalkit.redact``'s one rule.
_FLAG = re.compile(r"--?[A-Za-z0-9_-]+")
#: Takes the *name* of a variable whose value is secret: the name is kept, the value known.
SECRET_FLAG = "--secret"


def _credential_flag(name: str) -> bool:
    return name != SECRET_FLAG and _FLAG.fullmatch(name) is not None and \
        is_credential_name(name)


_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s\"']*@)?"
                  r"(?P<rest>[^?#\s\"']*)(?:\?(?P<query>[^#\s\"']*))?(?:#(?P<frag>[^\s\"']*))?")


def strip_url(text: str) -> str:
    """Every URL in ``text`` with its userinfo and its query values withheld."""

    def one(m: re.Match[str]) -> str:
        out = m.group("scheme") + (f"{REDACTED}@" if m.group("userinfo") else "") + m.group("rest")
        query = m.group("query")
        if query is not None:
            pairs = [p.partition("=") for p in query.split("&")]
            out += "?" + "&".join(k + (f"={REDACTED}" if sep else "") for k, sep, _ in pairs)
        if m.group("frag"):
            out += f"#{REDACTED}"
        return out

    return _URL.sub(one, text)


def secret_values(argv: Sequence[str]) -> list[str]:
    """The secrets a command line carries: values of credential-named flags (``--api-key X``,
    ``--token=X``), the values of the variables it names with ``--secret NAME`` (where this
    process has them), and the userinfo and query values of every URL in it."""
    found: list[str] = []
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        given = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if name == SECRET_FLAG:
            found.append(os.environ.get(given, ""))
        elif _credential_flag(name):
            found.append(given)
        for url in _URL.finditer(token):
            userinfo = (url.group("userinfo") or "").rstrip("@")
            found += [userinfo, userinfo.partition(":")[2]]
            for pair in (url.group("query") or "").split("&"):
                found.append(pair.partition("=")[2])
    return list(dict.fromkeys(v for v in found if v))


def withhold(argv: Sequence[str], extra: Iterable[str] = ()) -> list[str]:
    """A command line fit to write down: credential flag values, URL userinfo and query
    values, and anything the redactor scrubs (``evalkit.redact``) are withheld."""
    secrets = [*secret_values(argv), *extra]
    redactor = Redactor(extra_values=secrets)
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, value = token.partition("=")
        if _credential_flag(name):
            out.append(f"{name}={REDACTED}" if eq else token)
            hide_next = not eq
            continue
        if name == SECRET_FLAG and eq:  # a name, not a "secret=value" assignment
            out.append(f"{name}={redactor.redact(value)}")
            continue
        out.append(redactor.redact(strip_url(token)))
    return out


# -- one mission ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One agent process to run; plain data, so it travels to a Ray worker as is."""

    key: str
    objective: str
    #: The spawn line, possibly holding ``{objective}`` and ``{runs}``.
    spawn: tuple[str, ...]
    #: Appended after ``--events``: the row's delta, then the mission's own flags.
    flags: tuple[str, ...]
    #: The mission folder, ``DIR/<key>`` (absolute).
    out: str
    timeout_s: float
    #: The folder ``run`` was started in (absolute); the agent works in ``<out>/work``.
    cwd: str
    #: A fixtures folder staged into ``<out>/work``, the agent's working directory.
    stage: str | None = None
    #: Stage only this entry of the fixtures folder (the suite's ``fixture_for``).
    stage_only: str | None = None
    #: Environment added to the agent's (e.g. the allowed hosts of a served run).
    env: tuple[tuple[str, str], ...] = ()
    #: Values to scrub from everything written down besides the stream.
    secrets: tuple[str, ...] = ()
    #: What progress shows, e.g. ``direct/rep2/chain-1``.
    label: str = ""


#: The agent's working folder inside its mission folder (fixtures staged, or empty).
WORK_DIR = "work"


def anchored(spawn: Sequence[str], launch: Path) -> tuple[str, ...]:
    """The spawn line with each relative path that names something in ``launch`` made
    absolute (also as ``--flag=PATH``): the agent starts in a folder of its own, not
    where ``run`` was started.

    A path is a token with a ``/`` in it, or a file name with a suffix
    (``agent.py``), that exists there; a bare word (``mission``, ``openai``) is
    left alone even when a folder of that name happens to exist.
    """
    def one(text: str) -> str:
        if not text or os.path.isabs(text) or "{" in text:
            return text
        here = launch / text
        if ("/" in text and os.path.exists(here)) or ("." in text.strip(".") and
                                                      os.path.isfile(here)):
            return str(here.absolute())
        return text

    out = []
    for token in spawn:
        if token.startswith("--") and "=" in token:
            flag, _, value = token.partition("=")
            out.append(f"{flag}={one(value)}")
        else:
            out.append(token if token.startswith("-") else one(token))
    return tuple(out)


def command_line(job: Job, events_fd: int, control_fd: int | None = None) -> list[str]:
    """The argv a mission is spawned with (``--control fd:M`` after ``--events`` when the
    harness steers the mission)."""
    values = {"objective": job.objective, "runs": str(Path(job.out) / "runs")}
    argv = [_PLACEHOLDER.sub(lambda m: values[m.group(1)], token) for token in job.spawn]
    if not any(OBJECTIVE in token for token in job.spawn):
        argv.append(job.objective)
    control = ["--control", f"fd:{control_fd}"] if control_fd is not None else []
    return [*argv, "--events", f"fd:{events_fd}", *control, *job.flags]


class Steer(Protocol):
    """A harness that acts on a mission while it runs: told the agent's pid (the leader of
    its process group) and handed the write end of its ``--control`` pipe, then shown each
    stream line as it lands (from the drain's thread). Local executor only."""

    def started(self, pid: int, control: BinaryIO) -> None: ...
    def line(self, raw: bytes) -> None: ...


def run_mission(job: Job, steer: Steer | None = None) -> dict[str, Any]:
    """Spawn one agent, drain its stream, wait (or kill it at the timeout), write its folder.

    With ``steer`` the agent also gets ``--control fd:M``, and ``steer`` sees its records
    as they come. Returns the capture — what ``command.json`` holds.
    """
    out = Path(job.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    cwd, unstaged = str(out / WORK_DIR), None
    try:
        if job.stage is not None:
            staging.stage(job.stage, cwd, only=job.stage_only)
        else:
            os.mkdir(cwd)
    except (EvalkitError, OSError) as exc:
        unstaged = f"cannot stage the fixtures into {cwd}: {exc}" if job.stage is not None \
            else f"cannot make the working folder {cwd}: {getattr(exc, 'strerror', None) or exc}"
    env = {**os.environ, **dict(job.env), "EVALKIT_RUNS": str(out / "runs")}
    events_fd, events_write = os.pipe()
    env[EVENTS_ENV] = f"fd:{events_write}"  # the same sink for an agent that reads no flags
    control_read, control = None, None
    if steer is not None:
        control_read, control_write = os.pipe()
        control = os.fdopen(control_write, "wb", buffering=0)
    argv = command_line(job, events_write, control_read)
    capture: dict[str, Any] = {
        "key": job.key, "argv": withhold(argv, job.secrets), "cwd": cwd,
        "events": f"fd:{events_write}", "runs": "runs", "timeout_s": job.timeout_s,
        "exit_code": None, "timed_out": False, "wall_s": None, "spawn_error": None}
    t0 = time.monotonic()
    with open(out / EVENTS_FILE, "wb") as events, open(out / STDOUT_FILE, "wb") as stdout, \
            open(out / STDERR_FILE, "wb") as stderr:
        stdout_fd, stdout_write = os.pipe()
        stderr_fd, stderr_write = os.pipe()
        # The agent's own environment: its credential-named variables are scrubbed too.
        redactor = Redactor(extra_values=job.secrets, environ=env)  # one drain feeds both
        said = Scrubbed(stderr, redactor)
        stream: Sink = Verbatim(events) if steer is None else Tapped(Verbatim(events), steer.line)
        drain = Drain({events_fd: stream, stdout_fd: Scrubbed(stdout, redactor),
                       stderr_fd: said})
        proc = None
        try:
            if unstaged is not None:
                raise _Unstaged(unstaged)
            proc = forkserver.popen(argv, stdin=subprocess.DEVNULL, stdout=stdout_write,
                                    stderr=stderr_write, cwd=cwd, env=env,
                                    pass_fds=(events_write,) if control_read is None else
                                    (events_write, control_read), start_new_session=True)
        except (_Unstaged, OSError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, _Unstaged) else \
                f"cannot start {argv[0]!r}: {getattr(exc, 'strerror', None) or exc}"
            capture["spawn_error"] = reason
            said.feed(f"evalkit run: {reason}\n".encode())
        finally:
            for fd in (events_write, stdout_write, stderr_write):
                os.close(fd)  # the agent holds its own copies: the pipes end when it does
            if control_read is not None:
                os.close(control_read)
        if proc is None:
            drain.abandon()
        else:
            if steer is not None and control is not None:
                steer.started(proc.pid, control)
            drain.start()
            try:
                _wait(proc, job.timeout_s, capture)
                if not drain.join(DRAIN_GRACE_S):
                    _signal_group(proc.pid, signal.SIGKILL)  # stragglers die with their mission
                    if not drain.join(DRAIN_GRACE_S):
                        drain.stop()  # one outside the group holds a pipe: stop listening
            except BaseException:  # ^C: what the pipes hold is written before the files close
                drain.stop()
                raise
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(proc.pid)
        if control is not None:
            with contextlib.suppress(OSError):
                control.close()
    capture["wall_s"] = round(time.monotonic() - t0, 3)
    if drain.failure is not None:
        raise drain.failure
    capture["events_bytes"] = (out / "events.jsonl").stat().st_size
    replace_file(out / taxonomy.CAPTURE_FILE, json.dumps(capture, indent=2, ensure_ascii=False)
                 + "\n")
    signer, _ = signer_or_none()
    if signer is not None:
        seal_mission(out, signer)
    return capture


def _wait(proc: subprocess.Popen[bytes] | forkserver.Forked, timeout_s: float, capture: dict[str, Any]) -> None:
    """Wait for the agent, winding it up at the timeout; its exit lands in ``capture``."""
    with _LIVE_LOCK:
        _LIVE.add(proc.pid)
    try:
        capture["exit_code"] = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        capture["timed_out"] = True
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        capture["exit_code"] = proc.returncode


class _Unstaged(Exception):
    """The mission's fixtures could not be staged: it is not spawned."""


#: Process groups of the agents running now (their leaders' pids), for ``stop_all``.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Wind up every running agent (SIGTERM to its group), then kill what is left.

    Agents run in sessions of their own, so a Ctrl-C at the terminal never reaches
    them; an interrupted ``run`` calls this so no mission outlives the harness.
    """
    with _LIVE_LOCK:
        pids = list(_LIVE)
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline:
        with _LIVE_LOCK:
            if not _LIVE & set(pids):
                return
        time.sleep(0.05)
    for pid in pids:
        _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def refusal(capture: dict[str, Any], folder: Path) -> str | None:
    """The agent's own words when it refused to start (exit 2, no record, a refusal on
    stderr) — how ``measure`` learns a row's flag is not honoured. Else None."""
    if capture.get("exit_code") != 2 or capture.get("events_bytes"):
        return None
    try:
        text = (folder / STDERR_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if _REFUSAL.search(line):
            return line.strip()
    return None


# -- executors and progress -------------------------------------------------------------------


class Progress:
    """A live display of finished missions on stderr: a rich bar on a terminal, else one line
    per mission (CI logs keep them)."""

    def __init__(self, total: int, title: str, stream: TextIO | None = None,
                 enabled: bool = True, judge: Judge | None = None) -> None:
        self.total, self.title, self.done = total, title, 0
        self.judge = judge
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._lock = threading.Lock()
        self._rich: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("{task.fields[last]}"),
                                      console=Console(file=self.stream), transient=False)
            self._rich.start()
            self._task = self._rich.add_task(self.title, total=self.total, last="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def add(self, more: int) -> None:
        with self._lock:
            self.total += more
            if self._rich is not None:
                self._rich.update(self._task, total=self.total)

    def finished(self, job: Job, capture: dict[str, Any]) -> None:
        with self._lock:
            self.done += 1
            name = job.label or job.key
            if self.judge is not None and self.enabled:
                self._verdict(name, capture, *self.judge(job, capture))
                return
            word = _capture_word(capture)
            if self._rich is not None:
                self._rich.update(self._task, advance=1, last=f"{name}: {word}")
            elif self.enabled:
                self.stream.write(f"[{self.done}/{self.total}] {name}: {word}\n")
                self.stream.flush()

    def _verdict(self, name: str, capture: dict[str, Any], word: str, why: str | None) -> None:
        """One line per finished mission: its verdict word, then the first reason."""
        seconds = capture.get("wall_s")
        took = f" ({seconds} s)" if isinstance(seconds, (int, float)) else ""
        tail = f" — {why}" if why else ""
        line = f"[{self.done}/{self.total}] {word:<5} {name}{took}{tail}"
        if self._rich is not None:
            from rich.text import Text

            colour = {"PASS": "green", "FAIL": "red", "INFRA": "magenta"}.get(word, "")
            text = Text(f"[{self.done}/{self.total}] ")
            text.append(f"{word:<5}", style=f"bold {colour}".strip())
            text.append(f" {name}{took}{tail}")
            self._rich.console.print(text, soft_wrap=True, markup=False, highlight=False)
            self._rich.update(self._task, advance=1, last=f"{name}: {word}")
        else:
            self.stream.write(line + "\n")
            self.stream.flush()


#: What the console says of one finished mission: (PASS / FAIL / INFRA / MISSING, the first
#: reason or cause, or None).
Judge = Callable[["Job", dict[str, Any]], tuple[str, str | None]]


def mission_judge(suite: Suite) -> Judge:
    """Score one mission's folder as soon as its agent ends, for the console only: the
    report is scored again, whole and sealed, when every mission has run."""
    def judge(job: Job, capture: dict[str, Any]) -> tuple[str, str | None]:
        try:
            report = score(suite, mapping={job.key: job.out}, verify=False).to_dict()
            verdict = next(v for v in report["verdicts"] if v["key"] == job.key)
        except (EvalkitError, StopIteration):
            return "FAIL", "its stream could not be scored"
        events = Path(job.out) / EVENTS_FILE
        word, infra = taxonomy.categorize(verdict, capture, events if events.is_file() else None)
        if word == taxonomy.INFRA:
            cause = _last_stderr_line(Path(job.out) / STDERR_FILE)
            return "INFRA", cause or infra
        reasons = verdict.get("reasons") or []
        return word.upper(), (str(reasons[0])[:300] if reasons else None)
    return judge


def _last_stderr_line(path: Path) -> str | None:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace")
                 .splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def _capture_word(capture: dict[str, Any]) -> str:
    if capture.get("spawn_error"):
        return "could not start"
    if capture.get("timed_out"):
        return f"timed out after {capture.get('timeout_s')} s"
    return f"exit {capture.get('exit_code')} in {capture.get('wall_s')} s"


def execute(jobs: Sequence[Job], *, workers: int = 1, executor: str = "local",
            progress: Progress | None = None, ray_address: str | None = None
            ) -> list[dict[str, Any]]:
    """Run every job; captures come back in job order whatever order they finished in."""
    check_executor(executor)
    if workers < 1:
        raise EvalkitError(f"--jobs must be 1 or more, not {workers}")
    if not jobs:
        return []
    if executor == "ray":
        return _execute_ray(jobs, workers, progress, ray_address)
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    pool = ThreadPoolExecutor(max_workers=min(workers, len(jobs)))
    try:
        futures = {pool.submit(run_mission, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            if progress is not None:
                progress.finished(jobs[i], results[i])  # type: ignore[arg-type]
    except BaseException:  # Ctrl-C, or a bug: no agent may outlive the harness
        pool.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    finally:
        pool.shutdown(wait=True)
    return results  # type: ignore[return-value]


def check_executor(executor: str) -> None:
    """Refuse an executor that cannot run here, before a folder is made or an agent started."""
    if executor not in EXECUTORS:
        raise EvalkitError(f"--executor takes one of {', '.join(EXECUTORS)}, not {executor!r}")
    if executor == "ray":
        require(RAY_EXECUTOR)


def _execute_ray(jobs: Sequence[Job], workers: int, progress: Progress | None,
                 address: str | None) -> list[dict[str, Any]]:
    """Each mission a Ray task; at most ``workers`` in flight. Paths must be on storage every
    node sees (the harness reads the folders back when scoring)."""
    with executor_session("ray", address):
        import ray

        task = ray.remote(num_cpus=1, max_retries=0)(run_mission)
        results: list[dict[str, Any] | None] = [None] * len(jobs)
        pending: dict[Any, int] = {}
        queue = list(enumerate(jobs))
        while queue or pending:
            while queue and len(pending) < workers:
                i, job = queue.pop(0)
                pending[task.remote(job)] = i
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                results[i] = ray.get(ref)
                if progress is not None:
                    progress.finished(jobs[i], results[i])  # type: ignore[arg-type]
        return results  # type: ignore[return-value]


@contextlib.contextmanager
def executor_session(executor: str, address: str | None = None) -> Iterator[None]:
    """Ray started (or joined) once around everything that executes; for ``local``, the
    fork server the built-in runtime's missions are forked from (``evalkit.forkserver``).

    Joins ``address`` (or ``RAY_ADDRESS``) when given, else starts a local cluster and
    shuts it down on the way out. Ray is imported only here.
    """
    if executor != "ray":
        with forkserver.serving():
            yield
        return
    check_executor(executor)
    import ray

    if ray.is_initialized():
        yield
        return
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


# -- the agent: a spawn line, or the built-in runtime with scripted agents ---------------------


@dataclass(frozen=True)
class Agent:
    """How a mission is spawned: the user's spawn line, or the built-in runtime."""

    #: The user's spawn line; None = the built-in runtime.
    spawn: tuple[str, ...] | None = None
    #: Built-in: the suite's scripted agents, the variant chosen, the plane/profile flags.
    agents: Path | None = None
    variant: str | None = None
    extra: tuple[str, ...] = ()
    #: The manifest to pass with ``--skill`` (built-in: added; spawn line: repointed).
    skill: Path | None = None
    #: Built-in: the subfolder of ``agents`` whose scripts are shaped for a measure row
    #: (``swarm``, ``native``); None = the scripts of the json direct loop.
    shape: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: Variables ``--secret`` named (built-in: passed on), and their values, scrubbed from
    #: the capture whatever the agent.
    secret_names: tuple[str, ...] = ()
    declared: tuple[str, ...] = field(default=(), repr=False)

    @property
    def builtin(self) -> bool:
        return self.spawn is None

    def script(self, key: str) -> Path | None:
        """The scripted agent for one mission, or None when the folder has none."""
        if self.agents is None:
            return None
        stem = key if self.variant is None else f"{key}.{self.variant}"
        for suffix in SCRIPT_SUFFIXES:
            path = self.scripts / f"{stem}{suffix}"
            if path.is_file():
                return path
        return None

    @property
    def scripts(self) -> Path:
        """The folder this agent's scripts are read from."""
        base = self.agents or Path("agents")
        return base / self.shape if self.shape else base

    def shaped_for(self, row: str) -> Agent:
        return replace(self, shape=row)

    def argv(self, mission: Mission) -> tuple[str, ...] | None:
        """The spawn line for one mission; None when the built-in has no script for it."""
        if self.spawn is not None:
            return _with_skill(self.spawn, self.skill)
        script = self.script(mission.key)
        if script is None:
            return None
        argv = [*_runtime(), "--provider", "scripted", "--script", str(script), *self.extra,
                *self._secret_flags()]
        if self.skill is not None:
            argv += ["--skill", str(self.skill)]
        return tuple(argv)

    def describe(self) -> list[str]:
        """The spawn line as provenance shows it (credentials withheld)."""
        if self.spawn is not None:
            return withhold(_with_skill(self.spawn, self.skill), self.declared)
        stem = "<key>" if self.variant is None else f"<key>.{self.variant}"
        argv = [*_runtime(), "--provider", "scripted", "--script",
                str(self.scripts / f"{stem}.yaml"), *self.extra,
                *self._secret_flags()]
        if self.skill is not None:
            argv += ["--skill", str(self.skill)]
        return withhold(argv, self.declared)

    def secrets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*secret_values(self.spawn or ()), *self.declared)))

    def _secret_flags(self) -> list[str]:
        """The built-in runtime is told the names too, so that it scrubs its own records;
        a spawn line's agent may not know ``--secret`` (add it to the spawn line)."""
        return [token for name in self.secret_names for token in (SECRET_FLAG, name)]

    def with_skill(self, skill: Path | None, note: str | None = None) -> Agent:
        return replace(self, skill=skill, notes=(*self.notes, *([note] if note else [])))


def _runtime() -> list[str]:
    """The built-in agent, as a subprocess of this Python — never imported."""
    return [sys.executable, "-m", "evalkit.cli", "mission"]


def spawn_skill(spawn: Sequence[str]) -> str | None:
    """The primary ``--skill`` value of a spawn line, if it has one."""
    for i, token in enumerate(spawn):
        if token == "--skill" and i + 1 < len(spawn):
            return spawn[i + 1]
        if token.startswith("--skill="):
            return token.partition("=")[2]
    return None


def _with_skill(spawn: Sequence[str], skill: Path | None) -> tuple[str, ...]:
    """The spawn line with its primary ``--skill`` repointed (or added) when ``skill`` is set."""
    if skill is None:
        return tuple(spawn)
    out = list(spawn)
    for i, token in enumerate(out):
        if token == "--skill" and i + 1 < len(out):
            out[i + 1] = str(skill)
            return tuple(out)
        if token.startswith("--skill="):
            out[i] = f"--skill={skill}"
            return tuple(out)
    return (*out, "--skill", str(skill))


def agent_for(suite: Suite, spawn: Sequence[str] | None, variant: str | None = None,
              secrets: Sequence[str] = ()) -> Agent:
    """The agent ``run``/``measure`` spawn: the spawn line, else the suite's scripted agents.

    ``secrets`` are the variables ``--secret`` names; their values are known from here on,
    to this process's redactor and to every mission's capture.
    """
    declared = tuple(declared_secrets(secrets))
    remember(declared)
    secret_names = tuple(dict.fromkeys(secrets))
    if spawn:
        if variant is not None:
            raise EvalkitError("--agent picks one of the suite's scripted agents; "
                               "it cannot be combined with a spawn line")
        return Agent(spawn=tuple(spawn), secret_names=secret_names, declared=declared)
    agents = suite.resolve("agents")
    skill = suite.resolve("skill")
    if agents is None:
        raise EvalkitError(f"suite '{suite.name}' names no scripted agents (top-level 'agents:'); "
                           "give the agent to run after --, e.g. -- my-agent --flag")
    if not agents.is_dir():
        raise EvalkitError(f"suite '{suite.name}': agents folder {agents} does not exist")
    extra: list[str] = []
    plane = suite.extras.get("plane")
    if plane is not None:
        if plane not in PLANES:
            raise EvalkitError(f"suite '{suite.name}': unknown plane {plane!r}; "
                               f"the built-in runtime knows {', '.join(PLANES)}")
        from evalkit.planes import stub_command

        extra += ["--mcp-stdio", stub_command()]
    if suite.extras.get("profile") is not None:
        extra += ["--profile", str(suite.extras["profile"])]
    if variant is not None:  # a typo would be N warnings and "nothing to score"
        held = script_variants(agents, (m.key for m in suite.missions))
        if variant not in held:
            stem = "<key>" if variant == GOOD else f"<key>.{variant}"
            raise EvalkitError(f"suite '{suite.name}': {agents} holds no scripted agent "
                               f"{stem}.yaml for any mission; --agent takes "
                               f"{', '.join(held) or 'nothing here'}")
        variant = None if variant == GOOD else variant
    require(BUILTIN_RUNTIME)  # each mission would fail alike, one process at a time
    # Absolute: the agent's working directory may be a staged fixtures folder.
    return Agent(agents=agents.resolve(), variant=variant, extra=tuple(extra),
                 skill=skill.resolve() if skill is not None else None,
                 secret_names=secret_names, declared=declared)


def make_jobs(suite: Suite, missions: Sequence[Mission], agent: Agent, out: Path, *,
              timeout_s: float, flags: Sequence[str] = (), label: str = "",
              env: Mapping[str, str] | None = None) -> tuple[list[Job], dict[str, str]]:
    """One job per mission (folder ``out/<key>``), and the missions that cannot run, with why.

    ``env`` is added to every agent's environment (``staging.serving`` says what a served
    run adds). A suite with fixtures stages them per mission (``staging.fixture_plan``).
    """
    fixtures = suite.resolve("fixtures")
    only = staging.fixture_plan(suite, missions)
    cwd = str(Path.cwd())
    jobs: list[Job] = []
    skipped: dict[str, str] = {}
    for m in missions:
        argv = agent.argv(m)
        if argv is None:
            stem = m.key if agent.variant is None else f"{m.key}.{agent.variant}"
            skipped[m.key] = f"no scripted agent {stem}.yaml in {agent.scripts}"
            continue
        jobs.append(Job(key=m.key, objective=m.prompt, spawn=anchored(argv, Path(cwd)),
                        flags=(*flags, *(check_flags(m) if agent.builtin else ()), *m.flags),
                        out=str((out / m.key).resolve()), timeout_s=timeout_s, cwd=cwd,
                        stage=str(fixtures.resolve()) if fixtures is not None else None,
                        stage_only=only.get(m.key), env=tuple(sorted((env or {}).items())),
                        secrets=agent.secrets(), label=f"{label}{m.key}"))
    return jobs, skipped


def check_flags(m: Mission) -> tuple[str, ...]:
    """The flags the checks a mission sets ask the built-in agent for (its budgets)."""
    from evalkit.eval.checks import configured

    return tuple(flag for check in configured(m.settings) if check.spawn_flags is not None
                 for flag in check.spawn_flags(m))


# -- provenance and the gate ------------------------------------------------------------------


def gate(suite_path: str | Path, *, strict: bool = False) -> Suite:
    """Load and check; an ungradeable suite is refused before a model is spent (exit 1)."""
    return gradeable(suite_path, refusing="refusing to spend a model on it", strict=strict)


def _ours(out: Path) -> bool:
    """Whether ``out`` is a folder ``run`` or ``measure`` wrote whole (its run.json or
    matrix.json says so), which ``--overwrite`` may replace."""
    for name, fmt in ((RUN_FILE, RUN_FORMAT), (MATRIX_FILE, MATRIX_FORMAT)):
        try:
            data = json.loads((out / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("format") == fmt:
            return True
    return False


def fresh_folder(out: Path, overwrite: bool = False) -> Path:
    """The output folder, created; refuses one that already holds something, unless
    ``overwrite`` and it is an earlier run's or measure's output, which is then moved
    aside in one rename (a reader never sees the two mixed) and deleted."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise EvalkitError(f"--out {out} already exists and is not empty; choose a new "
                               "folder, or give --overwrite to replace an earlier output "
                               "(runs are never mixed)")
        if not out.is_dir() or out.is_symlink() or not _ours(out):
            raise EvalkitError(f"--overwrite refuses {out}: it is not a folder evalkit run or "
                               "measure wrote (no run.json or matrix.json of theirs), so what "
                               "it holds would be lost; choose a new folder")
        aside = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        try:
            out.rename(aside)
        except OSError as exc:
            raise EvalkitError(f"cannot move {out} aside to replace it: "
                               f"{exc.strerror or exc}") from None
        shutil.rmtree(aside, ignore_errors=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EvalkitError(f"cannot create --out {out}: {exc.strerror or exc}") from None
    return out


def spawn_value(spawn: Sequence[str], flag: str) -> str | None:
    """The value a spawn line gives ``flag`` (``--flag V`` or ``--flag=V``), if any."""
    for i, token in enumerate(spawn):
        if token == flag and i + 1 < len(spawn):
            return spawn[i + 1]
        if token.startswith(flag + "="):
            return token.partition("=")[2]
    return None


def agent_identity(agent: Agent, spawn: Sequence[str] | None, variant: str | None
                   ) -> tuple[str | None, str | None, str | None]:
    """(provider, model, endpoint) as far as the command line and the environment say:
    what a report's provenance names, for ``run`` as for ``measure``. Read from the spawn
    line as provenance writes it (credentials withheld), and the environment's values
    scrubbed the same way: a model name may be a declared secret too."""
    if agent.builtin:
        return "scripted", f"agents:{variant or 'good'}", None
    line = agent.describe() if spawn else []
    redactor = Redactor(extra_values=[*secret_values(list(spawn or ())), *agent.declared])

    def scrubbed(name: str) -> str | None:
        value = os.environ.get(name)
        return redactor.redact(strip_url(value)) if value else None

    return (spawn_value(line, "--provider") or scrubbed("EVALKIT_PROVIDER"),
            spawn_value(line, "--model") or scrubbed("EVALKIT_MODEL"),
            spawn_value(line, "--api-base") or scrubbed("EVALKIT_API_BASE"))


def commit() -> str | None:
    """``git rev-parse HEAD`` of the working directory, when it is a repository."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


#: Writes ``report.json`` and ``report.md`` for one scored folder. Rendering is the report
#: layer's job, so the command passes it in (``evalkit.eval`` never imports ``evalkit.report``).
ReportWriter = Callable[[dict[str, Any], Path], None]


def json_text(data: Any) -> str:
    """Provenance files: the same JSON style as the reports."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, data: Any) -> None:
    replace_file(path, json_text(data))


def score_folder(suite: Suite, folder: Path, split: str,
                 captures: dict[str, dict[str, Any] | None] | None = None,
                 pricing: Pricing | None = None) -> dict[str, Any]:
    """Score the mission folders under ``folder`` and annotate the taxonomy.

    With ``captures`` (the missions just ran) the folder is sealed first and every
    stream must carry a seal; without them (a rescore) streams are checked as ``score``
    checks them. ``pricing`` prices every run from its recorded tokens.
    """
    sealed = False
    if captures is not None:
        signer, _ = signer_or_none()
        if signer is not None:
            seal_folder(folder, sorted(p for p in folder.iterdir()
                                       if (p / MANIFEST_FILE).is_file()), signer)
            sealed = True
        judge_folder(suite, folder, split)
    checker = Checker.for_scoring([folder], require_signed=sealed)
    report = score(suite, runs=folder, split=split, checker=checker, pricing=pricing).to_dict()
    return taxonomy.annotate(report, folder, captures)


def judge_folder(suite: Suite, folder: Path, split: str) -> None:
    """``evalkit judge`` of missions just run, when the suite has judged ones: the answers
    are graded (once, recorded beside each run) before the folder is scored, so a fresh
    run reads as a rescore of it would. A judge that cannot be asked (no endpoint, say)
    leaves its missions "not judged", which the report says; the run is kept."""
    if not any("judge" in m.settings for m in missions_in(suite, split)):
        return
    subprocess.run([sys.executable, "-m", "evalkit.cli", "judge", str(folder.resolve()),
                    "--suite", str(suite.path), "--split", split],
                   stdin=subprocess.DEVNULL, capture_output=True, check=False)


@dataclass(frozen=True)
class Spending:
    """What ``--pricing``, ``--max-tokens`` and ``--max-cost`` ask of a run or measure: the
    built-in agent is spawned with them, and every run is priced at the file's prices."""

    pricing: Path | None = None
    max_tokens: int | None = None
    max_cost: float | None = None

    def check(self, agent: Agent, missions: Sequence[Mission] = ()) -> Pricing | None:
        """The loaded prices; refuses budgets it cannot pass on, one sentence each (a
        mission's own ``max_cost`` too: the built-in agent could not start without prices)."""
        if self.max_tokens is not None and self.max_tokens < 1:
            raise EvalkitError("--max-tokens must be 1 or more")
        if self.max_cost is not None and not self.max_cost > 0:
            raise EvalkitError("--max-cost must be an amount more than 0")
        budgets = self.max_tokens is not None or self.max_cost is not None
        if budgets and not agent.builtin:
            raise EvalkitError("--max-tokens and --max-cost are passed to the built-in agent; "
                               "put your agent's own budget flags on its spawn line")
        if self.max_cost is not None and self.pricing is None:
            raise EvalkitError("--max-cost needs prices: give --pricing FILE")
        dear = next((m.key for m in missions if m.max_cost is not None), None)
        if dear is not None and agent.builtin and self.pricing is None \
                and not os.environ.get("EVALKIT_PRICING"):
            raise EvalkitError(f"mission {dear!r} sets max_cost, which the built-in agent can "
                               "hold only with prices: give --pricing FILE")
        if self.pricing is None:
            return None
        from evalkit.pricing import load

        return load(self.pricing)

    def agent(self, agent: Agent) -> Agent:
        """The built-in agent told the prices and budgets (a spawn line is left as it is)."""
        if not agent.builtin:
            return agent
        extra = list(agent.extra)
        if self.pricing is not None:
            extra += ["--pricing", str(Path(self.pricing).resolve())]
        if self.max_tokens is not None:
            extra += ["--max-tokens", str(self.max_tokens)]
        if self.max_cost is not None:
            extra += ["--max-cost", repr(float(self.max_cost))]
        return replace(agent, extra=tuple(extra))

    def describe(self) -> dict[str, Any]:
        return {"pricing": str(self.pricing) if self.pricing is not None else None,
                "max_tokens": self.max_tokens, "max_cost": self.max_cost}


# -- run --------------------------------------------------------------------------------------


@dataclass
class RunResult:
    out: Path
    report: dict[str, Any]
    provenance: dict[str, Any]


def run_suite(suite_path: str | Path, out: Path, *, write: ReportWriter,
              spawn: Sequence[str] | None = None,
              split: str = "all", jobs: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
              variant: str | None = None, executor: str = "local", ray_address: str | None = None,
              progress: bool = True, warn: Callable[[str], None] = lambda _: None,
              secrets: Sequence[str] = (), overwrite: bool = False,
              spending: Spending | None = None) -> RunResult:
    """Check, spawn every mission, score, and write the folder ``evalkit run`` promises.

    A suite's fixtures are staged per mission and its server (``serve:``) runs for the
    whole run — see ``evalkit.eval.staging``.
    """
    suite = gate(suite_path)
    if timeout_s <= 0:
        raise EvalkitError(f"--timeout must be more than 0 seconds, not {timeout_s:g}")
    check_executor(executor)
    missions = missions_in(suite, split)
    agent = agent_for(suite, spawn, variant, secrets)
    spending = spending or Spending()
    pricing = spending.check(agent, missions)
    agent = spending.agent(agent)
    staging.fixture_plan(suite, missions)  # refused before --out is made
    staging.serve_spec(suite)
    out = fresh_folder(out, overwrite)
    captures: dict[str, dict[str, Any] | None] = {}
    with staging.serving(suite) as served, executor_session(executor, ray_address):
        planned, skipped = make_jobs(suite, missions, agent, out, timeout_s=timeout_s,
                                     env=served.env)
        for key, why in skipped.items():
            warn(f"warning: mission {key!r} is not run: {why}")
        with Progress(len(planned), f"run {suite.name}", enabled=progress,
                      judge=mission_judge(suite)) as shown:
            done = execute(planned, workers=jobs, executor=executor, progress=shown,
                           ray_address=ray_address)
            captures.update((job.key, c) for job, c in zip(planned, done, strict=True))
            if agent.builtin and agent.skill is not None:
                # The runtime may not honour --skill yet: it then refuses at startup
                # (instantly), and those missions run again without the manifest, noted.
                refused = {job.key: said for job, capture in zip(planned, done, strict=True)
                           if (said := refusal(capture, Path(job.out))) and "--skill" in said}
                if refused:
                    said = next(iter(refused.values()))
                    note = (f"the agent refused --skill at startup ({said}); "
                            "ran without the manifest")
                    warn(f"note: {note}")
                    agent = agent.with_skill(None, note)
                    again = [job for job in make_jobs(suite, missions, agent, out,
                                                      timeout_s=timeout_s, env=served.env)[0]
                             if job.key in refused]
                    for job in again:
                        shutil.rmtree(job.out)
                    shown.add(len(again))
                    redone = execute(again, workers=jobs, executor=executor, progress=shown,
                                     ray_address=ray_address)
                    captures.update((j.key, c) for j, c in zip(again, redone, strict=True))
    report = score_folder(suite, out, split, {m.key: captures.get(m.key) for m in missions},
                          pricing)
    write(report, out)
    provider, model, endpoint = agent_identity(agent, spawn, variant)
    provenance = {
        "format": RUN_FORMAT, "version": RUN_VERSION,
        "suite": suite.name, "suite_path": str(suite.path), "commit": commit(), "date": now(),
        "provider": provider, "model": model, "endpoint": endpoint,
        "spawn": agent.describe(), "builtin": agent.builtin,
        "agent": (variant or "good") if agent.builtin else None, "jobs": jobs,
        "executor": executor, "timeout": timeout_s, "split": split,
        "missions": [m.key for m in missions], "not_run": skipped,
        "notes": list(agent.notes)}
    if pricing is not None or spending.max_tokens is not None or spending.max_cost is not None:
        provenance["spending"] = spending.describe()
    if served.url is not None:
        provenance["served"] = served.url
    write_json(out / RUN_FILE, provenance)
    return RunResult(out, report, provenance)


__all__ = ["Agent", "DEFAULT_TIMEOUT_S", "EXECUTORS", "Job", "Progress", "ReportWriter",
           "RunResult", "Spending", "Steer", "agent_for", "command_line", "execute",
           "executor_session", "gate",
           "make_jobs", "refusal", "run_mission", "run_suite", "secret_values", "stop_all",
           "strip_url", "withhold"]
