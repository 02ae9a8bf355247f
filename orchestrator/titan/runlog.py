"""Per-run JSONL files in TorchTitan's dump folder (``<dump_folder>/zephon/``).

``steps.jsonl``
    One line per training step, written by global rank 0 when the step's data is
    handed over: ``step`` (TorchTitan's 1-based step), ``global_digest``,
    ``data_fingerprint`` (the digest chain up to this step), ``tokens`` (label
    tokens of the global batch), ``data_wait_s`` (the slowest rank's wait for the
    pipeline), ``dp_size``. A run resumed from step ``s`` first drops the lines of
    steps after ``s``: they are redone, with the same data by construction.
``metrics.jsonl``
    What TorchTitan's metric loggers receive (loss, throughput, memory, and the
    data loader's tokens and data wait), one line per ``log`` call, with names
    made safe for trackers such as MLflow (``throughput(tps)`` -> ``throughput_tps``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from torchtitan.components.metrics import BaseLogger

from orchestrator.experiment.runfolder import METRICS_FILE, RUN_SUBDIR, STEPS_FILE, read_jsonl

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
        kept = [r for r in read_jsonl(self.path) if r["step"] <= resumed_step]
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(scratch, self.path)

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line, flushed at once (a crash loses no finished step)."""
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


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
        record.update({metric_name(k): _plain(v) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _plain(value: Any) -> Any:
    """Tensors and numpy scalars as Python numbers."""
    return value.item() if hasattr(value, "item") else value
