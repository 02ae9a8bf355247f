"""The architecture's import rules, checked on the source (what the package docstrings state).

* ``pipeline/`` imports nothing of the rest of the repository;
* ``orchestrator/experiment/`` imports nothing of ``run/``, ``service/``, ``guard/``,
  ``tracking/`` or ``titan/``, nor torch, MLflow or subprocess;
* ``orchestrator/evaluation/``'s record and metrics import no torch (the guard and tracking
  read them), and the package imports nothing above it;
* only ``orchestrator/tracking/`` imports MLflow, and only it calls MLflow's run-writing
  methods (one writer per external system);
* no two files import each other, directly or around a cycle, and no two packages of
  ``orchestrator/`` do, counting imports written inside functions and under
  ``TYPE_CHECKING``;
* ``orchestrator/run/run_plan.py``, the run's data, imports only ``experiment/`` and
  ``machine/`` of the orchestrator (and the pipeline below it), and ``run/`` imports nothing of the faces and rooms above it;
* an import of the project inside a function defers a heavy dependency and says so in a
  ``# deferred: ...`` comment just above it;
* every module of the product is under 500 lines.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipeline", "orchestrator", "sweeps", "demo", "hydra_plugins")
CODE = (*PRODUCT, "benchmarks", "scripts")
"""Everything whose imports are checked for cycles and deferred imports."""
MAX_LINES = 500
MLFLOW_WRITES = {
    "create_run",
    "set_terminated",
    "log_batch",
    "log_artifact",
    "log_artifacts",
    "update_run",
    "set_tag",
    "log_metric",
    "log_param",
}


def imports(path: Path, *, at_run_time: bool = False) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports too; with
    ``at_run_time``, not those of ``if TYPE_CHECKING:`` blocks)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    if at_run_time:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def offending(
    paths: list[Path], forbidden: tuple[str, ...], *, at_run_time: bool = False
) -> dict[str, list[str]]:
    bad = {}
    for path in paths:
        hits = sorted(
            m
            for m in imports(path, at_run_time=at_run_time)
            if any(m == f or m.startswith(f + ".") for f in forbidden)
        )
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def test_the_pipeline_imports_nothing_of_the_rest() -> None:
    assert offending(sources("pipeline"), ("orchestrator", "sweeps", "demo", "hydra_plugins")) == {}


def test_the_experiment_imports_nothing_above_it() -> None:
    above = tuple(f"orchestrator.{p}" for p in ("run", "service", "guard", "tracking", "titan"))
    assert offending(sources("orchestrator/experiment"), above) == {}
    assert offending(sources("orchestrator/experiment"), ("torch", "mlflow", "subprocess")) == {}


def test_only_tracking_imports_mlflow() -> None:
    others = [p for p in sources(*PRODUCT) if "orchestrator/tracking" not in p.as_posix()]
    assert offending(others, ("mlflow",)) == {}


@pytest.mark.parametrize("folder", PRODUCT)
def test_only_tracking_writes_mlflow_runs(folder: str) -> None:
    writes = {}
    for path in sources(folder):
        if "orchestrator/tracking" in path.as_posix():
            continue
        tree = ast.parse(path.read_text(), str(path))
        calls = sorted(
            node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MLFLOW_WRITES
        )
        if calls:
            writes[str(path.relative_to(ROOT))] = calls
    assert writes == {}


def test_the_evaluation_record_and_metrics_import_no_torch() -> None:
    light = [
        ROOT / "orchestrator/evaluation/record.py",
        *sources("orchestrator/evaluation/metrics"),
    ]
    heavy = ("torch", "torchtitan", "mlflow", "lm_eval")
    init = ROOT / "orchestrator/evaluation/__init__.py"
    assert offending([init, *light], heavy, at_run_time=True) == {}
    above = tuple(
        f"orchestrator.{p}" for p in ("run", "service", "guard", "tracking", "titan", "search")
    )
    assert offending(sources("orchestrator/evaluation"), above) == {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, known: set[str]) -> list[tuple[ast.stmt, str, bool]]:
    """``(statement, imported project module, inside a function)`` for each import of
    ``path``: those inside functions and under ``if TYPE_CHECKING:`` count too, since an
    import only for annotations still ties the two files together."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{alias.name}" for alias in child.names]
                names = [n if n in known else child.module for n in names]
            else:
                names = []
            for name in names:
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.append((child, name, inside))
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (inside functions too)."""
    paths = {module_name(p): p for p in sources(*CODE)}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in paths.items():
        for _, imported, _ in project_imports(path, set(paths)):
            if imported != name:
                graph[name].add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            strong(node)
    return found


def test_no_files_import_each_other() -> None:
    # a package's __init__ re-exporting its modules is not a cycle with them
    graph = {
        a: {b for b in bs if not (a.startswith(b + ".") or b.startswith(a + "."))}
        for a, bs in import_graph().items()
    }
    assert cycles(graph) == []


def test_no_packages_of_the_orchestrator_import_each_other() -> None:
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = defaultdict(set)
    for module, imported in import_graph().items():
        if module.startswith("orchestrator."):
            packages[package(module)].update(
                package(m) for m in imported if m.startswith("orchestrator.")
            )
    both_ways = [
        (a, b)
        for a, b in itertools.combinations(sorted(packages), 2)
        if b in packages[a] and a in packages[b]
    ]
    assert both_ways == []


def test_the_run_plan_is_data_at_the_bottom_of_run() -> None:
    # the recipe is one module: its type, its flags and how it is resolved
    below = (
        "orchestrator.experiment",
        "orchestrator.machine",
        "orchestrator.run.recipe",
        "pipeline",
    )
    project = ("orchestrator", "pipeline", "sweeps", "hydra_plugins", "demo")
    imported = imports(ROOT / "orchestrator/run/run_plan.py")
    assert sorted(m for m in imported if m.startswith(project) and not m.startswith(below)) == []


def test_the_run_imports_nothing_above_it() -> None:
    above = tuple(f"orchestrator.{p}" for p in ("cli", "service", "guard", "search", "mcp"))
    assert offending(sources("orchestrator/run"), (*above, "sweeps", "hydra_plugins")) == {}


RECORD_MODULE = "orchestrator/experiment/run_record.py"
RECORD_FILES = ("EXPERIMENT_FILE", "RUN_FILE", "ARTIFACT_EXPERIMENT", "experiment.json", "run.json")


def test_run_records_are_read_by_key_only_in_the_record_module() -> None:
    """``experiment.json`` and ``run.json`` (and the experiment's MLflow artifact) are read
    through :mod:`orchestrator.experiment.run_record`'s types: no subscript or ``.get`` on
    what ``RunFolder.state()``/``.experiment()`` return, and no JSON of those files loaded
    but into a record's ``from_dict``."""
    found = []
    for path in sources(*CODE):
        if path.relative_to(ROOT).as_posix() == RECORD_MODULE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("state", "experiment") and not node.args:
                    above = parents.get(node)
                    keyed = isinstance(above, ast.Subscript) or (
                        isinstance(above, ast.Attribute) and above.attr in ("get", "items")
                    )
                    if keyed:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                if node.func.attr == "loads" and any(
                    name in ast.unparse(node) for name in RECORD_FILES
                ):
                    wrapper = parents.get(node)
                    if not (
                        isinstance(wrapper, ast.Call)
                        and isinstance(wrapper.func, ast.Attribute)
                        and wrapper.func.attr == "from_dict"
                    ):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} json.loads")
    assert found == []


def test_imports_inside_functions_say_what_they_defer() -> None:
    unexplained = []
    for path in sources(*CODE):
        lines = path.read_text().splitlines()
        known = {module_name(p) for p in sources(*CODE)}
        for statement, imported, inside in project_imports(path, known):
            if not inside:
                continue
            above = lines[statement.lineno - 2] if statement.lineno > 1 else ""
            if "deferred" not in above and "deferred" not in lines[statement.lineno - 1]:
                unexplained.append(f"{path.relative_to(ROOT)}:{statement.lineno} {imported}")
    assert unexplained == []


def test_every_module_is_under_500_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources(*PRODUCT)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
