"""Synthetic run folders for the tracking tests: the JSONL records a trainer writes
(orchestrator.experiment.runfolder / titan.runlog), without training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from orchestrator.experiment.run_record import ExperimentRecord, RunState, Segment
from orchestrator.experiment.runfolder import (
    EVAL_FILE,
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
)

CONTRACT = {
    "datasets": [
        {"name": "code", "fingerprint": "f00d", "paths": ["a.py", "b.py"]},
        {"name": "docs", "fingerprint": "beef", "paths": ["x.md"]},
    ],
    "tokenizer": {"name": "cl100k_base", "eos": 100257},
    "seq_len": 64,
    "shuffle": True,
}
"""The data contract every synthetic run records."""
METRICS_PER_STEP = 7  # loss, max loss, tokens_per_s, grad_norm, memory, mfu, data_wait_s
"""MLflow metrics a synthetic step becomes (:func:`write_steps` + :func:`write_metrics`)."""


def append_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to the JSONL file ``path``, one line each, as a trainer does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def write_steps(folder: RunFolder, steps: range, dp_size: int = 2) -> None:
    """The data records (``steps.jsonl``) of ``steps``."""
    append_records(
        folder.titan_dir / RUN_SUBDIR / STEPS_FILE,
        [
            {
                "step": s,
                "global_digest": f"d{s}",
                "data_fingerprint": f"fp{s}",
                "tokens": 1024,
                "data_wait_s": 0.001 * s,
                "dp_size": dp_size,
            }
            for s in steps
        ],
    )


def write_metrics(folder: RunFolder, steps: range, loss_scale: float = 10.0) -> None:
    """The trainer's metrics (``metrics.jsonl``) of ``steps``: loss ``loss_scale / step``."""
    append_records(
        folder.titan_dir / RUN_SUBDIR / METRICS_FILE,
        [
            {
                "step": s,
                "loss_metrics/global_avg_loss": loss_scale / s,
                "loss_metrics/global_max_loss": 2 * loss_scale / s,
                "throughput_tps": 1000.0 + s,
                "grad_norm": 1.0,
                "memory/max_active_GiB": 1.5,
                "mfu_pct": 3,
                "note": "not a number",
                "flag": True,
            }
            for s in steps
        ],
    )


def write_evals(folder: RunFolder, steps: list[int]) -> None:
    """Held-out scores (``eval.jsonl``) at ``steps``: aggregate bits per byte ``1.5 + step``."""
    append_records(
        folder.titan_dir / RUN_SUBDIR / EVAL_FILE,
        [
            {"step": s, "bpb": {"code": 1.0 + s, "docs": 2.0 + s}, "aggregate_bpb": 1.5 + s}
            for s in steps
        ],
    )


def make_folder(root: Path, name: str = "run-a", steps: int = 10) -> RunFolder:
    """A running run folder ``root/name`` with ``steps`` steps written and a launch log."""
    folder = RunFolder(root / name)
    folder.write_experiment(
        ExperimentRecord.new(
            config={"steps": steps, "lr": 3e-4},
            contract=CONTRACT,
            mixture={"code": 0.5, "docs": 0.5},
            contract_fingerprint="ab" * 32,
            variant="cd" * 32,
        )
    )
    folder.write_state(
        RunState.new(status="running", segments=(Segment.new(dp_size=2, start_step=0),))
    )
    write_steps(folder, range(1, steps + 1))
    write_metrics(folder, range(1, steps + 1))
    folder.log_path.write_text("torchrun says hello\n")
    return folder


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """The (step, value) points of the metric ``key`` of the run ``run_id``, by step."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
