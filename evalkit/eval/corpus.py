"""``record-corpus``: regenerate ``recordings/`` from the shipped suites' scripted agents.

Every shipped suite (a folder under ``suites/`` with a suite file and an
``agents:`` folder) is run once per agent variant its agents folder holds —
``good`` (``<key>.yaml``) and each other variant (``<key>.<variant>.yaml``,
e.g. ``bad``) — through ``evalkit run``: the built-in runtime as a subprocess
per mission, the suite's plane, fixtures and server, grounding and the store,
with only the model scripted. Nothing here imports ``evalkit.runtime``.

Each run is written in place, ``OUT/<suite>/<variant>/`` being the ``--out``
of ``evalkit run``, so ``evalkit score --suite suites/S --runs OUT/S/V`` finds
one run per mission key. Then the folder is tidied: what a reader of a
recording needs stays, what only the recording machine needed goes
(``DROPPED``), ``command.json``'s paths are made relative to the repository
(it is the harness's note of the spawn line, not a record of the run), and the
variant is scored into ``report.json``/``report.md`` exactly as ``evalkit score
--report`` would. Records (``events.jsonl``, ``meta.json``, ``model.jsonl``,
``tools.jsonl``, the audit log) are never rewritten.

The corpus is signed with a key made for each regeneration: the recording
runs use it as their state folder's key (so the run store seals its runs
with it), the tidied mission folders and each variant folder are sealed with
it again, and its public key is written to ``OUT/evalkit.pub``, which
``score`` and ``verify`` trust for what lies below it. The private key is
never kept. A partial regeneration (``--suite``) first checks the suites it
leaves alone against the previous key, then signs them again with the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.harness_files import CAPTURE_FILE, REPORT_FILE, REPORT_MD, RUN_FILE
from evalkit.eval.runner import GOOD, script_variants
from evalkit.eval.score import score
from evalkit.eval.suite import SUITE_FILES, Suite, load_suite
from evalkit.forkserver import client as forkserver
from evalkit.pricing import EXAMPLE
from evalkit.pricing import load as load_pricing
from evalkit.store import seal
from evalkit.store.replace import replace_file
from evalkit.store.signing import PUBLIC_FILE, Signer, Trust, read_public_key, write_signer
from evalkit.store.state import HOME_ENV, KEYS

DEFAULT_OUT = "recordings"
#: The prices the corpus's reports cost its runs at, from the tokens the scripted agents
#: declare: evalkit's example file (invented prices), so that a report has a cost to show.
PRICING = EXAMPLE
#: How the README names it (the repository-relative path).
PRICING_SHOWN = "evalkit/data/pricing.example.yaml"
DEFAULT_SUITES = "suites"
#: Missions at once: one per core of a two-core machine.
DEFAULT_JOBS = 2
#: A scripted mission takes seconds; one that outlives this is stuck, not slow.
MISSION_TIMEOUT_S = 120.0
README = "README.md"
#: The first line of the corpus README: how an existing ``--out`` is known to be a corpus.
TITLE = "# recordings/: the recorded corpus"

#: Folders and files of a mission folder the corpus drops: the staged fixtures (the
#: suite's own, copied), pending approval requests of the recording host, run locks.
DROPPED = ("work", "approvals", "lock")
#: Files ``evalkit run`` writes at the top of its ``--out`` that the corpus drops
#: (provenance of one host and one moment) or writes again (the score report).
DROPPED_TOP = (RUN_FILE, REPORT_FILE, REPORT_MD)

#: Environment the recording runs never inherit: where runs, approvals and audit logs
#: go, and endpoint settings, are the corpus's to decide.
_ENV_PREFIX = "EVALKIT_"
_ENV_KEPT = ("EVALKIT_DEBUG",)

#: Writes ``report.json`` and ``report.md`` (the report layer's job, handed in).
ReportWriter = Callable[[dict[str, Any], Path], Any]


@dataclass(frozen=True)
class Target:
    """One ``evalkit run`` of the corpus: a suite with one of its agent variants."""

    suite: Suite
    variant: str

    @property
    def folder(self) -> str:
        """The suite's folder name: its place under ``suites/`` and under the corpus."""
        return self.suite.path.parent.name

    @property
    def name(self) -> str:
        return f"{self.folder}/{self.variant}"


@dataclass
class Recorded:
    """One suite/variant written: its folder, verdicts and how long it took."""

    target: Target
    folder: Path
    report: dict[str, Any]
    seconds: float

    @property
    def passed(self) -> list[str]:
        return [v["key"] for v in self.report["verdicts"] if v["passed"]]

    @property
    def failed(self) -> list[str]:
        return [v["key"] for v in self.report["verdicts"] if not v["passed"]]

    @property
    def unexpected(self) -> list[str]:
        """Good missions that failed, other variants' missions that passed."""
        return self.failed if self.target.variant == GOOD else self.passed


@dataclass
class Corpus:
    out: Path
    recorded: list[Recorded] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.out.rglob("*") if p.is_file())


# -- what to record ---------------------------------------------------------------------------


def shipped(suites_dir: Path, names: Sequence[str] = ()) -> list[Suite]:
    """The shipped suites (folders holding a suite file and naming ``agents:``), by name."""
    if not suites_dir.is_dir():
        raise EvalkitError(f"no suites folder at {suites_dir}; give --suites DIR")
    found: dict[str, Suite] = {}
    for folder in sorted(p for p in suites_dir.iterdir() if p.is_dir()):
        if not any((folder / f).is_file() for f in SUITE_FILES):
            continue
        suite = load_suite(folder)
        if suite.resolve("agents") is not None:
            found[folder.name] = suite
    unknown = [n for n in names if n not in found]
    if unknown:
        raise EvalkitError(f"no shipped suite named {', '.join(unknown)} under {suites_dir} "
                           f"(it has: {', '.join(found) or 'none'})")
    return [found[n] for n in (dict.fromkeys(names) if names else found)]


def variants(suite: Suite) -> list[str]:
    """``good`` (when ``<key>.yaml`` scripts exist), then every other variant, sorted."""
    agents = suite.resolve("agents")
    if agents is None or not agents.is_dir():
        raise EvalkitError(f"suite '{suite.name}': agents folder {agents} does not exist")
    seen = script_variants(agents, (m.key for m in suite.missions))
    if not seen:
        raise EvalkitError(f"suite '{suite.name}': {agents} holds no scripted agent for any "
                           "of its missions (<key>.yaml or <key>.<variant>.yaml)")
    return seen


def plan(suites_dir: Path, names: Sequence[str] = ()) -> list[Target]:
    return [Target(s, v) for s in shipped(suites_dir, names) for v in variants(s)]


# -- recording --------------------------------------------------------------------------------


def record_corpus(out: Path, *, write: ReportWriter, suites_dir: Path = Path(DEFAULT_SUITES),
                  names: Sequence[str] = (), jobs: int = DEFAULT_JOBS,
                  timeout_s: float = MISSION_TIMEOUT_S,
                  on_done: Callable[[Recorded], None] = lambda _: None,
                  warn: Callable[[str], None] = lambda _: None) -> Corpus:
    """Record every target into ``out`` (each suite replaced as a whole), then the README.

    The recordings run with the repository (the suites folder's parent) as working
    directory. A suite whose recording fails is put back as it was.
    """
    if jobs < 1:
        raise EvalkitError(f"--jobs must be 1 or more, not {jobs}")
    suites_dir = suites_dir.resolve()
    targets = plan(suites_dir, names)
    out = _corpus_folder(out)
    root = suites_dir.parent
    recorded = {t.folder for t in targets}
    _check_kept(out, recorded)
    corpus = Corpus(out)
    t0 = time.monotonic()
    signer = Signer.generate()
    with tempfile.TemporaryDirectory(prefix="evalkit-corpus-home-") as home, \
            forkserver.named_to_children() as forking:
        write_signer(signer, Path(home) / KEYS)
        try:
            for folder in dict.fromkeys(t.folder for t in targets):
                ours = [t for t in targets if t.folder == folder]
                corpus.recorded += _record_suite(ours, out / folder, root=root, home=Path(home),
                                                 signer=signer, jobs=jobs, timeout_s=timeout_s,
                                                 write=write, on_done=on_done, warn=warn,
                                                 forking=forking)
        finally:  # what was recorded with the new key, and what was not, under one key
            if corpus.recorded:
                done = {r.target.folder for r in corpus.recorded}
                for kept in sorted(p for p in out.iterdir() if p.is_dir() and p.name not in done):
                    seal.reseal(kept, signer)
                replace_file(out / PUBLIC_FILE, signer.public_pem())
    if not names:  # a full regeneration: suites no longer shipped leave the corpus
        for stale in sorted(p for p in out.iterdir() if p.is_dir() and p.name not in recorded):
            warn(f"note: {stale.name} is no longer a shipped suite; removed from {out}")
            shutil.rmtree(stale)
    replace_file(out / README, readme(out))
    corpus.seconds = time.monotonic() - t0
    return corpus


def _check_kept(out: Path, recorded: set[str]) -> None:
    """Refuse to sign again, with a new key, suites left alone that fail their seals."""
    kept = [p for p in sorted(out.iterdir()) if p.is_dir() and p.name not in recorded
            and not p.name.startswith(".")]
    if not kept or not (out / PUBLIC_FILE).is_file():
        return
    trust = Trust()
    trust.add(read_public_key(out / PUBLIC_FILE), str(out / PUBLIC_FILE))
    findings = seal.verify_paths(kept, seal.Checker(trust))
    bad = [f for f in findings if f.word == seal.TAMPERED]
    if bad:
        where = bad[0].path.relative_to(out.absolute()).as_posix()
        raise EvalkitError(f"{out}/{where} was altered after it was recorded "
                           f"({bad[0].problems[0]}); regenerate its suite too "
                           f"(--suite {where.split('/')[0]}) or restore it")


def _corpus_folder(out: Path) -> Path:
    """``out``, created; refuses a folder holding something other than a corpus."""
    if out.exists():
        if not out.is_dir():
            raise EvalkitError(f"--out {out} is a file; give a folder for the corpus")
        marker = out / README
        is_corpus = marker.is_file() and marker.read_text(
            encoding="utf-8", errors="replace").startswith(TITLE)
        if any(out.iterdir()) and not is_corpus:
            raise EvalkitError(f"--out {out} holds something that is not a recorded corpus "
                               f"(no {README} starting {TITLE!r}); give a new folder or "
                               "an existing corpus")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _record_suite(targets: list[Target], folder: Path, *, root: Path, home: Path,
                  signer: Signer, jobs: int, timeout_s: float, write: ReportWriter,
                  on_done: Callable[[Recorded], None],
                  warn: Callable[[str], None], forking: Mapping[str, str]) -> list[Recorded]:
    """Every variant of one suite into ``folder``; the previous recordings come back on failure."""
    aside = folder.with_name(f".{folder.name}.previous")
    if aside.exists():
        shutil.rmtree(aside)
    if folder.exists():
        folder.rename(aside)
    try:
        done = []
        for target in targets:
            dest = folder / target.variant
            t0 = time.monotonic()
            record_variant(target, dest, root=root, jobs=jobs, timeout_s=timeout_s, warn=warn,
                           home=home, forking=forking)
            tidy(dest, root)
            missions = sorted(p for p in dest.iterdir() if p.is_dir())
            for mission in missions:
                seal.seal_mission(mission, signer)
            seal.seal_folder(dest, missions, signer)
            trust = Trust()
            trust.add(signer.public_raw, "the corpus key")
            report = score(target.suite, runs=dest, pricing=load_pricing(PRICING),
                           checker=seal.Checker(trust, require_signed=True)).to_dict()
            write(report, dest)
            done.append(Recorded(target, dest, report, time.monotonic() - t0))
            on_done(done[-1])
    except BaseException:
        if folder.exists():
            shutil.rmtree(folder)
        if aside.exists():
            aside.rename(folder)
        raise
    if aside.exists():
        shutil.rmtree(aside)
    return done


def record_variant(target: Target, dest: Path, *, root: Path, jobs: int = DEFAULT_JOBS,
                   timeout_s: float = MISSION_TIMEOUT_S,
                   warn: Callable[[str], None] = lambda _: None,
                   home: Path | None = None, forking: Mapping[str, str] | None = None) -> None:
    """``evalkit run`` of one suite with one agent variant into ``dest``, from ``root``
    (with ``home`` as the state folder: where the key it signs with is, and ``forking``
    saying which fork server its missions come from: ``named_to_children``)."""
    argv = [sys.executable, "-m", "evalkit.cli", "run", "--suite", str(target.suite.path),
            "--out", str(dest.resolve()), "--jobs", str(jobs), "--timeout", f"{timeout_s:g}",
            "--quiet", "--allow-failures"]
    if target.variant != GOOD:
        argv += ["--agent", target.variant]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_ENV_PREFIX) or k in _ENV_KEPT}
    if home is not None:
        env[HOME_ENV] = str(home)
    env.update(forking or {})
    done = subprocess.run(argv, cwd=root, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=False)
    for line in done.stderr.splitlines():
        if line.startswith(("warning:", "note:")):
            warn(f"{target.name}: {line}")
    if done.returncode != 0 or not (dest / REPORT_FILE).is_file():
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise EvalkitError(f"recording {target.name} failed (evalkit run exited "
                           f"{done.returncode}): {said[-1] if said else 'it said nothing'}")


def tidy(dest: Path, root: Path) -> None:
    """Drop what only the recording host needed; make ``command.json`` repository-relative."""
    for name in DROPPED_TOP:
        with contextlib.suppress(FileNotFoundError):
            (dest / name).unlink()
    for mission in sorted(p for p in dest.iterdir() if p.is_dir()):
        for name in DROPPED:
            for path in [mission / name, *mission.glob(f"runs/*/{name}")]:
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
        command = mission / CAPTURE_FILE
        if command.is_file():
            data = json.loads(command.read_text(encoding="utf-8"))
            replace_file(command, json.dumps(relativise(data, root), indent=2,
                                             ensure_ascii=False) + "\n")


def relativise(value: Any, root: Path) -> Any:
    """Every string in ``value`` with this Python shown as ``python`` and paths under
    ``root`` relative to it (``root`` itself as ``.``)."""
    if isinstance(value, dict):
        return {k: relativise(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [relativise(v, root) for v in value]
    if not isinstance(value, str):
        return value
    for python in dict.fromkeys((shlex.quote(sys.executable), sys.executable)):
        value = value.replace(python, "python")
    base = str(root.resolve())
    if value == base:
        return "."
    return value.replace(base + os.sep, "")


# -- the README -------------------------------------------------------------------------------


def readme(out: Path) -> str:
    """The corpus README: fixed prose and a table of what ``out`` holds (no times, no ids)."""
    rows = []
    for report_file in sorted(out.glob("*/*/report.json")):
        report = json.loads(report_file.read_text(encoding="utf-8"))
        verdicts = report["verdicts"]
        passed = sum(1 for v in verdicts if v["passed"])
        suite, variant = report_file.parent.parent.name, report_file.parent.name
        rows.append(f"| `{suite}/{variant}` | {len(verdicts)} | {passed} | "
                    f"{len(verdicts) - passed} | `evalkit score --suite suites/{suite} "
                    f"--runs recordings/{suite}/{variant} --pricing {PRICING_SHOWN}` |")
    table = "\n".join(["| recordings | missions | pass | fail | score them |",
                       "|---|---|---|---|---|", *rows])
    return _README.format(title=TITLE, table=table)


_README = """{title}

Every (suite, mission, agent) evalkit ships, run for real: the built-in
runtime (`evalkit mission`), the suite's tool plane (the stub MCP server, or
the built-in tools over staged fixtures and the pages server), the sandbox,
grounding, governance and the run store — with only the model scripted, by
the suite's agents (`suites/<suite>/agents/<key>.yaml` is the good agent,
`<key>.<variant>.yaml` the others, e.g. `bad`). CI scores, replays and
re-runs these with no model, no key and no network (`tests/corpus/`).

This file is written by `evalkit record-corpus`; edit
`evalkit/eval/corpus.py` to change it.

## What is here

{table}

Good recordings all pass; every bad one fails for the reason its mission
exists to catch (the tests assert the reason, not just the bit).

Each scripted reply declares the usage a provider would report (`usage:` in
the agent's script: a prompt that grows by 250 tokens a turn from 900, and a
completion of one token per 4 characters of the reply; no tokenizer counted
them), so the runs record token counts. `report.json` prices them at scoring
time with `evalkit/data/pricing.example.yaml` (invented prices for the
scripted agents), which is why each command above names it: the recordings
themselves carry tokens, never a price, and are never rewritten when prices
change (docs/MEASURE.md, "Cost").

```
recordings/evalkit.pub            the public key every seal below was signed with
recordings/<suite>/<variant>/
  manifest.json                   the folder's seal: each mission's seal and stream
  report.json, report.md          evalkit score --report of this folder
  <key>/                          one mission: what `evalkit run` writes for it
    manifest.json                 the mission's seal: every file below, signed
    events.jsonl                  the stream as the harness read it from the agent
    command.json                  the spawn line, exit code, wall time (paths relative
                                  to the repository, the interpreter shown as python)
    stdout.txt, stderr.txt        the runtime's narration and notes (small)
    audit/<run_id>.jsonl          the governance audit log of the run
    judge/                        for a mission with a judge: what its scripted judge said
      judge.jsonl                   each judgment: request, reply, grade, reasons (EVAL.md,
                                    "Model-graded rubrics"), recorded by `evalkit judge`
      manifest.json                 the judgments' own seal (kind judgments)
    runs/<run_id>/                the run directory (docs/REPLAY.md):
      manifest.json                 the run store's seal, made when the run closed
      events.jsonl                  every record in its {{seq, at, record}} envelope
      meta.json                     objective, flags, outcome
      model.jsonl                   every model call: the whole request, the reply
      tools.jsonl                   the catalogue, then every tool call and its result
```

Dropped from what `evalkit run` leaves: `work/` (the staged copy of the
suite's fixtures, the agent's working directory — the suite has the
originals, and `tools.jsonl` holds everything the agent saw), `approvals/`
(the recording host's pending approval requests), `runs/<run_id>/lock`,
`run.json` (the host, commit and date of one regeneration). `report.json` and
`report.md` are written by scoring this folder, as CI does.

Every file is sealed (docs/GOVERNANCE.md, "Tamper-evident recordings"):
`evalkit verify recordings` says whether anything changed since it was
recorded, and `evalkit score` scores a stream that changed as an
infrastructure failure, never as the run it claims to be. Each regeneration
signs with a key of its own; only its public half, `evalkit.pub`, is kept.

## Using it

```bash
evalkit verify recordings                                          # every seal checked
evalkit score --suite suites/stub --runs recordings/stub/good      # verdicts, no model
evalkit replay recordings/stub/good/chaining/runs/run_* --skill suites/stub/SKILL.md
evalkit regrade recordings/stub/good --skill NEW.md --out regraded
```

Replay from the repository root and give the suite's `--skill`: the recorded
`meta.json` names the manifest by the absolute path it had on the machine
that recorded it.

## Regenerating

```bash
evalkit record-corpus                 # every suite, every agent variant, --jobs 2
evalkit record-corpus --suite coding  # one suite (all its variants)
```

Run it from the repository root after any change to the runtime (the loop,
its prompts, a tool, governance, grounding), to a suite (missions, skill,
fixtures) or to a scripted agent, and commit the result with that change:
`pytest tests/corpus` fails until the corpus and the harness agree again.
The whole corpus regenerates in about a minute on two cores. Each suite is
replaced as a whole (put back as it was if its recording fails), and the
command exits 1 when a good recording fails or a bad one passes.

Two regenerations differ only in ids and times (and so in every seal, and
in the key that signs them): run ids (folder and file
names, `run_id`), `at`/`created_at`/`updated_at`/`time` stamps, `elapsed_s`,
`duration_s` and `wall_s`, approval ids, the `fd:N` the stream was piped
through, timings a tool printed (e.g. `passed in 0.02s`) and memory
addresses pytest printed in a failing test's traceback (`coding/bad/rename`:
`<list_iterator object at 0x…>`). The only machine-specific strings are
absolute paths the runtime writes down as it ran: `meta.json` `flags.script`,
`flags.skills`, `flags.root` and `flags.mcp_stdio` (the interpreter), and
`mission_started` `audit_ref`. They are recorded facts about the run and are
not rewritten; replay ignores `root` and `script` and takes `--skill` from
its own command line. Record on a machine with bubblewrap (`bwrap`): the
runs say `sandbox: bwrap`, and the packs' skills refuse to start without it.
"""


__all__ = ["DEFAULT_JOBS", "DEFAULT_OUT", "DEFAULT_SUITES", "GOOD", "Corpus", "Recorded",
           "Target", "plan", "readme", "record_corpus", "record_variant", "relativise",
           "shipped", "tidy", "variants"]
