"""Keeping other users' load out of the measurements: the machine is shared.

A measurement taken while someone else's job holds a core measures that job.
``NoiseGuard`` waits for a quiet machine before each measurement and runs a
measurement again when other processes used much CPU during it, both within one
time budget for the whole run, so that the run still ends in time on a machine
that never gets quiet. Every kept measurement carries the other load it saw
(``Throughput.other_load_percent``), and the tables show it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.timing import machine_busy_seconds

QUIET_PERCENT = 20.0
"""A measurement starts once the machine's CPU use (0-100, all cores) is at most this."""
NOISY_PERCENT = 15.0
"""A measurement during which other processes used more than this is run again."""
SAMPLE_S = 0.5
POLL_S = 2.0


def machine_load_percent() -> float | None:
    """The machine's CPU use over ``SAMPLE_S`` (0-100, all cores; None without ``/proc/stat``)."""
    before = machine_busy_seconds()
    time.sleep(SAMPLE_S)
    after = machine_busy_seconds()
    if before is None or after is None:
        return None
    return 100 * (after - before) / (SAMPLE_S * (os.cpu_count() or 1))


def child_result_load(output: dict[str, Any]) -> float | None:
    """The other load a child measurement saw (``benchmarks.child``'s output), if it ran."""
    return output.get("result", {}).get("other_load_percent") if output["ok"] else None


@dataclass
class NoiseGuard:
    """Waits for quiet and repeats disturbed measurements, within ``budget_s`` per run."""

    budget_s: float
    spent_s: float = 0.0
    load_of: Callable[[dict[str, Any]], float | None] = child_result_load
    """Reads the other load a measurement's output saw (None: not known)."""

    def _wait_quiet(self) -> None:
        while self.spent_s < self.budget_s:
            load = machine_load_percent()
            if load is None or load <= QUIET_PERCENT:
                return
            time.sleep(POLL_S)
            self.spent_s += POLL_S + SAMPLE_S

    def measure(self, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a measurement (a child's JSON output) until it is undisturbed or the budget
        is spent; return the last output with ``attempts`` and the other loads it discarded."""
        discarded: list[float] = []
        while True:
            self._wait_quiet()
            start = time.monotonic()
            output = run()
            load = self.load_of(output)
            if load is None or load <= NOISY_PERCENT or self.spent_s >= self.budget_s:
                return {**output, "attempts": len(discarded) + 1, "discarded_loads": discarded}
            self.spent_s += time.monotonic() - start
            discarded.append(load)
