"""``zephon-run``: the Hydra app that runs one experiment of ``conf/`` through the orchestrator.

A job returns :meth:`RunResult.to_dict` (or the plan's dict on a dry run); a run that
does not succeed raises :class:`RunFailed`, so Hydra reports the job failed. The job
reads nothing from ``HydraConfig``: launchers may run jobs in threads.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

# Light on purpose (no pipeline, no experiment schema): main() starts the warm server
# before the rest is imported (~0.4 s on 2 cores), so the server's imports overlap them.
from orchestrator.run import warm_start
from orchestrator.run.cpu_env import cpu_start_env

CONFIG_PATH = "pkg://zephon_conf"
"""The config tree: the repository's ``conf/``, installed as the package ``zephon_conf``
(pyproject.toml), so that wheel and editable installs find it wherever they run."""


def run_job(cfg: DictConfig) -> dict[str, Any]:
    """Run (or, with ``dry_run``, plan) the experiment of ``cfg``; see the module docstring."""
    from orchestrator.errors import RunFailed
    from orchestrator.experiment import load_experiment
    from orchestrator.experiment.runfolder import RunFolder, RunStatus
    from orchestrator.run import api, interrupts
    from sweeps.config import split

    experiment, options = split(cfg)
    if options.dry_run:
        warm_start.withdraw()  # a dry run launches nothing
        plan = api.plan(experiment, run_name=options.run_name).to_dict()
        print(json.dumps(plan, indent=2))
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
        )
    if (
        result.status == RunStatus.INTERRUPTED
    ):  # noted for the report; Hydra lets BaseException through
        raise interrupts.Interrupted()
    if result.status != RunStatus.SUCCEEDED:
        raise RunFailed(f"run {result.run_name} {result.status}:\n" + "\n".join(result.messages))
    score = result.eval["aggregate_bpb"] if result.eval else None
    print(
        f"[zephon-run] {result.run_name}: {result.steps} steps on dp {result.dp_sizes}, "
        f"held-out bits/byte {score}, MLflow run {result.mlflow_run_id}, folder {result.folder}"
    )
    return result.to_dict()


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def hydra_main(cfg: DictConfig) -> dict[str, Any]:
    """Hydra's app: one job."""
    return run_job(cfg)


def main() -> None:
    """The ``zephon-run`` console script: Hydra's app, stopped cleanly by SIGINT/SIGTERM
    (exit 130 and one line per unfinished run, see :mod:`orchestrator.run.interrupts`)."""
    if not any(arg.startswith("-") for arg in sys.argv[1:]):
        # One job, most likely a local CPU run: the warm server imports the trainer while
        # this process imports, Hydra composes and the run is planned; the plan ends it if not.
        warm_start.speculate(cpu_start_env())
    from orchestrator.run import interrupts

    with interrupts.entry_point("zephon-run", on_stop=_hydra_raises):
        hydra_main()
    interrupts.exit_without_teardown(0)  # a failure exits through SystemExit, as before


def _hydra_raises() -> None:
    """Once interrupted, Hydra re-raises a job's error instead of printing its traceback
    (the entry point reports the interruption instead)."""
    os.environ["HYDRA_FULL_ERROR"] = "1"


if __name__ == "__main__":
    main()
