"""``zephon-run``'s task function: one experiment of ``conf/`` run (or planned) through the
orchestrator.

Imported by :mod:`sweeps.app` only once the warm server may have started: this module
imports the pipeline, the experiment schema and the run API (~0.4 s on 2 cores).

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from orchestrator.errors import RunFailed
from orchestrator.experiment import load_experiment
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api, interrupts, warm_start
from sweeps.config import split


def run_job(cfg: DictConfig) -> dict[str, Any]:
    """Run (or, with ``dry_run``, plan) the experiment of ``cfg``.

    Returns :meth:`RunResult.to_dict` (or the plan's dict on a dry run); a run that does not
    succeed raises :class:`RunFailed`, so Hydra reports the job failed. A dry run prints its
    plan as one line of JSON: the jobs of a sweep run in parallel print one line each.
    Reads nothing from ``HydraConfig``: launchers may run jobs in threads.
    """
    experiment, options = split(cfg)
    if options.dry_run:
        warm_start.withdraw()  # a dry run launches nothing
        plan = api.plan_summary(api.plan(experiment, run_name=options.run_name))
        # one write, line and newline together: parallel jobs' lines never interleave
        sys.stdout.write(json.dumps(plan) + "\n")
        sys.stdout.flush()
        return plan
    config = load_experiment(experiment)
    folder = Path(config.runs_root, options.run_name or "")
    if options.resume and options.run_name and RunFolder(folder).exists():
        result = api.resume(folder, progress=sys.stderr, like=config)
    else:
        result = api.run(
            config,
            run_name=options.run_name,
            progress=sys.stderr,
            parent_run_id=options.sweep.parent_run_id,
            sweep=options.sweep.name,
            fresh=options.fresh,
            at_dp=options.at_dp,
        )
    if result.status == RunStatus.INTERRUPTED:  # noted for the report; Hydra lets it through
        raise interrupts.Interrupted()
    if result.status != RunStatus.SUCCEEDED:
        raise RunFailed(f"run {result.run_name} {result.status}:\n" + "\n".join(result.messages))
    score = result.eval["aggregate_bpb"] if result.eval else None
    answered = f" (answered from {result.answered_from})" if result.answered_from else ""
    print(
        f"[zephon-run] {result.run_name}{answered}: {result.steps} steps on dp {result.dp_sizes}, "
        f"held-out bits/byte {score}, MLflow run {result.mlflow_run_id}, folder {result.folder}"
    )
    return result.to_dict()
