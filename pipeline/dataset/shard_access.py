"""``ShardAccess``: how a dataset gets at its shard files: their metadata, their indexes
(built, or mapped from its ``IndexCache``) and handles to read them, each checked to be the
file the plan saw and that was indexed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import io
from pipeline.dataset.bad_records import BadRecordCheck, BadRecordPolicy
from pipeline.dataset.index_cache import IndexCache
from pipeline.dataset.pretokenized import TokenDeclaration
from pipeline.dataset.record_key import RecordPointer
from pipeline.dataset.shard import IndexedShard, Shard, ShardMetadata, file_version_key
from pipeline.errors import ConfigError, DataError
from pipeline.formats import (
    ArrowFormat,
    FormatName,
    JsonlFormat,
    MdsFormat,
    MegatronFormat,
    ParquetFormat,
    ShardFormat,
    ShardIndex,
    TextFormat,
    TokenArrayFormat,
    TokenFormat,
)
from pipeline.formats.megatron import combined_fingerprint, index_file


class ShardAccess:
    """The shard files of the dataset named ``dataset``, whose text is ``field`` (or whose
    token ids are those of ``tokens``, a pre-tokenized dataset); its cache under
    ``cache_dir`` and its remote IO (``io_options``, see ``Dataset``)."""

    def __init__(
        self,
        dataset: str,
        field: str,
        *,
        cache_dir: Path,
        on_bad_record: BadRecordPolicy,
        io_options: Mapping[str, Any] | None,
        tokens: TokenDeclaration | None = None,
    ) -> None:
        self.dataset = dataset
        self.field = field
        self.tokens = tokens
        self.cache_dir = cache_dir
        self._index_cache = IndexCache(cache_dir)
        self._bad_records = BadRecordCheck(dataset, field, on_bad_record)
        self.set_io_options(io_options)
        self._init_formats()

    def set_io_options(self, io_options: Mapping[str, Any] | None) -> None:
        """Configure remote shard IO (``shard_cache``); raises ConfigError naming the dataset
        if invalid."""
        try:
            self.shard_cache = io.ShardCache(io.IOOptions.parse(io_options), self.cache_dir)
        except ConfigError as e:
            raise ConfigError(f"dataset {self.dataset!r}: {e}") from e

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_formats")  # readers keep per-process caches and locks
        state.pop("_token_formats")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_formats()

    def _init_formats(self) -> None:
        self._mds = MdsFormat()
        self._token_formats: dict[FormatName, TokenFormat] = {}
        if self.tokens is not None:  # loads the declared tokenizer: only where declared
            files = self.tokens.files()
            self._token_formats = {
                f.name: f for f in (MegatronFormat(files), TokenArrayFormat(files))
            }
        self._formats: dict[FormatName, ShardFormat | TokenFormat] = {
            **{
                f.name: f
                for f in (JsonlFormat(), TextFormat(), ParquetFormat(), ArrowFormat(), self._mds)
            },
            **self._token_formats,
        }

    def reads_by_range(self, shard: Shard) -> bool:
        """Whether ``shard`` is read in place by byte range (a remote Parquet file, with
        ``io_options["remote_read"] = "range"``), not from a downloaded copy."""
        return (
            shard.remote
            and shard.format is FormatName.PARQUET
            and self.shard_cache.remote_read is io.RemoteRead.RANGE
        )

    def query_metadata(self, shard: Shard) -> ShardMetadata:
        """The shard's size and version (``Shard.query_metadata``), errors naming the dataset."""
        try:
            metadata = shard.query_metadata()
            if shard.format.pretokenized:  # a damaged file is refused by the plan
                self._token_format(shard).check(Path(shard.source))
        except DataError as e:
            raise DataError(f"dataset {self.dataset!r}: {e}") from e
        except OSError as e:
            raise DataError(f"dataset {self.dataset!r}: cannot read {shard.source}: {e}") from e
        return metadata

    def _token_format(self, shard: Shard) -> TokenFormat:
        """The reader of a pre-tokenized shard (``Dataset`` refuses them undeclared)."""
        return self._token_formats[shard.format]

    # -- indexing --------------------------------------------------------------

    def index(self, shard: Shard, planned: ShardMetadata | None) -> tuple[IndexedShard, ShardIndex]:
        """Index ``shard`` (or map its cached index), checked against the metadata the plan
        saw (``planned``, if any) and the dataset's ``BadRecordPolicy``."""
        if self.reads_by_range(shard):
            return self._index_by_range(shard, planned)
        try:
            if shard.remote:
                local, _pin = self._pin_remote_copy(shard)  # pinned until indexed
                st = os.stat(local)
                fp = io.content_sha256(local)  # verified by local_copy
            else:
                local = Path(shard.source)
                st = os.stat(local)
            self._check_unchanged(shard, planned, st.st_size, (st.st_mtime_ns, st.st_ino))
            # Every rank of a node reaches the same shards at once: one process hashes and
            # indexes a shard while the others wait, then they all map its cached index.
            with self._index_cache.lock(file_version_key(local, st)):
                if not shard.remote:
                    fp = self._index_cache.content_fingerprint(local, st)
                if shard.format is FormatName.MEGATRON:  # its .idx is part of its content
                    idx = index_file(local)
                    idx_fp = self._index_cache.content_fingerprint(idx, os.stat(idx))
                    fp = combined_fingerprint(fp, idx_fp)
                read_path = local
                if shard.compression:
                    # Without a shared IO cache, remote data stays in the private directory.
                    private = shard.remote and not self.shard_cache.shared
                    root = self.shard_cache.root if private else self.cache_dir
                    read_path = self._index_cache.decompressed_copy(
                        local, shard.compression, fp, root=root
                    )
                index = self.cached_index(shard, fp, read_path)
        except OSError as e:
            raise DataError(f"dataset {self.dataset!r}: cannot index {shard.source}: {e}") from e
        self._bad_records.check(shard.source, index)
        stat = (st.st_size, st.st_mtime_ns)
        indexed = IndexedShard(
            fp, local, stat, read_path, len(index), index.skipped, index.examples
        )
        return indexed, index

    def _index_by_range(
        self, shard: Shard, planned: ShardMetadata | None
    ) -> tuple[IndexedShard, ShardIndex]:
        """Index a remote Parquet shard in place: its footer and text column, by range."""
        url = str(shard.source)
        size, etag, fp = self._query_remote_version(url)
        self._check_unchanged(shard, planned, size, etag)
        with self._index_cache.lock(fp):  # one process of a node indexes it
            index = self.cached_index(shard, fp, url)
        self._bad_records.check(url, index)
        indexed = IndexedShard(
            fp, None, (size, etag), url, len(index), index.skipped, index.examples
        )
        return indexed, index

    def cached_index(self, shard: Shard, fingerprint: str, read_path: Path | str) -> ShardIndex:
        """The cached index of ``shard`` whose content is ``fingerprint``, built from
        ``read_path`` if missing or damaged."""
        fmt = self._formats[shard.format]
        if shard.format is FormatName.MDS and not shard.remote:
            # It may index a decompressed copy: it is told the shard, to check its folder's
            # index.json and to name it in errors.
            fmt = self._mds.for_shard(Path(shard.source))
        return self._index_cache.shard_index(
            fmt,
            fingerprint=fingerprint,
            field=self.field if self.tokens is None else self.tokens.index_key(),
            read_path=read_path,
        )

    def _query_remote_version(self, url: str) -> tuple[int, str, str]:
        """Size, ETag and version fingerprint of a shard read by range, asked of its server."""
        try:
            remote = io.remote_validators(url)
            fingerprint = io.remote_version_fingerprint(url, remote)
        except DataError as e:
            raise DataError(f"dataset {self.dataset!r}: {e}") from e
        return int(remote["size"] or 0), str(remote["etag"]), fingerprint

    def _check_unchanged(
        self, shard: Shard, planned: ShardMetadata | None, size: int, version: object
    ) -> None:
        """A shard must be read as the plan saw it: its size, and its version where the
        first read cannot hash its bytes (a local file's (mtime_ns, inode), a shard read by
        range's ETag); a downloaded copy is checked against its server by ``pipeline.io``."""
        if planned is None:
            return
        if self.reads_by_range(shard):
            now, then = (size, version), (planned.size, planned.version[0])
        elif shard.remote:
            now, then = size, planned.size
        else:
            now, then = (size, version), (planned.size, planned.version)
        if now != then:
            raise DataError(
                f"dataset {self.dataset!r}: shard {shard.source} changed between the plan and "
                f"its first read (size {planned.size} -> {size}, or rewritten in place); "
                "restore it, or plan again (a new run: its data contract changes)"
            )

    # -- reading ---------------------------------------------------------------

    def open(self, shard: Shard, state: IndexedShard) -> tuple[Any, io.CopyPin | None]:
        """A handle to read ``shard`` (indexed as ``state``) once it is checked to be what
        was indexed, and the pin of a remote shard's copy: a size-limited cache does not
        evict a pinned copy (an evicted copy is fetched again, and must hold the same bytes)."""
        pin = None
        try:
            if self.reads_by_range(shard):
                # Each open asks the server again, so a rewrite since indexing is caught.
                size, etag, _ = self._query_remote_version(str(shard.source))
                if (size, etag) != state.stat:
                    raise self.changed_error(shard)
                read_path = state.read_path
            elif shard.remote and not shard.compression:
                copy, pin = self._pin_remote_copy(shard)
                if io.content_sha256(copy) != state.fingerprint:
                    raise self.changed_error(shard)
                read_path = copy
            elif shard.remote:  # read from its decompressed copy, named by its content
                read_path = state.read_path
            else:
                st = os.stat(state.local_path)
                if (st.st_size, st.st_mtime_ns) != state.stat:
                    raise self.changed_error(shard)
                read_path = state.read_path
            return self._formats[shard.format].open(read_path), pin
        except OSError as e:
            raise DataError(
                f"dataset {self.dataset!r}: cannot open shard {shard.source}: {e}"
            ) from e

    def read(
        self, shard: Shard, handle: Any, index: ShardIndex, rows: np.ndarray
    ) -> list[str | None]:
        """Texts of ``rows`` of ``shard`` through ``handle`` (from ``open``); None where a
        record no longer parses."""
        return self._formats[shard.format].read(handle, index, rows, self.field)

    def read_tokens(
        self, shard: Shard, handle: Any, index: ShardIndex, rows: np.ndarray
    ) -> list[np.ndarray]:
        """Token ids of ``rows`` of a pre-tokenized ``shard`` through ``handle``; an array
        shorter than indexed where the file was cut."""
        return self._token_format(shard).read_tokens(handle, index, rows)

    def changed_error(self, shard: Shard, record: RecordPointer | None = None) -> DataError:
        """The error of a shard (or of a record of it) that no longer holds what was indexed."""
        what = f"shard {shard.source}"
        if record is not None:
            what = f"record {record.as_tuple()}: {what}"
        return DataError(
            f"dataset {self.dataset!r}: {what} changed since it "
            "was indexed; restore the original file, or re-create the Dataset to re-index it "
            f"(this changes its fingerprint; if the file is unchanged, delete {self.cache_dir})"
        )

    def _pin_remote_copy(self, shard: Shard) -> tuple[Path, io.CopyPin]:
        try:
            return self.shard_cache.pin(str(shard.source))
        except DataError as e:
            raise DataError(f"dataset {self.dataset!r}: {e}") from e
