"""orchestrator.service.pool: leases never exceed the free devices, GPUs are never shared, and
runs that can never fit fail at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import NoFit
from orchestrator.machine.devices import Devices
from orchestrator.service.pool import DevicePool, Lease

GPUS = Devices("cuda", 4, "H100", (0, 1, 2, 3))


def test_largest_fitting_size_and_disjoint_gpus() -> None:
    pool = DevicePool(GPUS)
    release = threading.Event()
    held: list[Lease] = []

    def hold(lease: Lease) -> int:
        held.append(lease)
        release.wait(5)
        return lease.size

    first = pool.submit([1, 2, 4], hold)  # takes all 4
    second = pool.submit([1, 2], hold)  # waits
    time.sleep(0.2)
    assert [lease.size for lease in held] == [4] and pool.free == 0 and not second.done()
    release.set()
    assert first.result(5) == 4 and second.result(5) == 2
    assert held[1].devices.gpu_ids == (0, 1)
    assert pool.free == 4


@settings(max_examples=25, deadline=None)
@given(
    capacity=st.integers(1, 6),
    requests=st.lists(
        st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=3), max_size=8
    ),
)
def test_concurrent_leases_never_exceed_capacity_or_share_gpus(
    capacity: int, requests: list[list[int]]
) -> None:
    devices = Devices("cuda", capacity, "gpu", tuple(range(capacity)))
    pool = DevicePool(devices)
    lock = threading.Lock()
    in_use: set[int] = set()
    peak = [0]

    def work(lease: Lease) -> tuple[int, ...]:
        with lock:
            assert not in_use & set(lease.devices.gpu_ids), "a GPU leased twice"
            in_use.update(lease.devices.gpu_ids)
            peak[0] = max(peak[0], len(in_use))
        time.sleep(0.01)
        with lock:
            in_use.difference_update(lease.devices.gpu_ids)
        return lease.devices.gpu_ids

    futures = [(sizes, pool.submit(sizes, work)) for sizes in requests]
    for sizes, future in futures:
        if min(sizes) > capacity:
            with pytest.raises(NoFit, match="needs dp in"):
                future.result(5)
        else:
            gpus = future.result(5)
            assert len(gpus) in sizes and len(gpus) <= capacity
    assert peak[0] <= capacity and pool.free == capacity


def test_cpu_capacity_cap_and_failing_work_returns_its_lease() -> None:
    pool = DevicePool(Devices("cpu", 8, "cpu"), capacity=2)
    assert pool.capacity == 2
    with pytest.raises(NoFit):
        pool.submit([4], lambda lease: None).result(5)

    def boom(lease: Lease) -> None:
        raise ValueError("training failed")

    with pytest.raises(ValueError, match="training failed"):
        pool.submit([2], boom).result(5)
    assert pool.free == 2
    assert pool.submit([1, 2], lambda lease: lease.devices.count).result(5) == 2


def test_the_last_run_waits_for_every_core_and_gets_them_as_threads() -> None:
    """Three dp-1 runs on 2 cores: two start with a core each; the third waits until both
    are free (not on the first one freed, to run alone on it later) and gets both."""
    pool = DevicePool(Devices("cpu", 2, "cpu"), spare_cores=True)
    runs = HeldRuns(3)
    futures = pool.submit_all(runs.asking([1], [1], [1]))
    gates, leases = runs.gates, runs.leases
    time.sleep(0.2)
    assert sorted(leases) == [0, 1] and all(x.size == 1 and x.dp == 1 for x in leases.values())
    runs.release(0, futures)
    assert 2 not in leases  # one core is free, the other still held
    runs.release(1, futures)
    assert (leases[2].dp, leases[2].size) == (1, 2)
    gates[2].set()
    assert futures[2].result(5) == 2 and pool.free == 2

    # Two runs on 2 free cores: the last does not wait for the core the other just took.
    runs = HeldRuns(2)
    futures = pool.submit_all(runs.asking([1], [1]))
    gates, leases = runs.gates, runs.leases
    time.sleep(0.2)
    assert sorted(leases) == [0, 1] and all(x.size == 1 for x in leases.values())
    for gate in gates:
        gate.set()
    assert [f.result(5) for f in futures] == [1, 1] and pool.free == 2

    def shape(lease: Lease) -> tuple[int, int]:
        return lease.dp, lease.size

    cpus = Devices("cpu", 2, "cpu")
    assert DevicePool(cpus, spare_cores=True).submit([1], shape).result(5) == (1, 2)
    assert DevicePool(cpus).submit([1], shape).result(5) == (1, 1)


def test_an_extra_process_starts_a_run_beside_a_wide_one_with_no_more_threads_than_cores() -> None:
    """2 cores and one extra process: a dp-2 run and a dp-1 run start together (3 processes),
    the next dp-2 run waits for 2 free slots; no lease holds more cores than there are."""
    pool = DevicePool(Devices("cpu", 2, "cpu"), extra_processes=1)
    runs = HeldRuns(3)
    futures = pool.submit_all(runs.asking([2], [2], [1]))
    gates, leases = runs.gates, runs.leases
    time.sleep(0.2)
    assert sorted(leases) == [0, 2] and pool.free == 0
    assert (leases[0].dp, leases[0].size) == (2, 2) and (leases[2].dp, leases[2].size) == (1, 1)
    runs.release(2, futures)
    assert 1 not in leases  # one slot free, the dp-2 run needs two
    runs.release(0, futures)
    assert (leases[1].dp, leases[1].size) == (2, 2)
    gates[1].set()
    assert futures[1].result(5) == 2 and pool.free == 3
    # A GPU pool never oversubscribes.
    assert DevicePool(GPUS, extra_processes=1).free == GPUS.count


class HeldRuns:
    """Runs that record their lease and hold it until their gate opens (at most 5 s)."""

    def __init__(self, count: int) -> None:
        self.gates = [threading.Event() for _ in range(count)]
        self.leases: dict[int, Lease] = {}

    def asking(self, *sizes: list[int]) -> list[tuple[list[int], Callable[[Lease], int]]]:
        """One run per entry of ``sizes`` (its acceptable dp sizes), numbered in order."""
        return [(asked, lambda lease, n=n: self.hold(n, lease)) for n, asked in enumerate(sizes)]

    def release(self, number: int, futures: list[Future[int]]) -> None:
        """Let run ``number`` end, and give the pool a moment to start what fits."""
        self.gates[number].set()
        futures[number].result(5)
        time.sleep(0.2)

    def hold(self, number: int, lease: Lease) -> int:
        self.leases[number] = lease
        self.gates[number].wait(5)
        return lease.size
