"""``zephon-run``: the Hydra app that runs one experiment of ``conf/`` through the orchestrator.

Its task function is :func:`sweeps.task.run_job`; this module only starts the app.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import contextlib
import importlib.resources
import shutil
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

# Light on purpose (no pipeline, no experiment schema): main() starts the warm server
# before the rest is imported (~0.4 s on 2 cores), so the server's imports overlap them.
from orchestrator.run import warm_start
from orchestrator.run.cpu_env import cpu_start_env

CONFIG_PATH = "pkg://zephon_conf"
"""The config tree: the repository's ``conf/``, installed as the package ``zephon_conf``
(pyproject.toml), so that wheel and editable installs find it wherever they run."""


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def hydra_main(cfg: DictConfig) -> dict[str, Any]:
    """Hydra's app: one job (:func:`sweeps.task.run_job`). A job refused before it started
    (an invalid experiment) leaves no output folder: Hydra made it before the job ran."""
    from pipeline.errors import ConfigError  # deferred: the pipeline, after the warm server
    from sweeps.task import run_job  # deferred: heavy; main() starts the warm server first

    try:
        return run_job(cfg)
    except ConfigError:
        _remove_output_dir(Path(HydraConfig.get().runtime.output_dir))
        raise


def _remove_output_dir(folder: Path) -> None:
    """Remove ``folder`` (Hydra's output folder of a refused job: its config copies and log)
    and the parents it leaves empty, up to the working folder."""
    shutil.rmtree(folder, ignore_errors=True)
    here = Path.cwd().resolve()
    for parent in folder.resolve().parents:
        if parent == here or here not in parent.parents:
            break
        with contextlib.suppress(OSError):  # not empty: another job's
            parent.rmdir()


def main() -> None:
    """The ``zephon-run`` console script: Hydra's app, stopped cleanly by SIGINT/SIGTERM
    (exit 130 and one line per unfinished run, see :mod:`orchestrator.run.interrupts`)."""
    if not any(arg.startswith("-") for arg in sys.argv[1:]):
        # One job, most likely a local CPU run: the warm server imports the trainer while
        # this process imports, Hydra composes and the run is planned; the plan ends it if not.
        warm_start.speculate(cpu_start_env())
    from orchestrator.run import interrupts  # deferred: imports the pipeline, after the warm server
    from sweeps.console import reported_errors  # deferred: as above

    _check_command_line(sys.argv[1:])
    with interrupts.entry_point("zephon-run"), reported_errors():
        hydra_main()
    interrupts.exit_without_teardown(0)  # a failure exits through SystemExit


def _check_command_line(arguments: list[str]) -> None:
    """Exit 2 naming every unknown key before Hydra composes (its own message is a Python
    exception's text, exit 1: read as a failed run)."""
    from pipeline.errors import EXIT_INVALID  # deferred: the pipeline, after the warm server
    from sweeps.config import command_line_problems  # deferred: the schema, as above

    groups = {p.name for p in importlib.resources.files("zephon_conf").iterdir() if p.is_dir()}
    problems = command_line_problems(arguments, groups)
    if problems:
        warm_start.withdraw()
        for problem in problems:
            print(f"zephon-run: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)


if __name__ == "__main__":
    main()
