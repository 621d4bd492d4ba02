"""Layering is one way: runtime -> recordings (store) -> tables and verdicts (eval) -> reports.

Read from the source with ``ast``, so an import inside a function counts too:
the scorer never imports the runtime, the store never imports the scorer, and
nothing below the CLI imports it.

And the scoring path needs no extra: ``pip install evalkit`` is enough to check,
score, ingest, query, report, diff and verify, and a command that needs an extra
names it in one sentence. Held twice: statically, over every module the scoring
commands and the public API can reach (imports inside functions included), and
for real, by running the commands in a Python where the extras cannot be imported.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import evalkit
from evalkit.cli import COMMANDS
from evalkit.extras import EXTRAS, NEEDS

PACKAGE = Path(evalkit.__file__).parent
ROOT = PACKAGE.parent

#: What each part of evalkit must never import (its own modules aside).
FORBIDDEN: dict[str, set[str]] = {
    "store": {"runtime", "eval", "report", "commands", "cli", "grounding", "planes", "record"},
    "runtime": {"eval", "report", "commands", "cli", "record"},
    "eval": {"runtime", "report", "commands", "cli", "record"},
    "report": {"runtime", "commands", "cli", "record"},
    # The recorder writes recordings as the runtime does, with the runtime's own readers of
    # the wire and its tool results; it never reaches the scorer or the CLI.
    "record": {"eval", "report", "commands", "cli"},
    # OTel in and out writes runs with the store's writer and the runtime's tool results.
    "otel": {"eval", "report", "commands", "cli", "record"},
    "grounding": {"runtime", "eval", "report", "store", "commands", "cli"},
    "planes": {"runtime", "eval", "report", "store", "commands", "cli"},
    # Live governance (ledger, policy, sidecar, checkpoints, certificates) sits between the
    # recordings and the runtime: the runtime and the sidecar use it, it uses the store.
    "gate": {"runtime", "eval", "report", "commands", "cli", "record"},
    "forkserver": {"runtime", "eval", "report", "store", "commands", "cli", "grounding", "planes"},
}


def _imports(path: Path) -> set[str]:
    """The top-level evalkit parts a module imports (``evalkit.X...`` -> ``X``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if module == "evalkit":
                found.update(alias.name for alias in node.names)
            elif module.startswith("evalkit."):
                found.add(module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names
                      if alias.name.startswith("evalkit.")}
    return found


@pytest.mark.slow
def test_no_part_imports_a_layer_above_it() -> None:
    wrong = []
    for part, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / part).rglob("*.py")):
            for above in sorted(_imports(path) & forbidden):
                wrong.append(f"{path.relative_to(PACKAGE)} imports evalkit.{above}")
    assert wrong == []


@pytest.mark.slow
def test_only_the_otel_commands_import_the_otel_package() -> None:
    importers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                       if "otel" in _imports(path) and path.parent.name != "otel")
    assert importers == ["commands/otel.py"]


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from evalkit.runtime import run\n"
                      "import evalkit.report.html\nfrom evalkit import eval\n")
    assert _imports(module) == {"runtime", "report", "eval"}


# -- the scoring path needs no extra ------------------------------------------------------------

#: What ``pip install evalkit`` must run (its README section says the same).
SCORING_COMMANDS = ("check", "score", "ingest", "sql", "report", "diff", "verify")
EXTRA_MODULES = {name for names in EXTRAS.values() for name in names}
#: Drawn only for the HTML report's charts.
CHARTS = "evalkit.report.charts"


def _module_file(module: str) -> Path | None:
    parts = module.split(".")[1:]
    for path in (PACKAGE.joinpath(*parts).with_suffix(".py") if parts else None,
                 PACKAGE.joinpath(*parts, "__init__.py")):
        if path is not None and path.is_file():
            return path
    return None


def _reach(roots: list[str]) -> dict[str, set[str]]:
    """Every evalkit module ``roots`` can import, with the outside top-level names each imports.

    ``from evalkit.a import b`` counts ``evalkit.a.b`` when it is a module; importing a
    module imports its packages too.
    """
    reached: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):
            module = ".".join(parts[:i])
            path = _module_file(module)
            if path is None or module in reached:
                continue
            outside = reached[module] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] == "evalkit":
                        todo.append(name)
                    else:
                        outside.add(name.split(".")[0])
    return reached


def _command_module(name: str) -> str:
    return COMMANDS[name][0].partition(":")[0]


@pytest.mark.slow
def test_nothing_the_scoring_commands_or_the_public_api_reach_imports_an_extra() -> None:
    roots = ["evalkit", "evalkit.cli", *(_command_module(c) for c in SCORING_COMMANDS)]
    reached = _reach(roots)
    wrong = sorted(f"{module} imports {name}" for module, outside in reached.items()
                   for name in outside & EXTRA_MODULES)
    assert wrong == []
    assert not any(m.startswith(("evalkit.runtime", "evalkit.planes", "evalkit.record"))
                   for m in reached)


@pytest.mark.slow
def test_governance_for_any_framework_needs_no_extra() -> None:
    """The gate sidecar, its client, the checkpoint keys and the run views run on the base
    install: a framework governed by evalkit does not install evalkit's own agent stack."""
    roots = [*(_command_module(c) for c in ("gate", "keys", "runs")), "evalkit.gate.client"]
    reached = _reach(roots)
    wrong = sorted(f"{module} imports {name}" for module, outside in reached.items()
                   for name in outside & EXTRA_MODULES)
    assert wrong == []
    assert not any(m.startswith(("evalkit.runtime", "evalkit.record")) for m in reached)


@pytest.mark.slow
def test_matplotlib_is_imported_only_to_draw_the_html_reports_charts() -> None:
    reached = _reach(["evalkit", "evalkit.cli", *(_command_module(c) for c in SCORING_COMMANDS)])
    assert sorted(m for m, outside in reached.items() if "matplotlib" in outside) == [CHARTS]
    others = [c for c in SCORING_COMMANDS if _command_module(c) != _command_module("report")]
    assert CHARTS not in _reach(["evalkit", "evalkit.cli", *map(_command_module, others)])


@pytest.mark.slow
def test_the_reach_sees_imports_inside_functions_and_from_packages() -> None:
    reached = _reach(["evalkit.eval.runner"])
    assert "ray" in reached["evalkit.eval.runner"]  # imported inside a function
    assert "evalkit.eval" in reached and "evalkit.store.seal" in reached


def test_every_command_named_as_needing_an_extra_exists() -> None:
    commands = {who.removeprefix("evalkit ") for who in NEEDS if who.startswith("evalkit ")}
    assert commands <= set(COMMANDS)
    assert not commands & set(SCORING_COMMANDS)


@pytest.mark.slow
def test_each_extra_evalkit_checks_for_is_the_extra_pyproject_installs() -> None:
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    optional = declared["project"]["optional-dependencies"]
    assert set(EXTRAS) < set(optional)
    dev = {Requirement(r).name: Requirement(r).extras for r in optional["dev"]}
    assert dev.get("evalkit") == set(EXTRAS), "the tests need every extra"
    provides = packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {canonicalize_name(Requirement(r).name) for r in optional[extra]}
        brought = set(listed)  # and what those bring: mcp brings mcp_types
        for name in listed:
            try:
                brought |= {canonicalize_name(Requirement(r).name) for r in requires(name) or []
                            if Requirement(r).marker is None}
            except PackageNotFoundError:
                pytest.fail(f"{name} of the {extra} extra is not installed; "
                            "the tests install every extra ([dev])")
        for module in modules:
            assert {canonicalize_name(d) for d in provides.get(module, [])} & brought, \
                f"{module} is not installed by the {extra} extra in pyproject.toml"


#: A sitecustomize that makes the names in EVALKIT_TEST_UNIMPORTABLE fail to import, as
#: when they are not installed, in a Python started with it on PYTHONPATH (and its children):
#: a stand-in for a venv holding only the base install, which costs half a minute and a
#: package index to build (checked that way by hand when the extras were split).
_UNIMPORTABLE = """
import os
import sys


class Unimportable:
    names = set(filter(None, os.environ.get("EVALKIT_TEST_UNIMPORTABLE", "").split(",")))

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Unimportable())
"""


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory):
    """Run ``python ARGS…`` where no extra can be imported (nor the modules in ``also``)."""
    folder = tmp_path_factory.mktemp("lean-python")
    (folder / "sitecustomize.py").write_text(_UNIMPORTABLE, encoding="utf-8")

    def run(*args: str | Path, also: tuple[str, ...] = (),
            allow: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        blocked = (EXTRA_MODULES | set(also)) - set(allow)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
               "EVALKIT_TEST_UNIMPORTABLE": ",".join(sorted(blocked))}
        return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    return run


CLI = ("-m", "evalkit.cli")


@pytest.mark.slow  # several evalkit processes
def test_the_scoring_commands_run_with_no_extra_installed(lean, tmp_path: Path) -> None:
    report, dataset = tmp_path / "ci", tmp_path / "dataset"
    for args in (["check", "--suite", "suites/stub"],
                 ["score", "--suite", "suites/stub", "--runs", "recordings/stub/good",
                  "--report", report],
                 ["ingest", "recordings/stub/good", "--out", dataset],
                 ["sql", dataset, "select count(*) from runs"],
                 ["diff", report, report],
                 ["verify", "recordings/stub/good"]):
        done = lean(*CLI, *args, also=("matplotlib",))
        assert done.returncode == 0, (args[0], done.stderr)
    done = lean(*CLI, "report", report, "-o", tmp_path / "report.html")
    assert done.returncode == 0, done.stderr
    assert "<svg" in (tmp_path / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_public_api_imports_with_no_extra_installed(lean) -> None:
    # Whatever ``evalkit`` exports, each name fetched: lazy exports are imported too.
    done = lean("-c", "import evalkit\nfor name in getattr(evalkit, '__all__', ()):\n"
                "    getattr(evalkit, name)\n", also=("matplotlib",))
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_recorder_needs_the_base_install_and_openai_alone(lean, tmp_path: Path) -> None:
    code = ("import evalkit.record as r\n"
            f"with r.mission('x', runs={str(tmp_path)!r}) as m:\n"
            "    m.tool('t', {'a': 1}, lambda a: a)\n"
            "    m.answer('y')\n"
            "print(m.outcome)\n")
    done = lean("-c", code, also=("matplotlib",))  # no openai either: nothing asks for it
    assert (done.returncode, done.stdout) == (0, "answered\n"), done.stderr
    wrapped = lean("-c", "import openai, evalkit.record as r\n"
                   "r.wrap_openai(openai.OpenAI(api_key='k', base_url='http://127.0.0.1:9/v1'))",
                   also=("matplotlib",), allow=("openai",))
    assert wrapped.returncode == 0, wrapped.stderr


@pytest.mark.slow  # several evalkit processes
def test_an_agent_of_your_own_runs_with_no_extra_installed(lean, tmp_path: Path) -> None:
    from tests.harness.conftest import FOREIGN, foreign_suite

    suite = foreign_suite(tmp_path / "sums.yaml")
    done = lean(*CLI, "run", "--suite", suite, "--out", tmp_path / "out", "--quiet", "--",
                *FOREIGN)
    assert done.returncode == 0, done.stderr


AGENT = "needs the agent extra: pip install 'evalkit[agent]'"


BUILTIN = f"the built-in runtime (no agent after --) {AGENT}"


@pytest.mark.slow
@pytest.mark.parametrize(("args", "said"), [
    pytest.param(["mission", "hello"], f"evalkit mission {AGENT}", id="mission"),
    pytest.param(["mission", "--help"], f"evalkit mission {AGENT}", id="mission --help"),
    pytest.param(["replay", "recordings/stub/good/chaining"], f"evalkit replay {AGENT}",
                 id="replay"),
    pytest.param(["regrade", "recordings/stub/good", "--out", "{out}"],
                 f"evalkit regrade {AGENT}", id="regrade"),
    pytest.param(["record-corpus", "--out", "{out}"], f"evalkit record-corpus {AGENT}",
                 id="record-corpus"),
    pytest.param(["run", "--suite", "suites/stub", "--out", "{out}"], BUILTIN, id="run"),
    pytest.param(["measure", "--suite", "suites/stub", "--out", "{out}"], BUILTIN,
                 id="measure"),
    pytest.param(["run", "--suite", "suites/stub", "--out", "{out}", "--executor", "ray", "--",
                  sys.executable, "-c", "pass"],
                 "--executor ray needs the ray extra: pip install 'evalkit[ray]'",
                 id="run --executor ray"),
])
def test_a_command_that_needs_a_missing_extra_names_it(lean, tmp_path: Path,
                                                      args: list[str], said: str) -> None:
    out = tmp_path / "out"
    done = lean(*CLI, *(a.format(out=out) for a in args))
    assert (done.returncode, done.stderr, done.stdout) == (2, f"Error: {said}\n", "")
    assert not out.exists()  # refused before anything was made


@pytest.mark.slow
def test_regrade_policy_needs_no_extra(lean, tmp_path: Path) -> None:
    """``regrade --policy`` replays nothing, so it runs where the agent extra is missing;
    the replaying regrade is still refused there in one sentence."""
    done = lean(*CLI, "regrade", "recordings/stub/good", "--policy",
                "evalkit/data/policy.example.yaml", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["runs"] == 12
    done = lean(*CLI, "regrade", "recordings/stub/good", "--out", tmp_path / "o",
                "--skill", "--policy")  # "--policy" only as another option's value
    assert (done.returncode, done.stderr) == (2, f"Error: evalkit regrade {AGENT}\n")


# -- no import cycles ---------------------------------------------------------------------------

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _loaded_with(path: Path, modules: set[str]) -> set[str]:
    """The evalkit modules importing ``path`` imports at once: its module-level imports,
    outside ``if TYPE_CHECKING:`` (those inside functions wait until called). A package
    imported on the way to its submodule is Python's doing, not an edge of the graph."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = node.test
                if getattr(test, "id", getattr(test, "attr", None)) != "TYPE_CHECKING":
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found & modules


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in order:
            continue
        work = [(start, iter(sorted(graph[start])))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            here, nexts = work[-1]
            step = next(nexts, None)
            if step is not None:
                if step not in order:
                    order[step] = low[step] = len(order)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[here] = min(low[here], order[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[here])
            if low[here] == order[here]:
                part = []
                while True:
                    module = stack.pop()
                    on_stack.discard(module)
                    part.append(module)
                    if module == here:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


@pytest.mark.slow
def test_no_modules_import_each_other_in_a_cycle() -> None:
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {module: _loaded_with(path, set(files)) - {module} for module, path in files.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_vendorable_files_import_nothing_of_evalkit() -> None:
    """The stagnation fold and the gate's wire protocol say they can be copied alone into
    another project; an evalkit import would quietly break that."""
    for name in ("signals.py", "gate/protocol.py"):
        assert _imports(PACKAGE / name) == set(), name
