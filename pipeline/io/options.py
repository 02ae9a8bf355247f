"""``IOOptions``: how a dataset reads remote shards (its ``io_options``, parsed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.choice import parse_choice
from pipeline.errors import ConfigError

_CACHE_KEYS = {"enabled", "dir", "max_bytes"}


class RemoteRead(StrEnum):
    """How a remote shard is read (``io_options["remote_read"]``)."""

    DOWNLOAD = "download"
    """Whole, into a verified local copy named by the SHA-256 of its bytes (every format)."""
    RANGE = "range"
    """Parquet in place by byte range: the footer, then the text column's chunks of the row
    groups read; identified by the server's ETag and size. Other formats are downloaded."""


@dataclass(frozen=True)
class CacheOptions:
    """``io_options["cache"]``: share local copies of remote shards under ``dir``."""

    enabled: bool = False
    dir: Path | None = None  # None: the Dataset's cache_dir
    max_bytes: int | None = None
    """Bytes of downloaded copies kept; the least recently used copies that no process
    has in use are deleted past it (None: no limit)."""


@dataclass(frozen=True)
class IOOptions:
    """Parsed ``io_options`` of a ``Dataset``."""

    cache: CacheOptions = CacheOptions()
    remote_read: RemoteRead = RemoteRead.DOWNLOAD
    """How remote shards are read; ``download`` keeps content fingerprints (the default)."""

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> IOOptions:
        """Parse ``{"cache": {"enabled": bool, "dir": str | None, "max_bytes": int | None},
        "remote_read": "download" | "range"}``; raise ``ConfigError`` if invalid."""
        if options is None:
            return cls()
        _check_keys("io_options", options, {"cache", "remote_read"})
        remote_read = parse_choice(
            RemoteRead, options.get("remote_read", RemoteRead.DOWNLOAD), 'io_options["remote_read"]'
        )
        cache = options.get("cache", {})
        _check_keys('io_options["cache"]', cache, _CACHE_KEYS)
        enabled = cache.get("enabled", False)
        if not isinstance(enabled, bool):
            raise ConfigError(
                f'io_options["cache"]["enabled"] must be True or False, got {enabled!r}'
            )
        cache_dir = cache.get("dir")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise ConfigError(
                f'io_options["cache"]["dir"] must be a directory path or None, got {cache_dir!r}'
            )
        max_bytes = cache.get("max_bytes")
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0
        ):
            raise ConfigError(
                f'io_options["cache"]["max_bytes"] must be an integer >= 0 or None, got '
                f"{max_bytes!r}"
            )
        directory = Path(cache_dir).expanduser() if cache_dir else None
        return cls(CacheOptions(enabled, directory, max_bytes), remote_read)


def _check_keys(what: str, value: object, known: set[str]) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a dict, got {value!r}")
    unknown = sorted(str(k) for k in set(value) - known)
    if unknown:
        raise ConfigError(f"{what}: unknown keys {unknown}; known keys: {sorted(known)}")
