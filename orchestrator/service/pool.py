"""Share this machine's free devices among runs that train at the same time.

Each run names the dp sizes it accepts (an experiment's: :func:`lease_sizes`); each time a
run is submitted or a lease is returned, every waiting run in submission order gets the
largest acceptable size that is free (first fit), and holds to its lease the resources
:func:`lease_resources` names. ``spare_cores`` and ``extra_processes`` tune CPU runs.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from orchestrator.errors import NoFit
from orchestrator.experiment import DeviceKind, ExperimentConfig, dp_sizes
from orchestrator.machine.devices import Devices

T = TypeVar("T")


@dataclass(frozen=True)
class Lease:
    """Devices held by one run until it returns them."""

    devices: Devices
    """The leased devices: ``count`` of them, ``gpu_ids`` on CUDA."""
    dp: int
    """The run's data-parallel size: ``count``, or fewer on CPU when the pool gave it spare
    cores (its processes use them as threads)."""

    @property
    def size(self) -> int:
        """Devices held."""
        return self.devices.count


def lease_sizes(config: ExperimentConfig) -> list[int]:
    """The lease sizes a run of ``config`` accepts: its own ``resources.dp``, else every dp
    size that can run it (:func:`~orchestrator.experiment.dp_sizes`)."""
    dp = config.resources.dp
    return [dp] if dp is not None else dp_sizes(config)


def lease_resources(lease: Lease) -> dict[str, Any]:
    """The ``resources`` fields that hold a run to ``lease`` (its dp is ``lease.dp``): on
    CUDA its GPUs, ``gpu_ids``; on CPU its cores, ``max_procs`` training processes. The
    other field is None: cleared."""
    cuda = lease.devices.kind == DeviceKind.CUDA
    return {
        "max_procs": None if cuda else lease.size,
        "gpu_ids": list(lease.devices.gpu_ids) if cuda else None,
    }


@dataclass
class _WaitingRun(Generic[T]):
    sizes: list[int]
    work: Callable[[Lease], T]
    future: Future[T]


class DevicePool:
    """Leases of ``devices`` (at most ``capacity`` at once) for concurrent runs."""

    def __init__(
        self,
        devices: Devices,
        capacity: int | None = None,
        *,
        spare_cores: bool = False,
        extra_processes: int = 0,
    ) -> None:
        assert capacity is None or capacity >= 1, f"capacity must be >= 1, got {capacity}"
        assert extra_processes >= 0, f"extra_processes must be >= 0, got {extra_processes}"
        self.devices = devices
        self.spare_cores = spare_cores and devices.kind == DeviceKind.CPU
        """CPU: the last waiting run waits for, and gets, every core (why:
        docs/design/orchestrator_service.md)."""
        self.capacity = min(devices.count, capacity) if capacity else devices.count
        self.extra_processes = extra_processes if devices.kind == DeviceKind.CPU else 0
        """CPU: how many processes the runs may have beyond the cores (why:
        docs/design/orchestrator_service.md)."""
        self._slots = self.capacity + self.extra_processes
        self._free_gpus = list(devices.gpu_ids[: self.capacity])
        self._free = self._slots
        self._waiting: list[_WaitingRun] = []
        self._closed = False
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        """Devices (and extra processes) not leased now."""
        with self._lock:
            return self._free

    def submit(self, sizes: Sequence[int], work: Callable[[Lease], T]) -> Future[T]:
        """Run ``work(lease)`` in a thread once one of ``sizes`` devices is free (module
        docstring); the future holds its result, or :class:`NoFit`, or its exception."""
        return self.submit_all([(sizes, work)])[0]

    def submit_all(
        self, runs: Sequence[tuple[Sequence[int], Callable[[Lease], T]]]
    ) -> list[Future[T]]:
        """:meth:`submit` for several runs at once: all wait before the first starts, so
        the scheduling sees the whole batch."""
        futures: list[Future[T]] = []
        with self._lock:
            for requested, work in runs:
                future: Future[T] = Future()
                sizes = sorted(set(requested))
                if not sizes or sizes[0] > self.capacity:
                    future.set_exception(
                        NoFit(
                            f"needs dp in {sizes} but only {self.capacity} {self.devices.kind} "
                            "devices are free; lower resources.dp or free devices"
                        )
                    )
                else:
                    self._waiting.append(_WaitingRun(sizes, work, future))
                futures.append(future)
        self._start_fitting_runs()
        return futures

    def close(self, error: BaseException) -> int:
        """Start nothing more: every waiting run's future fails with ``error`` (runs already
        started go on); return how many were waiting."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            self._closed = True
        for job in waiting:
            job.future.set_exception(error)
        return len(waiting)

    def _start_fitting_runs(self) -> None:
        started: list[tuple[_WaitingRun, Lease, int]] = []
        with self._lock:
            for job in list(self._waiting) if not self._closed else []:
                fitting = [k for k in job.sizes if k <= min(self._free, self.capacity)]
                if not fitting:
                    continue
                dp = fitting[-1]
                last = self.spare_cores and len(self._waiting) == 1
                if last and self._free < self._slots and not started:
                    # the last run waits for every core (its threads use them all), unless
                    # the busy ones were leased just now: they stay busy for a whole run
                    continue
                self._waiting.remove(job)
                slots = self._free if last else dp
                size = min(slots, self.capacity)
                cuda = self.devices.kind == DeviceKind.CUDA
                gpus = tuple(self._free_gpus[:size]) if cuda else ()
                self._free_gpus = self._free_gpus[len(gpus) :]
                self._free -= slots
                leased = replace(self.devices, count=size, gpu_ids=gpus)
                started.append((job, Lease(leased, dp), slots))
        for job, lease, slots in started:
            threading.Thread(
                target=self._run_on_lease, args=(job, lease, slots), daemon=True
            ).start()

    def _run_on_lease(self, job: _WaitingRun, lease: Lease, slots: int) -> None:
        try:
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(job.work(lease))
        except BaseException as e:  # delivered through the future
            job.future.set_exception(e)
        finally:
            with self._lock:
                self._free += slots
                self._free_gpus = sorted([*self._free_gpus, *lease.devices.gpu_ids])
            self._start_fitting_runs()
