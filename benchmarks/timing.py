"""Wall and CPU time, peak memory, and the loop that times a loader."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

B = TypeVar("B")


@dataclass
class Throughput:
    """What one timed run of a variant produced."""

    tokens: int
    """Tokens delivered: label tokens of the batches (for raw tiktoken, tokens encoded)."""
    seconds: float
    """Wall time of the timed section, worker start-up and shutdown included."""
    cpu_s: float
    """CPU seconds of the process and of the child processes it reaped during the section."""
    first_batch_s: float | None = None
    """Wall time from the start of the section to the first batch (None: not a loader)."""
    steady_tokens_per_s: float | None = None
    """Throughput after the first batch: start-up (workers, buffer fill) excluded."""
    other_load_percent: float | None = None
    """CPU used by other processes on the machine during the section, in percent of all
    cores (None where ``/proc/stat`` is missing): high values mean a contaminated run."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Variant-specific details (pipeline counters, worker layout, ...)."""

    @property
    def tokens_per_s(self) -> float:
        """Throughput of the run."""
        return self.tokens / self.seconds


def _cpu_seconds() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def machine_busy_seconds() -> float | None:
    """CPU seconds all processes of the machine used since boot (``/proc/stat``; Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    """Context manager measuring wall and CPU time; ``mark_first()`` notes the first batch.

    It also measures what the rest of the machine used meanwhile: the machine's busy CPU
    time minus this process's (and its reaped workers').
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_s = 0.0
        self.first_batch_s: float | None = None
        self.other_load_percent: float | None = None
        self._t0 = 0.0
        self._cpu0 = 0.0
        self._busy0: float | None = None

    def __enter__(self) -> Stopwatch:
        self._busy0 = machine_busy_seconds()
        self._cpu0 = _cpu_seconds()
        self._t0 = time.perf_counter()
        return self

    def mark_first(self) -> None:
        """Record the time of the first batch (later calls do nothing)."""
        if self.first_batch_s is None:
            self.first_batch_s = time.perf_counter() - self._t0

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.cpu_s = _cpu_seconds() - self._cpu0
        busy = machine_busy_seconds()
        if busy is not None and self._busy0 is not None and self.seconds > 0:
            other = max(0.0, busy - self._busy0 - self.cpu_s)
            self.other_load_percent = 100 * other / (self.seconds * (os.cpu_count() or 1))

    def result(self, tokens: int, first_batch_tokens: int = 0, **extra: Any) -> Throughput:
        """The ``Throughput`` of the finished section (``first_batch_tokens``: for the
        throughput after the first batch)."""
        steady = None
        if self.first_batch_s is not None and self.seconds > self.first_batch_s:
            steady = (tokens - first_batch_tokens) / (self.seconds - self.first_batch_s)
        return Throughput(
            tokens,
            self.seconds,
            self.cpu_s,
            self.first_batch_s,
            steady,
            self.other_load_percent,
            extra,
        )


def time_batches(
    loader: Iterable[B],
    tokens_of: Callable[[B], int],
    enough: Callable[[B, int], bool] | None = None,
) -> Throughput:
    """Iterate ``loader`` (``iter()`` is inside the timed section) and count its tokens.

    Stops when the loader ends or ``enough(batch, tokens_so_far)`` is true; the
    iterator is then closed inside the timed section, so shutting workers down counts.
    """
    tokens = 0
    first_batch_tokens = 0
    with Stopwatch() as watch:
        batches = iter(loader)
        for batch in batches:
            watch.mark_first()
            tokens += tokens_of(batch)
            first_batch_tokens = first_batch_tokens or tokens
            if enough is not None and enough(batch, tokens):
                break
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        del batches
    return watch.result(tokens, first_batch_tokens)


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MB (``getrusage``; Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TreeMemory:
    """Samples the summed RSS of this process and all its descendants (workers) while open.

    ``peak_mb`` is an upper bound of the memory the variant holds: pages shared between
    processes (a forked DataLoader worker's copy-on-write pages) count once per process.
    ``getrusage(RUSAGE_CHILDREN)`` is no substitute: Linux carries a child's peak RSS
    across ``exec``, so a spawned worker reports its parent's size at fork time.
    """

    def __init__(self, interval_s: float = 0.1) -> None:
        import psutil  # the bench extra; imported here so that the smoke test needs none

        self._process = psutil.Process()
        self._psutil = psutil
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._sample_until_stopped, name="bench-memory", daemon=True
        )
        self.peak_mb = 0.0

    def _sample_rss(self) -> None:
        total = 0
        for proc in [self._process, *self._process.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except self._psutil.Error:  # the process ended between listing and reading
                continue
        self.peak_mb = max(self.peak_mb, total / 2**20)

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample_rss()

    def __enter__(self) -> TreeMemory:
        self._sample_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
