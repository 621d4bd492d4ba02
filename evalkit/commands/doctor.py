"""``evalkit doctor``: what this machine can and cannot run, one line each, with a fix.

A fresh machine without bubblewrap runs the analyst and coding packs as eight
"infrastructure errors" each, the cause in a file nobody opens. The doctor asks
the same questions the runtime will — is the extra installed, does bwrap build
its sandbox here (the runtime's own probe), can the state folder be written,
does the configured endpoint answer and list the model — before a run does, and
says per pack whether it can run. Exit 1 when something a pack or the base
needs is missing, 0 otherwise; optional things (Ray, Chromium) never fail it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import click

#: Seconds the endpoint is given to answer ``GET /models``.
ENDPOINT_TIMEOUT = 4.0


@dataclass
class Finding:
    name: str
    ok: bool
    said: str
    fix: str = ""
    needed: bool = True  # False: optional, reported but never a failure

    def line(self) -> str:
        word = "ok" if self.ok else ("MISSING" if self.needed else "absent")
        fix = f" — fix: {self.fix}" if self.fix and not self.ok else ""
        return f"{word:<8}{self.name}: {self.said}{fix}"


def _extra(name: str) -> Finding:
    from evalkit.extras import EXTRAS, missing

    lacking = missing(name)
    if not lacking:
        return Finding(f"extra [{name}]", True, f"installed ({', '.join(EXTRAS[name])})",
                       needed=name == "agent")
    return Finding(f"extra [{name}]", False, f"not installed (no {', '.join(lacking)})",
                   f"pip install 'evalkit[{name}]'", needed=False)


def _sandbox() -> Finding:
    """The runtime's own probe: bwrap run with the options every sandboxed call uses."""
    found = shutil.which("bwrap")
    if not found:
        return Finding("bubblewrap", False, "bwrap is not on PATH; packs whose skill says "
                       "sandbox: bwrap cannot run their code tools",
                       "apt-get install bubblewrap (or dnf install bubblewrap)")
    try:
        from evalkit.runtime.tools.sandbox import Bwrap
    except ImportError:
        return Finding("bubblewrap", True, f"{found} is installed (whether it can build its "
                       "sandbox is probed by the agent extra, not installed)")
    problem = Bwrap.unavailable()
    if problem is not None:
        return Finding("bubblewrap", False, problem,
                       "sysctl -w kernel.unprivileged_userns_clone=1 (Debian) or "
                       "kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04)")
    if 0 in (os.getuid(), os.geteuid()):
        from evalkit.runtime.tools.cgroups import find as find_pids_cgroups

        if find_pids_cgroups(os.getuid()) is None:
            return Finding("bubblewrap", False, "bwrap works, but running as root the sandbox "
                           "can cap processes only with a writable pids cgroup, and there is none",
                           "run evalkit as an ordinary user, or mount the pids controller "
                           "writable")
        return Finding("bubblewrap", True, f"{found} builds its sandbox here (as root, with a "
                       "pids cgroup to cap processes)")
    return Finding("bubblewrap", True, f"{found} builds its sandbox here")


def _state() -> Finding:
    from evalkit.store.signing import KEY_FILE, keys_folder
    from evalkit.store.state import state_home

    home = state_home()
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if home.exists():
            with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
                pass
        elif not os.access(probe, os.W_OK):
            raise PermissionError(f"{probe} is not writable")
    except OSError as exc:
        return Finding("state folder", False, f"{home} cannot be written ({exc})",
                       "set EVALKIT_HOME to a folder you can write")
    key = keys_folder() / KEY_FILE
    said = "signing key present" if key.is_file() else "no signing key yet (made on first run)"
    where = "exists" if home.exists() else "will be created"
    return Finding("state folder", True, f"{home} {where} and is writable; {said}")


def _endpoint() -> Finding | None:
    """The endpoint the environment configures, asked for its models; None when none is."""
    base = os.environ.get("EVALKIT_API_BASE")
    if not base:
        return None
    from evalkit.report.folders import safe_endpoint

    shown = safe_endpoint(base)
    model = os.environ.get("EVALKIT_MODEL")
    request = urllib.request.Request(base.rstrip("/") + "/models")
    key = os.environ.get("EVALKIT_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=ENDPOINT_TIMEOUT) as answer:  # noqa: S310
            body = answer.read(1 << 20)
    except urllib.error.HTTPError as exc:
        fix = "check EVALKIT_API_KEY" if exc.code in (401, 403) else "check EVALKIT_API_BASE"
        return Finding("endpoint", False, f"{shown} answered HTTP {exc.code} to GET /models", fix)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        return Finding("endpoint", False, f"{shown} cannot be reached ({why})",
                       "start the server, or fix EVALKIT_API_BASE")
    try:
        listed = [m.get("id") for m in json.loads(body).get("data") or []
                  if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return Finding("endpoint", True, f"{shown} answers, but its /models is not a model list")
    if model and model not in listed:
        return Finding("endpoint", False, f"{shown} answers, but does not list EVALKIT_MODEL "
                       f"{model!r} (it lists {', '.join(map(str, listed[:5])) or 'none'})",
                       "set EVALKIT_MODEL to one it lists")
    said = f"model {model!r} listed" if model else f"{len(listed)} models listed; EVALKIT_MODEL unset"
    return Finding("endpoint", True, f"{shown} answers; {said}")


def _packs(folders: list[Path], agent: Finding, sandbox: Finding) -> list[Finding]:
    """Per suite folder: can the built-in runtime run it here, and if not, why. The sandbox
    is needed when a pack's skill asks for it, not otherwise."""
    import yaml

    out = []
    sandbox.needed = False
    for folder in folders:
        skill = folder / "SKILL.md"
        wants_bwrap = False
        try:
            head = skill.read_text(encoding="utf-8").split("---")[1]
            wants_bwrap = (yaml.safe_load(head) or {}).get("sandbox") == "bwrap"
        except (OSError, IndexError, yaml.YAMLError, AttributeError):
            pass
        lacking = []
        if not agent.ok:
            lacking.append("the agent extra (for its scripted agents and the built-in runtime)")
        sandbox.needed |= wants_bwrap
        if wants_bwrap and not sandbox.ok:
            lacking.append("a working bubblewrap (its skill says sandbox: bwrap)")
        if lacking:
            out.append(Finding(f"pack {folder.name}", False, "cannot run here: needs "
                               + " and ".join(lacking), "see the lines above"))
        else:
            out.append(Finding(f"pack {folder.name}", True, "can run here"
                               + (" (code runs in bwrap)" if wants_bwrap else "")))
    return out


def _suite_folders(given: tuple[Path, ...]) -> list[Path]:
    if given:
        return list(given)
    shipped = Path("suites")
    if not shipped.is_dir():
        return []
    return sorted(p for p in shipped.iterdir() if (p / "missions.yaml").is_file())


@click.command()
@click.option("--suite", "suites", multiple=True, type=click.Path(path_type=Path),
              help="A suite folder to judge (repeatable; default: each folder under ./suites).")
def doctor(suites: tuple[Path, ...]) -> None:
    """Say what this machine can and cannot run, one line each with a fix.

    Exit 1 when something a pack or evalkit itself needs is missing.
    """
    for folder in suites:
        if not folder.is_dir():
            raise click.UsageError(f"--suite {folder} is not a folder")
    findings = [Finding("python", sys.version_info >= (3, 11),
                        f"{sys.version.split()[0]} at {sys.executable}", "use Python 3.11 or newer")]
    agent = _extra("agent")
    sandbox = _sandbox()
    findings += [agent, _extra("ray"), sandbox, _state()]
    endpoint = _endpoint()
    findings.append(endpoint or Finding("endpoint", True, "none configured (EVALKIT_API_BASE "
                                        "unset): scripted agents and your own agents only"))
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                     if shutil.which(n)), None)
    findings.append(Finding("chromium", chromium is not None,
                            chromium or "not found: the report is fine without it; only the "
                            "browser tests and screenshots use it",
                            "apt-get install chromium", needed=False))
    findings += _packs(_suite_folders(suites), agent, sandbox)
    for finding in findings:
        click.echo(finding.line())
    missing = [f for f in findings if f.needed and not f.ok]
    if missing:
        click.echo(f"{len(missing)} missing: {', '.join(f.name for f in missing)}", err=True)
        sys.exit(1)
