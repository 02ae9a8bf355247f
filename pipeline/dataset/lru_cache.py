"""``LruCache``: a thread-safe map that keeps its most recently used entries only."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``capacity`` entries; adding one past it forgets the least recently used."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The entry of ``key`` (now the most recently used), or None."""
        with self._lock:
            return self._get_unlocked(key)

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` as ``key``'s entry, the most recently used."""
        with self._lock:
            self._put_unlocked(key, value)

    def get_or_add(self, key: K, make: Callable[[], V]) -> V:
        """The entry of ``key``, made by ``make()`` (under the lock, so once) if missing."""
        with self._lock:
            value = self._get_unlocked(key)
            if value is None:
                value = make()
                self._put_unlocked(key, value)
            return value

    def _get_unlocked(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def _put_unlocked(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
