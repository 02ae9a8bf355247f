"""The architecture's import rules, checked on the source (what the package docstrings state).

* ``pipeline/`` imports nothing of the rest of the repository;
* ``orchestrator/experiment/`` imports nothing of ``run/``, ``service/``, ``guard/``,
  ``tracking/`` or ``titan/``, nor torch, MLflow or subprocess;
* only ``orchestrator/tracking/`` imports MLflow, and only it calls MLflow's run-writing
  methods (one writer per external system).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipeline", "orchestrator", "sweeps", "demo", "hydra_plugins")
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


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {}
    for path in paths:
        hits = sorted(
            m for m in imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)
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
