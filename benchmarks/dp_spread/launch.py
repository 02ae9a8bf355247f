"""The benchmark's trainings: the shared seed checkpoint, then one run per loader and dp size.

Each is a torchrun of ``orchestrator.titan.train`` with a config of
:mod:`benchmarks.dp_spread.configs`, launched the way Zephon launches its own runs
(:mod:`orchestrator.run.launch`: its environment, process groups killed whole on time-out
or Ctrl-C, output in ``<run>/launch.log``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.dp_spread.design import GLOBAL_BATCH, MODELS
from benchmarks.dp_spread.prepare import Prepared
from benchmarks.machine import REPO_ROOT
from orchestrator.errors import LaunchError
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import discover
from orchestrator.run.launch import Launch, launch_env, run_local, train_command

LAUNCH_TIMEOUT_S = 1200
"""Seconds one training may take before its process group is killed."""
TRAIN_TIMEOUT_S = 900
"""TorchTitan's collective time-out: 4 processes on 2 cores make a step take seconds."""
OMP_THREADS = 1
"""OpenMP threads per process, on every dp size."""
LOG_TAIL_LINES = 60
"""Lines of ``launch.log`` a failed training's error carries."""


def _build_launch_env(work_dir: Path, folder: RunFolder, dp: int) -> dict[str, str]:
    """Zephon's launch environment, with the benchmark's own settings on top."""
    return {
        **launch_env(folder, discover("cpu"), dp),
        # The trainer runs in the run folder: ``--module benchmarks...`` needs the checkout.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        # Caches shared by all runs (not one per run folder): the stock JSON dataset is
        # prepared and the model compiled once per benchmark, not once per run.
        "HF_HOME": str(work_dir / "hf"),
        "TORCHINDUCTOR_CACHE_DIR": str(work_dir / "inductor"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        # One thread per process on every dp size: the same kernels' arithmetic per process,
        # and no OpenMP spin-waiting when processes outnumber cores (dp 4 on 2 cores).
        "OMP_NUM_THREADS": str(OMP_THREADS),
    }


def _run_torchrun(
    work_dir: Path, folder: Path, config: str, dp: int, args: list[str], what: str
) -> float:
    """Run ``orchestrator.titan.train`` under torchrun; the seconds it took. Log: ``folder``."""
    run = RunFolder(folder)
    command = train_command(
        dp,
        [
            *("--module", "benchmarks.dp_spread.configs", "--config", config),
            *("--dump-folder", str(run.titan_dir)),
            *("--comm.train-timeout-seconds", str(TRAIN_TIMEOUT_S)),
            *args,
        ],
    )
    # The command first: a failed run's log says how to run it again by hand.
    run.log_path.write_text(shlex.join(command) + "\n")
    started = time.monotonic()
    code = run_local(
        Launch([command], _build_launch_env(work_dir, run, dp), run, timeout_s=LAUNCH_TIMEOUT_S)
    )
    if code != 0:
        raise LaunchError(
            f"{what} failed (exit {code}); {run.log_path}:\n{run.log_tail(LOG_TAIL_LINES)}"
        )
    return time.monotonic() - started


def _make_fresh_folder(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def seed_checkpoint(work_dir: Path, prepared: Prepared, model: str) -> str:
    """TorchTitan's seed checkpoint of ``model`` (model only, step 0), made on 1 process:
    every run loads it, so all start from the same weights (``--debug.seed`` alone
    initialises the sharded model differently on each dp size on CPU)."""
    folder = _make_fresh_folder(work_dir / "runs" / "seed")
    _run_torchrun(
        work_dir,
        folder,
        MODELS[model].configs["zephon"],
        1,
        [
            *prepared.data_flags("zephon", folder),
            *("--checkpoint.enable", "--checkpoint.create-seed-checkpoint"),
            "--checkpoint.last-save-model-only",
        ],
        "creating the seed checkpoint",
    )
    path = RunFolder(folder).checkpoint_dir / "step-0"
    assert path.is_dir(), f"no seed checkpoint at {path}"
    return str(path)


def train(
    work_dir: Path,
    prepared: Prepared,
    model: str,
    loader: str,
    dp: int,
    steps: int,
    seed: str | None,
) -> dict[str, Any]:
    """Train ``model`` on ``loader`` from scratch on ``dp`` processes, from the seed
    checkpoint ``seed`` if given; return the run's folder and time."""
    folder = _make_fresh_folder(work_dir / "runs" / f"{loader}-dp{dp}")
    init = (
        []
        if seed is None
        else [
            "--checkpoint.enable",
            "--checkpoint.load-only",
            "--checkpoint.initial-load-path",
            seed,
        ]
    )
    args = [
        "--training.steps",
        str(steps),
        "--training.local-batch-size",
        str(GLOBAL_BATCH // dp),
        "--metrics.log-freq",
        "1",
        *init,
        *prepared.data_flags(loader, folder),
    ]
    config = MODELS[model].configs[loader]
    seconds = _run_torchrun(work_dir, folder, config, dp, args, f"{loader} dp {dp}")
    return {"folder": str(folder), "seconds": seconds, "omp_threads": OMP_THREADS}
