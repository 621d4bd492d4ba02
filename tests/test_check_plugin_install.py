"""A check from a third-party package, installed by pip, grades a suite (issue 33 item 4).

tests/test_check_registry.py lays a ``.dist-info`` out by hand; here the package in
``tests/data/evalkit_check_demo`` (one module, and its ``evalkit.checks`` entry point)
is packed as a wheel and installed by pip itself (no index, no network), so what evalkit
reads is what an installer really leaves. The wheel is packed here, with ``zipfile``,
because this machine's setuptools cannot build one without the ``wheel`` package, and
fetching build tools would make the test need the network. evalkit then runs in a fresh
process that finds the package on its path, as after a user's ``pip install``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tests" / "data" / "evalkit_check_demo"
RUNS = ROOT / "recordings" / "stub" / "good"
STUB = ROOT / "suites" / "stub" / "missions.yaml"


def _evalkit(site: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT}"}
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


NAME, VERSION = "evalkit_check_demo", "0.1.0"


def _wheel(folder: Path) -> Path:
    """The package as a pure-Python wheel, with the RECORD pip checks."""
    info = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}.py": (PACKAGE / f"{NAME}.py").read_bytes(),
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: evalkit-check-demo\n"
                            b"Version: 0.1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: evalkit-tests\n"
                         b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": (PACKAGE / "entry_points.txt").read_bytes(),
    }
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as packed:
        for name, data in files.items():
            packed.writestr(name, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo package installed by pip into a folder of its own."""
    work = tmp_path_factory.mktemp("plugin")
    target = work / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-index", "--disable-pip-version-check", "--target",
                           str(target), str(_wheel(work))],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"pip could not install the demo check package: {done.stderr}")
    return target


def _stub_suite(tmp_path: Path, bound: int) -> Path:
    suite = tmp_path / "stub.yaml"
    suite.write_text(STUB.read_text("utf-8").replace(
        "  - key: chaining\n", f"  - key: chaining\n    max_multiplies: {bound}\n", 1),
        encoding="utf-8")
    return suite


@pytest.mark.slow  # pip builds a wheel; evalkit runs in processes of its own
def test_a_check_installed_by_pip_grades_a_suite(site: Path, tmp_path: Path) -> None:
    (info,) = site.glob("evalkit_check_demo-*.dist-info")
    assert (info / "INSTALLER").read_text().strip() == "pip"  # pip installed it, not we
    assert f"{NAME}.py," in (info / "RECORD").read_text()
    assert "[evalkit.checks]" in (info / "entry_points.txt").read_text()
    strict = _stub_suite(tmp_path, 0)
    assert _evalkit(site, "check", "--suite", strict).returncode == 0
    scored = _evalkit(site, "score", "--suite", strict, "--runs", RUNS, "--json")
    assert scored.returncode == 1, scored.stderr
    verdict = next(v for v in json.loads(scored.stdout)["verdicts"] if v["key"] == "chaining")
    assert verdict["passed"] is False
    assert "max_multiplies" in verdict["checks"]
    assert any(r.startswith("it multiplied ") and r.endswith("this mission allows 0")
               for r in verdict["reasons"])
    lenient = _stub_suite(tmp_path, 5)
    assert _evalkit(site, "score", "--suite", lenient, "--runs", RUNS).returncode == 0
    # Its validation is evalkit's check's too: a bound it refuses is refused before scoring.
    refused = _evalkit(site, "check", "--suite", _stub_suite(tmp_path, -1))
    assert refused.returncode == 1 and "-1 is negative; use 0 or more" in refused.stderr
    # Uninstalled, the same suite names an unknown field.
    shutil.rmtree(info)
    gone = _evalkit(site, "check", "--suite", strict)
    assert gone.returncode == 1 and "unknown field" in gone.stderr
