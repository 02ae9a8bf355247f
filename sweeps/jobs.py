"""A sweep's jobs: what each one is (its overrides and their meaning), its run folder's name,
and what it left.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from orchestrator.experiment.run_record import RunStatus

OUTCOME_KEYS = (
    "run_name",
    "mlflow_run_id",
    "variant",
    "recipe_fingerprint",
    "data_fingerprint",
    "dp_sizes",
    "eval",
    "folder",
    "answered_from",
)
"""What a finished job's outcome copies from its returned result (``answered_from``: the
earlier run that answered the job, which trained nothing;
:mod:`orchestrator.run.identity_index`)."""


@dataclass
class Job:
    """One job of the sweep: its overrides and what they mean."""

    overrides: list[str]
    mixture: dict[str, float]
    _: KW_ONLY
    dp: int | None
    other: list[str]
    """The other sweeps' overrides: jobs of one setting of them are compared together."""
    seed: int | None = None
    varied: list[str] = field(default_factory=list)
    """Overrides of what ``data.compared`` lets a variant differ in besides its mixture."""


def run_name(sweep: str, number: int) -> str:
    """The run folder name of job ``number``: stable, so that a resumed sweep finds it."""
    return f"{sweep}-{number:03d}"


def job_outcome(job: Job, result: JobReturn) -> dict[str, Any]:
    """What one job left, as plain data for sweep.json and the report."""
    outcome: dict[str, Any] = {
        "job": int(result.hydra_cfg.hydra.job.num) if result.hydra_cfg else None,
        "overrides": job.overrides,
        "mixture": job.mixture,
        "dp": job.dp,
        "seed": job.seed,
        "other": job.other,
        "varied": job.varied,
    }
    if result.status == JobStatus.COMPLETED and isinstance(result.return_value, dict):
        value = result.return_value
        outcome.update(status=value.get("status", RunStatus.SUCCEEDED), error=None)
        for key in OUTCOME_KEYS:
            outcome[key] = value.get(key)
        if "dp_size" in value:  # a dry run's plan
            outcome["dp_sizes"] = [value["dp_size"]]
    else:
        error = result._return_value
        # an exception without a message (a bare assert) still says what it was
        outcome.update(status=RunStatus.FAILED, error=str(error) or repr(error))
    return outcome
