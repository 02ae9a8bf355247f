"""Per-run JSONL files in TorchTitan's dump folder (``<dump_folder>/zephon/``).

``steps.jsonl``: one line per training step (its global batch digest, the fingerprint
chain, tokens, data wait), written by global rank 0; ``metrics.jsonl``: what
TorchTitan's metric loggers receive, with names made safe for MLflow.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from torchtitan.components.metrics import BaseLogger

from orchestrator import failpoints
from orchestrator.experiment.runfolder import (
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    read_jsonl,
    write_jsonl,
)
from orchestrator.failpoints import Failpoint

__all__ = [
    "METRICS_FILE",
    "RUN_SUBDIR",
    "STEPS_FILE",
    "JsonlMetricsLogger",
    "StepLog",
    "read_jsonl",
]


class StepLog:
    """Appends one JSON line per step; ``enabled=False`` (ranks other than 0) writes nothing."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def start(self, resumed_step: int) -> None:
        """Forget lines of steps after ``resumed_step``: this run redoes them."""
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(self.path, [r for r in read_jsonl(self.path) if r["step"] <= resumed_step])

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line, flushed at once (a crash loses no finished step)."""
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            failpoints.reach(Failpoint.STEP_LOGGED, record["step"])


def metric_name(name: str) -> str:
    """``name`` with only letters, digits and ``_ - . / : space``; ``%`` becomes ``pct``."""
    name = name.replace("%", "pct")
    return re.sub(r"[^A-Za-z0-9_\-./: ]+", "_", name).strip("_")


class JsonlMetricsLogger(BaseLogger):
    """A TorchTitan metric logger writing ``{"step": s, "<metric>": value, ...}`` lines."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record = {"step": step}
        record.update({metric_name(k): _to_python_number(v) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _to_python_number(value: Any) -> Any:
    """Tensors and numpy scalars as Python numbers."""
    return value.item() if hasattr(value, "item") else value
