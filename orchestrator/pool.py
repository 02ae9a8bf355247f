"""Share this machine's free devices among runs that train at the same time.

A sweep (or a queue) holds many runs; the machine has ``capacity`` free devices
(CUDA GPUs, or CPU cores). Each run asks for a list of acceptable dp sizes:
one size when its experiment fixes ``resources.dp``, else every divisor of its
lane count that fits (data is identical on all of them, so any is correct).

Scheduling, each time a run is submitted or a lease is returned::

    for each waiting run, in submission order:
        k = the largest acceptable size <= free devices
        if k exists: lease k devices (the lowest free GPU indexes) and start the run

so a run needing many devices may wait while smaller ones fill the gaps
(first fit; a finite sweep always finishes). A run whose smallest acceptable
size exceeds the capacity can never start: it fails at once, naming the sizes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from orchestrator.devices import Devices

T = TypeVar("T")


class NoFit(RuntimeError):
    """A run asks only for dp sizes larger than every device of the pool together."""


@dataclass(frozen=True)
class Lease:
    """Devices held by one run until it returns them."""

    devices: Devices
    """The leased devices: ``count`` of them, ``gpu_ids`` on CUDA."""

    @property
    def size(self) -> int:
        return self.devices.count


@dataclass
class _Waiting(Generic[T]):
    sizes: list[int]
    work: Callable[[Lease], T]
    future: Future[T]


class DevicePool:
    """Leases of ``devices`` (at most ``capacity`` at once) for concurrent runs."""

    def __init__(self, devices: Devices, capacity: int | None = None) -> None:
        assert capacity is None or capacity >= 1, f"capacity must be >= 1, got {capacity}"
        self.devices = devices
        self.capacity = min(devices.count, capacity) if capacity else devices.count
        self._free_gpus = list(devices.gpu_ids[: self.capacity])
        self._free = self.capacity
        self._waiting: list[_Waiting] = []
        self._closed = False
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        """Devices not leased now."""
        with self._lock:
            return self._free

    def submit(self, sizes: Sequence[int], work: Callable[[Lease], T]) -> Future[T]:
        """Run ``work(lease)`` in a thread once one of ``sizes`` devices is free (module
        docstring); the future holds its result, or :class:`NoFit`, or its exception."""
        future: Future[T] = Future()
        sizes = sorted(set(sizes))
        if not sizes or sizes[0] > self.capacity:
            future.set_exception(
                NoFit(
                    f"needs dp in {sizes} but only {self.capacity} {self.devices.kind} devices "
                    "are free; lower resources.dp or free devices"
                )
            )
            return future
        with self._lock:
            self._waiting.append(_Waiting(sizes, work, future))
        self._dispatch()
        return future

    def close(self, error: BaseException) -> int:
        """Start nothing more: every waiting run's future fails with ``error`` (runs already
        started go on); return how many were waiting."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            self._closed = True
        for job in waiting:
            job.future.set_exception(error)
        return len(waiting)

    def _dispatch(self) -> None:
        started: list[tuple[_Waiting, Lease]] = []
        with self._lock:
            for job in list(self._waiting) if not self._closed else []:
                fitting = [k for k in job.sizes if k <= self._free]
                if not fitting:
                    continue
                size = fitting[-1]
                gpus = tuple(self._free_gpus[:size]) if self.devices.kind == "cuda" else ()
                self._free_gpus = self._free_gpus[len(gpus) :]
                self._free -= size
                self._waiting.remove(job)
                started.append((job, Lease(replace(self.devices, count=size, gpu_ids=gpus))))
        for job, lease in started:
            threading.Thread(target=self._run, args=(job, lease), daemon=True).start()

    def _run(self, job: _Waiting, lease: Lease) -> None:
        try:
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(job.work(lease))
        except BaseException as e:  # delivered through the future
            job.future.set_exception(e)
        finally:
            with self._lock:
                self._free += lease.size
                self._free_gpus = sorted([*self._free_gpus, *lease.devices.gpu_ids])
            self._dispatch()
