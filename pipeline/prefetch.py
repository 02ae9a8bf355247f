"""``BackgroundIterator``: run a producer generator on a thread, ahead of its consumer.

The queue between them is bounded (``maxsize`` items), so the producer blocks
when the consumer falls behind: memory stays bounded. Errors raised by the
producer reach the consumer at the position they occurred; ``close()`` stops
the producer and joins its thread, whether the consumer finished, failed or
stopped early.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Generator
from typing import Generic, TypeVar

T = TypeVar("T")

_ITEM, _END, _ERROR = "item", "end", "error"
_POLL_S = 0.05


class BackgroundIterator(Generic[T]):
    """Iterate ``producer`` on a daemon thread, keeping at most ``maxsize`` items ready."""

    def __init__(self, producer: Generator[T, None, None], maxsize: int, name: str) -> None:
        assert maxsize >= 1, f"maxsize must be >= 1, got {maxsize}"
        self._producer = producer
        self._queue: queue.Queue[tuple[str, object]] = queue.Queue(maxsize)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_producer, name=name, daemon=True)
        self._thread.start()

    def _run_producer(self) -> None:
        try:
            for item in self._producer:
                if not self._enqueue_unless_stopped(_ITEM, item):
                    return
            self._enqueue_unless_stopped(_END, None)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._enqueue_unless_stopped(_ERROR, exc)
        finally:
            self._producer.close()  # a generator must be closed by the thread running it

    def _enqueue_unless_stopped(self, kind: str, value: object) -> bool:
        """Block until there is room (or the consumer has gone); False if stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put((kind, value), timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> BackgroundIterator[T]:
        return self

    def __next__(self) -> T:
        kind, value = self._queue.get()
        if kind == _ITEM:
            return value  # type: ignore[return-value]
        self._stop.set()
        if kind == _END:
            raise StopIteration
        assert isinstance(value, BaseException)
        raise value

    def close(self) -> None:
        """Stop the producer and wait for its thread to end."""
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=_POLL_S)
        self._thread.join()
