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
(first fit; a finite sweep always finishes). With ``spare_cores`` (CPU), the
last waiting run waits until every core is free and gets them all, its processes
using the spare ones as threads, instead of starting on the one core a finished
run left and keeping it alone once the others end (the debug model at dp 1
measured about twice as fast on 2 threads as on 1 on 2 AVX2 cores, so the tail of
a sweep halves; it suits a batch of similar runs, like a sweep's). It does not wait
for cores leased in the same pass (two dp-1 runs on 2 free cores start together):
those stay busy for a whole run. A run whose smallest acceptable
size exceeds the capacity can never start: it fails at once, naming the sizes.

With ``extra_processes`` (CPU), the runs' processes may exceed the cores by that many:
a lease still holds at most ``capacity`` cores (its threads), but a run of dp ``k``
takes ``k`` process slots out of ``capacity + extra_processes``. A CPU run leaves part of
its cores idle (a dp-2 run of ``zephon_mini`` used 155% of 2 cores, its ranks waiting
on each other in every all-reduce; start-up, evaluation and bookkeeping add more), and
one more process fills it: a dp-2 and a dp-1 run side by side on 2 AMD EPYC cores took
36 s, one after the other 49 s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from orchestrator.errors import NoFit
from orchestrator.run.devices import Devices

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


@dataclass
class _Waiting(Generic[T]):
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
        self.spare_cores = spare_cores and devices.kind == "cpu"
        """CPU: the last waiting run waits for, and gets, every core (module docstring)."""
        self.capacity = min(devices.count, capacity) if capacity else devices.count
        self.extra_processes = extra_processes if devices.kind == "cpu" else 0
        """CPU: how many processes the runs may have beyond the cores (module docstring)."""
        self._slots = self.capacity + self.extra_processes
        self._free_gpus = list(devices.gpu_ids[: self.capacity])
        self._free = self._slots
        self._waiting: list[_Waiting] = []
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
                    self._waiting.append(_Waiting(sizes, work, future))
                futures.append(future)
        self._dispatch()
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

    def _dispatch(self) -> None:
        started: list[tuple[_Waiting, Lease, int]] = []
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
                gpus = tuple(self._free_gpus[:size]) if self.devices.kind == "cuda" else ()
                self._free_gpus = self._free_gpus[len(gpus) :]
                self._free -= slots
                leased = replace(self.devices, count=size, gpu_ids=gpus)
                started.append((job, Lease(leased, dp), slots))
        for job, lease, slots in started:
            threading.Thread(target=self._run, args=(job, lease, slots), daemon=True).start()

    def _run(self, job: _Waiting, lease: Lease, slots: int) -> None:
        try:
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(job.work(lease))
        except BaseException as e:  # delivered through the future
            job.future.set_exception(e)
        finally:
            with self._lock:
                self._free += slots
                self._free_gpus = sorted([*self._free_gpus, *lease.devices.gpu_ids])
            self._dispatch()
