"""Runners execute a stage's stateless work items; results are always consumed in order.

A lane submits its chunks with increasing sequence numbers and takes results
back in exactly that order (each lane keeps a FIFO of tickets), so whichever
worker finishes first, the stateful accumulators downstream see the same
input. The runner type and its parallelism are therefore pure performance
knobs: they never change the data.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

R = TypeVar("R")

RUNNER_TYPES = ("inline", "threads")


class Ticket(Protocol[R]):
    """Handle of a submitted work item."""

    def result(self) -> R:
        """Block until the item is done; return its result or raise its error."""
        ...


class _Deferred:
    """An inline ticket: the work runs when its result is first asked for."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._fn, self._args = fn, args

    def result(self) -> Any:
        return self._fn(*self._args)


class Runner:
    """Runs work items inline (``parallelism=0`` or ``kind="inline"``) or on a thread pool."""

    def __init__(self, kind: str, parallelism: int, name: str) -> None:
        assert kind in RUNNER_TYPES, f"runner must be one of {RUNNER_TYPES}, got {kind!r}"
        assert parallelism >= 0, f"parallelism must be >= 0, got {parallelism}"
        self.kind = "inline" if parallelism == 0 else kind
        self.parallelism = parallelism
        self._pool = (
            ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix=f"zephon-{name}")
            if self.kind == "threads"
            else None
        )

    def submit(self, fn: Callable[..., R], *args: Any) -> Ticket[R]:
        """Schedule ``fn(*args)``; the returned ticket's ``result()`` gives its value."""
        if self._pool is None:
            return _Deferred(fn, args)
        future: Future[R] = self._pool.submit(fn, *args)
        return future

    def close(self) -> None:
        """Stop the workers; queued items that have not started are cancelled."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
