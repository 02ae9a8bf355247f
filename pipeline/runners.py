"""Runners execute a stage's stateless work function; results are always consumed in order.

``inline``, ``threads`` or ``processes`` (spawn). A lane takes results back in the order it
submitted them, so the runner type and its parallelism are pure performance knobs: they
never change the data. A process worker that dies breaks the pool: every pending ticket
then raises instead of hanging.

Design: docs/design/pipeline_lanes.md
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

I = TypeVar("I")  # noqa: E741 - item type
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class RunnerKind(StrEnum):
    """Where a stage's work runs (``options(runner=...)``; performance only)."""

    INLINE = "inline"
    """In the consumer, when its result is asked for."""
    THREADS = "threads"
    """On a thread pool."""
    PROCESSES = "processes"
    """On a pool of spawned processes."""


_installed_work: Callable[[Any], Any] | None = None


class Ticket(Protocol[R_co]):
    """Handle of a submitted work item."""

    def result(self) -> R_co:
        """Block until the item is done; return its result or raise its error."""
        ...


class _DeferredTicket(Generic[R]):
    """An inline ticket: the work runs when its result is first asked for."""

    def __init__(self, work: Callable[[Any], R], item: Any) -> None:
        self._work, self._item = work, item

    def result(self) -> R:
        return self._work(self._item)


def _install_work(work: Callable[[Any], Any]) -> None:
    global _installed_work
    _installed_work = work
    if (close := getattr(work, "close", None)) is not None:
        # A pool's worker runs its finalizers when it stops (not atexit: it leaves by _exit).
        multiprocessing.util.Finalize(None, close, exitpriority=10)


def _run_installed(item: Any) -> Any:
    assert _installed_work is not None, "process worker started without its work function"
    return _installed_work(item)


class Runner(Generic[I, R]):
    """Runs one stage's work function inline, on threads or on processes."""

    def __init__(
        self, kind: RunnerKind, parallelism: int, name: str, work: Callable[[I], R]
    ) -> None:
        assert parallelism >= 0, f"parallelism must be >= 0, got {parallelism}"
        self.kind = RunnerKind.INLINE if parallelism == 0 else RunnerKind(kind)
        self.parallelism = parallelism
        self.name = name
        self._work = work
        self._closed = False
        self._pool: Executor | None = None
        if self.kind is RunnerKind.THREADS:
            self._pool = ThreadPoolExecutor(
                max_workers=parallelism, thread_name_prefix=f"zephon-{name}"
            )
        elif self.kind is RunnerKind.PROCESSES:
            self._pool = ProcessPoolExecutor(
                max_workers=parallelism,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_install_work,
                initargs=(work,),
            )

    def submit(self, item: I) -> Ticket[R]:
        """Schedule the work on ``item``; the ticket's ``result()`` gives its value."""
        if self._pool is None:
            return _DeferredTicket(self._work, item)
        if self.kind is RunnerKind.PROCESSES:
            future: Future[R] = self._pool.submit(_run_installed, item)
        else:
            future = self._pool.submit(self._work, item)
        return future

    def close(self) -> None:
        """Stop the workers (queued items that have not started are cancelled), then let the
        work write what it holds back (its ``close``, where it has one)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(self._work, "close", None)
        if close is not None and not self._closed and self.kind is not RunnerKind.PROCESSES:
            close()
        self._closed = True
