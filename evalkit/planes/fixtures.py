"""Staging a mission pack's fixtures into a scratch directory.

A pack keeps small committed data under ``<pack>/fixtures/``. A run never
works on those files in place — a sandboxed mission's root is writable, and
the committed data must stay as committed — so ``stage_fixtures`` copies
them into a scratch directory first.

A pack whose fixtures are git repositories (``coding``) lists them in
``fixtures/fixtures.json`` as ``{"git_repos": ["name", ...]}``: only their
source trees are committed, and staging turns each copy into a real
repository with one commit made by a fixed identity at a fixed date, so the
same tree always gives the same commit id. ``fixtures.json`` and
``build.py`` (a pack's generator of its fixtures) are not staged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError

FIXTURES_DIR = "fixtures"
MANIFEST = "fixtures.json"
#: Names under a fixtures folder that are never staged.
NOT_STAGED = frozenset({MANIFEST, "build.py", "__pycache__", ".pytest_cache", ".ruff_cache",
                        ".benchmarks",
                        ".mypy_cache", ".hypothesis"})

#: Who makes, and when, the one commit of a staged fixture repository.
GIT_NAME = "Evalkit Fixtures"
GIT_EMAIL = "fixtures@evalkit.invalid"
GIT_DATE = "2024-01-15T09:00:00+00:00"
GIT_BRANCH = "main"


def git_identity_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for reproducible commits: fixed identity and dates, no user config."""
    source = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in source.items() if not k.startswith("GIT_")}
    env.update({
        "GIT_AUTHOR_NAME": GIT_NAME, "GIT_AUTHOR_EMAIL": GIT_EMAIL, "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_NAME": GIT_NAME, "GIT_COMMITTER_EMAIL": GIT_EMAIL,
        "GIT_COMMITTER_DATE": GIT_DATE,
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
    })
    return env


def _git(args: list[str], cwd: Path) -> str:
    git = shutil.which("git")
    if git is None:
        raise EvalkitError("git is not installed; the coding fixtures need it")
    config = ["-c", "commit.gpgsign=false", "-c", "core.autocrlf=false",
              "-c", f"init.defaultBranch={GIT_BRANCH}", "-c", "core.fileMode=true"]
    done = subprocess.run([git, *config, *args], cwd=cwd, env=git_identity_env(),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise EvalkitError(f"git {args[0]} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout


def init_repo(path: Path | str, message: str | None = None) -> str:
    """Make ``path`` a git repository holding its files in one reproducible commit; its id."""
    repo = Path(path)
    if (repo / ".git").exists():
        raise EvalkitError(f"{repo} is already a git repository")
    _git(["init", "-q", "-b", GIT_BRANCH], repo)
    _git(["add", "-A"], repo)
    _git(["commit", "-q", "--no-verify", "-m", message or f"{repo.name}: initial import"], repo)
    return _git(["rev-parse", "HEAD"], repo).strip()


def read_manifest(fixtures: Path) -> dict[str, Any]:
    """A fixtures folder's ``fixtures.json`` (``{}`` when it has none)."""
    path = fixtures / MANIFEST
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EvalkitError(f"{path}: not valid JSON ({exc})") from None
    repos = manifest.get("git_repos", []) if isinstance(manifest, dict) else None
    if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
        raise EvalkitError(f"{path}: expected {{\"git_repos\": [\"name\", ...]}}")
    return manifest


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in NOT_STAGED}


def stage_fixtures(pack_dir: Path | str, dest: Path | str, only: str | None = None) -> Path:
    """Copy ``pack_dir/fixtures`` into ``dest`` (absent or empty); returns ``dest``.

    Every fixture repository named in ``fixtures.json`` becomes a real git
    repository in the copy. With ``only``, just that one entry is staged,
    and a directory's contents land in ``dest`` itself — so
    ``stage_fixtures("suites/coding", root, only="redgreen")`` makes the
    mission root the repository.
    """
    fixtures = Path(pack_dir) / FIXTURES_DIR
    if not fixtures.is_dir():
        raise EvalkitError(f"{pack_dir} has no {FIXTURES_DIR}/ folder to stage")
    target = Path(dest)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise EvalkitError(f"cannot stage fixtures into {target}: it exists and is not empty")
    repos = read_manifest(fixtures).get("git_repos", [])
    if only is None:
        shutil.copytree(fixtures, target, symlinks=True, ignore=_ignore, dirs_exist_ok=True)
        for name in repos:
            if not (target / name).is_dir():
                raise EvalkitError(f"{fixtures / MANIFEST} names {name!r}, which is not a folder")
            init_repo(target / name)
        return target
    if only in NOT_STAGED or "/" in only or only in ("", ".", ".."):
        raise EvalkitError(f"{only!r} is not a fixture to stage")
    source = fixtures / only
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, ignore=_ignore, dirs_exist_ok=True)
        if only in repos:
            init_repo(target, f"{only}: initial import")
    elif source.is_file():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / only)
    else:
        available = sorted(p.name for p in fixtures.iterdir() if p.name not in NOT_STAGED)
        raise EvalkitError(f"no fixture {only!r} in {fixtures} (there are: "
                           f"{', '.join(available)})")
    return target
