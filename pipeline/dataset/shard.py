"""Shards: what a dataset knows of each file, before and after indexing it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline import io
from pipeline.errors import DataError
from pipeline.formats import Compression, FormatName, detect_format
from pipeline.formats.megatron import index_file


class ShardIdentity(StrEnum):
    """What a shard's fingerprint is the SHA-256 of."""

    CONTENT = "content"
    """Its bytes: the same wherever they are read from."""
    REMOTE_VERSION = "remote-version"
    """Its server's ETag and size (a shard read by range, never read whole)."""


@dataclass(frozen=True)
class ShardMetadata:
    """What the plan knows of a shard without reading it."""

    size: int
    """Bytes of the file (for a remote shard, as its server reports)."""
    version: tuple[Any, ...]
    """What changes when the file is rewritten: (mtime_ns, inode) of a local file, checked
    with the size when the shard is first read; (ETag, modification time) of a remote one,
    of which the ETag is checked then for a shard read by range, and only the size for a
    downloaded one (its copy is validated against the server)."""


@dataclass(frozen=True)
class Shard:
    """One file of a dataset, as resolved at construction (nothing read yet)."""

    source: Path | str
    """A local file, or the URL of a remote one."""
    format: FormatName
    compression: Compression | None

    @classmethod
    def at(cls, source: Path | str) -> Shard:
        """The shard at ``source``, its format and compression told by its file name."""
        return cls(source, *detect_format(source))

    @property
    def remote(self) -> bool:
        """Whether the shard is read from a server (its ``source`` is a URL)."""
        return isinstance(self.source, str)

    def manifest_entry(self, metadata: ShardMetadata) -> list[Any]:
        """The shard's part of its dataset's manifest fingerprint (the plan's, from
        ``metadata``): format, compression and size, and a remote shard's ETag where its
        server sends one, so an object replaced by one of the same size changes the contract
        without being downloaded. A local file's entry is the same under any path; a Megatron
        shard's adds its ``.idx``'s size (its documents are there)."""
        entry: list[Any] = [self.format, self.compression, metadata.size]
        if self.format is FormatName.MEGATRON:  # local only: the plan checked its .idx
            entry.append(os.stat(index_file(Path(self.source))).st_size)
        etag = metadata.version[0] if self.remote else None
        return entry if etag is None else [*entry, etag]

    def query_metadata(self) -> ShardMetadata:
        """The shard's size and version: a stat, or one metadata request to its server.
        Raises ``DataError`` naming the file if it cannot be reached."""
        if self.remote:
            remote = io.remote_validators(str(self.source))
            return ShardMetadata(int(remote["size"] or 0), (remote["etag"], remote["modified"]))
        try:
            st = os.stat(self.source)
        except OSError as e:
            raise DataError(f"cannot stat {self.source}: {e}") from e
        return ShardMetadata(st.st_size, (st.st_mtime_ns, st.st_ino))


@dataclass(frozen=True)
class IndexedShard:
    """What indexing one shard established, kept for the dataset's life (a few fields a
    shard); the index itself is mapped on demand and only a bounded number stay mapped."""

    fingerprint: str
    """SHA-256 of the shard's raw bytes, or of its remote version if read by range."""
    local_path: Path | None
    """The shard, or the local copy of a remote one; None if read by range."""
    stat: tuple[int, int | str]
    """(size, mtime_ns) of ``local_path``; (size, ETag) if read by range."""
    read_path: Path | str
    """The local path, its decompressed copy, or the URL read by range."""
    records: int
    """Usable records."""
    skipped: dict[str, int]
    """Bad records by reason."""
    examples: dict[str, list[int]]
    """The first lines of each reason."""


def file_version_key(path: Path, st: os.stat_result) -> str:
    """A name for one version of one file: SHA-256 of its path, size, mtime and inode."""
    return hashlib.sha256(
        f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode()
    ).hexdigest()
