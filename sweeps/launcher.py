"""The ``zephon`` Hydra launcher: a sweep's jobs run at once, as far as the free devices allow.

A :class:`~orchestrator.service.pool.DevicePool` hands out leases (first fit, widest jobs
first); each job runs through Hydra's ``run_job`` in a thread with overrides that pin it
to its lease (``resources.dp`` and its cores or GPUs). A job that can never fit fails at
once with the reason; the others go on.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from orchestrator.errors import NoFit
from orchestrator.experiment import Launcher as TrainingLauncher
from orchestrator.machine.devices import discover
from orchestrator.run import interrupts
from orchestrator.run.launch import prepare_warm_start
from orchestrator.service.pool import DevicePool, Lease, lease_resources, lease_sizes
from pipeline.errors import ConfigError
from sweeps.composition import Compositions, shared_overrides
from sweeps.config import experiment_from

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the launcher looks for SIGINT/SIGTERM while its jobs run."""
PINNED_KEYS = ("resources.dp", "resources.max_procs", "resources.gpu_ids")
"""Overrides the launcher sets from a lease (a job's own values for them are replaced)."""


@dataclass
class ZephonLauncherConf:
    """``hydra/launcher=zephon``; set fields as ``hydra.launcher.<field>=...``."""

    _target_: str = "hydra_plugins.zephon.ZephonLauncher"
    device: str = "auto"
    """Devices to share: ``auto`` (CUDA GPUs if any is free, else CPU cores), ``cuda``, ``cpu``."""
    capacity: int | None = None
    """Most devices the sweep uses at once; None: every free one."""
    extra_processes: int = 1
    """CPU: training processes beyond the cores, filling what the runs leave idle
    (:class:`~orchestrator.service.pool.DevicePool`); 0: one process per core."""


class ZephonLauncher(Launcher):
    """Hydra launcher running jobs concurrently on leased devices
    (docs/design/sweeps_sweeper.md)."""

    def __init__(
        self, device: str = "auto", capacity: int | None = None, extra_processes: int = 1
    ) -> None:
        super().__init__()
        assert capacity is None or capacity >= 1, f"capacity must be >= 1, got {capacity}"
        assert extra_processes >= 0, f"extra_processes must be >= 0, got {extra_processes}"
        self.device = device
        self.capacity = capacity
        self.extra_processes = extra_processes
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self._hydra_state = threading.Lock()
        """Held while a job reads or writes Hydra's process-wide state (the config loader,
        ``HydraConfig``'s singleton, the callbacks): everything but the task function itself."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        if config.hydra.job.chdir:  # refused before the sweep opens anything
            raise ConfigError(
                "hydra/launcher=zephon runs a sweep's jobs as threads of one process, where "
                "hydra.job.chdir=true would move every job's working directory at once; "
                "set hydra.job.chdir=false (conf/config.yaml's default)"
            )
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Run every job (docs/design/sweeps_sweeper.md); returns one JobReturn per job, in
        order."""
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        pool = DevicePool(
            discover(self.device),
            self.capacity,
            spare_cores=True,
            extra_processes=self.extra_processes,
        )
        if not self.config.get("dry_run"):  # a dry run launches nothing
            # the trainer's imports overlap the jobs' composition; they train on the pool's
            # devices, on this machine
            prepare_warm_start(pool.devices.kind, TrainingLauncher.LOCAL)
        log.info(
            "Launching %d jobs on %d free %s devices",
            len(job_overrides),
            pool.capacity,
            pool.devices.kind,
        )
        runs: list[tuple[list[int], Callable[[Lease], JobReturn]]] = []
        compositions = Compositions(self.hydra_context.config_loader, self.config)
        shared = shared_overrides(job_overrides)
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            with self._hydra_state:  # the lease sizes; the job is composed whole when it starts
                own = [o for o in overrides if o not in shared]
                experiment = experiment_from(compositions.of(shared, own))
            runs.append(
                (
                    lease_sizes(experiment),
                    lambda lease, n=number, o=list(overrides): self._run_pinned_job(n, o, lease),
                )
            )
        # Widest first: a job needing every core would otherwise wait for the narrow ones to
        # drain, and end the sweep alone on the machine (longest processing time first).
        order = sorted(range(len(runs)), key=lambda i: -min(runs[i][0], default=0))
        started = pool.submit_all([runs[i] for i in order])
        futures: list[Future[JobReturn]] = [started[order.index(i)] for i in range(len(runs))]
        for number, future in enumerate(futures, start=initial_job_idx):
            if future.done() and isinstance(future.exception(), NoFit):
                log.error("\t#%d cannot start: %s", number, future.exception())
        with interrupts.handling():
            while wait(futures, timeout=POLL_S).not_done:
                if interrupts.requested():  # running jobs stop their own launches
                    pool.close(interrupts.Interrupted())
        if interrupts.requested():
            raise interrupts.Interrupted()
        returns = []
        for overrides, future in zip(job_overrides, futures, strict=True):
            error = future.exception()
            if error is None:
                returns.append(future.result())
            else:  # never started (no fit) or Hydra itself failed: a failed job all the same
                returns.append(
                    JobReturn(
                        overrides=list(overrides),  # Hydra's error names the job by them
                        status=JobStatus.FAILED,
                        _return_value=error,
                    )
                )
        return returns

    def _run_pinned_job(self, number: int, overrides: list[str], lease: Lease) -> JobReturn:
        """Compose job ``number`` pinned to ``lease`` and run it with Hydra's ``run_job``."""
        assert self.config is not None and self.hydra_context is not None
        assert self.task_function is not None
        pinned = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in PINNED_KEYS]
        pinned.append(f"resources.dp={lease.dp}")
        for key, value in lease_resources(lease).items():
            if value is not None:  # a cleared field stays as the job's config has it
                pinned.append(f"resources.{key}={json.dumps(value, separators=(',', ':'))}")
        with self._hydra_state:
            config = self.hydra_context.config_loader.load_sweep_config(self.config, pinned)
            with open_dict(config):
                config.hydra.job.id = number
                config.hydra.job.num = number
        log.info(
            "\t#%d started: dp %d on %d %s device(s): %s",
            number,
            lease.dp,
            lease.size,
            lease.devices.kind,
            " ".join(filter_overrides(overrides)),
        )
        # Hydra's run_job sets HydraConfig's singleton, copies it back into the job's
        # return and restores it afterwards: two jobs doing so at once swap or lose each
        # other's Hydra config. It therefore runs under the lock, which the job gives up
        # only while its task function runs.
        with self._hydra_state:
            return run_job(
                hydra_context=self.hydra_context,
                task_function=self._without_hydra_state_lock,
                config=config,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
                configure_logging=False,
            )

    def _without_hydra_state_lock(self, config: DictConfig) -> Any:
        """The task function, run while other jobs may start or end
        (:attr:`_hydra_state`)."""
        assert self.task_function is not None
        self._hydra_state.release()
        try:
            return self.task_function(config)
        finally:
            self._hydra_state.acquire()
