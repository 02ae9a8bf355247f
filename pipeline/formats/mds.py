"""``MdsFormat``: samples of a Mosaic Streaming (MDS) shard, their text in one ``str``
column; and the shard files of an MDS folder, as its ``index.json`` lists them.

A shard, as ``MDSWriter`` writes it: uint32 ``num_samples``; ``num_samples + 1`` uint32
file offsets of the samples' starts (the last: the file's end); the writer's config as
JSON (``column_names``, ``column_encodings``, ``column_sizes``); then the samples, each a
uint32 size per variable-size column, followed by every column's bytes in column order. A
shard describes itself, so a shard is read without its folder's ``index.json``; where that
is beside it, its sample count and size are checked against it too.

A compressed shard (``shard.00000.mds.zstd`` or ``.gz``) is a compressed MDS shard: the
dataset fingerprints the file as stored and indexes and reads a decompressed copy (like
compressed JSONL). Remote shards are downloaded whole by the IO cache, never read by byte
range: the index needs every sample's text length, so indexing reads every byte anyway.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import ConfigError, DataError
from pipeline.formats.shard_format import FormatName, ReadOnlyFile, read_utf8_ranges
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason

INDEX_FILE = "index.json"
TEXT_ENCODING = "str"
"""The only MDS column encoding read as text (``bytes`` may hold anything)."""
_U32 = np.dtype("<u4")


@dataclass(frozen=True)
class MdsShardEntry:
    """What a folder's ``index.json`` says of one of its shards."""

    file: Path
    """The shard file on disk: the compressed one if present, else the raw one."""
    samples: int
    stored_bytes: int
    """Size of ``file``."""
    raw_bytes: int
    """Size of the shard uncompressed."""
    raw_hashes: dict[str, str]
    """Digests of the uncompressed shard by algorithm (``MDSWriter(hashes=...)``)."""


@dataclass(frozen=True)
class _Layout:
    """Where a shard's samples and the text column within them are."""

    offsets: np.ndarray
    """int64, ``num_samples + 1`` file offsets."""
    names: list[str]
    encodings: list[str]
    sizes: list[int | None]
    """Bytes of each fixed-size column; None for variable-size ones."""


def mds_folder_files(folder: Path) -> list[Path]:
    """The shard files of the MDS folder ``folder``, in its ``index.json``'s order; a
    ``ConfigError`` for a listed shard that is missing, a ``DataError`` for one whose size
    is not the index's (truncated or replaced): a stat each, nothing read."""
    entries = read_mds_index(folder)
    for entry in entries:
        size = entry.file.stat().st_size
        if size != entry.stored_bytes:
            raise DataError(
                f"{entry.file}: {size} bytes where {folder / INDEX_FILE} says "
                f"{entry.stored_bytes}: the shard is truncated or replaced; re-copy the folder"
            )
    return [entry.file for entry in entries]


def read_mds_index(folder: Path) -> list[MdsShardEntry]:
    """The shards that ``folder/index.json`` lists; ``ConfigError`` naming a missing one."""
    index_path = folder / INDEX_FILE
    try:
        shards = json.loads(index_path.read_bytes())["shards"]
        listed = [(s["zip_data"], s["raw_data"], int(s["samples"]), s["format"]) for s in shards]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{index_path}: not an MDS index ({e!r}); re-copy the folder or re-write it "
            "with MDSWriter"
        ) from e
    entries = []
    for zipped, raw, samples, fmt in listed:
        if fmt != "mds":
            raise ConfigError(
                f"{index_path}: shard {raw['basename']!r} is in Streaming's {fmt!r} format; "
                "only MDS shards are read: write the dataset with MDSWriter"
            )
        # Streaming's own cache may keep the raw file and drop the compressed one.
        stored = next(
            (d for d in (zipped, raw) if d is not None and (folder / d["basename"]).is_file()),
            None,
        )
        if stored is None:
            names = [d["basename"] for d in (zipped, raw) if d is not None]
            raise ConfigError(
                f"{index_path} lists a shard that is missing: {' or '.join(names)}; "
                "re-copy the folder or re-write it"
            )
        entries.append(
            MdsShardEntry(
                folder / stored["basename"],
                samples,
                stored["bytes"],
                raw["bytes"],
                dict(raw.get("hashes") or {}),
            )
        )
    return entries


def _find_entry(shard: Path) -> MdsShardEntry | None:
    """The ``index.json`` entry of ``shard``, if the folder holding it has one that lists it."""
    if not (shard.parent / INDEX_FILE).is_file():
        return None
    return next((e for e in read_mds_index(shard.parent) if e.file == shard), None)


def _read_layout(data: bytes, shard: Path) -> _Layout:
    """The sample offsets and columns of a shard's bytes; ``DataError`` if inconsistent."""

    def damaged(what: str) -> DataError:
        return DataError(f"{shard}: not a valid MDS shard ({what}); re-copy or re-write it")

    if len(data) < 4:
        raise damaged(f"{len(data)} bytes")
    n = int(np.frombuffer(data, _U32, 1)[0])
    config_start = 4 + 4 * (n + 1)
    if len(data) < config_start:
        raise damaged(f"{n} samples, but {len(data)} bytes cannot hold their offsets")
    offsets = np.frombuffer(data, _U32, n + 1, 4).astype(np.int64)
    if offsets[0] < config_start or (np.diff(offsets) < 0).any():
        raise damaged("the sample offsets are out of order")
    if offsets[-1] != len(data):
        raise damaged(f"the samples end at byte {offsets[-1]} of {len(data)}: truncated?")
    try:
        config = json.loads(data[config_start : offsets[0]])
        names, encodings = list(config["column_names"]), list(config["column_encodings"])
        sizes = [None if s is None else int(s) for s in config["column_sizes"]]
    except (ValueError, KeyError, TypeError) as e:
        raise damaged(f"its column config does not parse: {e!r}") from e
    if not len(names) == len(encodings) == len(sizes):
        raise damaged("its column config lists columns of unequal counts")
    return _Layout(offsets, names, encodings, sizes)


def _text_ranges(data: bytes, layout: _Layout, column: int, shard: Path) -> np.ndarray:
    """(start, length) of column ``column`` in each sample, checked against the sample's
    size."""
    starts = layout.offsets[:-1]
    variable = [c for c, size in enumerate(layout.sizes) if size is None]
    buf = np.frombuffer(data, np.uint8)
    # Sample i's variable-size columns' sizes: uint32s at its start, unaligned.
    if (np.diff(layout.offsets) < 4 * len(variable)).any():
        raise DataError(
            f"{shard}: not a valid MDS shard (a sample is shorter than its column sizes); "
            "re-copy or re-write it"
        )
    var_sizes = np.zeros((len(starts), len(variable)), np.int64)
    if len(starts) and variable:
        head = starts[:, None] + np.arange(4 * len(variable))
        var_sizes = buf[head].view(_U32).astype(np.int64)
    column_sizes = np.empty((len(starts), len(layout.sizes)), np.int64)
    for c, size in enumerate(layout.sizes):
        column_sizes[:, c] = var_sizes[:, variable.index(c)] if size is None else size
    before = 4 * len(variable) + column_sizes[:, :column].sum(axis=1)
    if (4 * len(variable) + column_sizes.sum(axis=1) != np.diff(layout.offsets)).any():
        raise DataError(
            f"{shard}: not a valid MDS shard (a sample's column sizes do not add up to its "
            "size); re-copy or re-write it"
        )
    return np.stack([starts + before, column_sizes[:, column]], axis=1)


def _check_hashes(data: bytes, entry: MdsShardEntry, shard: Path) -> None:
    """Check the uncompressed shard against its ``index.json`` digests (those of algorithms
    ``hashlib`` has; Streaming's xxHash ones are not checked): a damaged compressed shard
    may still decompress, to other bytes."""
    for algorithm, digest in entry.raw_hashes.items():
        known = algorithm in hashlib.algorithms_available
        if known and hashlib.new(algorithm, data).hexdigest() != digest:
            raise DataError(
                f"{shard}: its {algorithm} digest is not the one {shard.parent / INDEX_FILE} "
                "gives: the shard is damaged or replaced; re-copy the folder or re-write it"
            )


class MdsFormat:
    """Samples of an MDS shard; the record's text is the ``str`` column ``field``.

    The index holds each sample's text as a byte range of the (uncompressed) shard, read
    with one ``pread``. ``shard`` is the shard file when ``build_index`` is given another
    path (the decompressed copy of a compressed shard): errors name it, and its folder's
    ``index.json`` is checked against what the shard holds. Empty texts and invalid UTF-8
    are bad records; a missing text column or one of another encoding is a ``ConfigError``.
    """

    name = FormatName.MDS

    def __init__(self, shard: Path | None = None) -> None:
        self._shard = shard

    def for_shard(self, shard: Path) -> MdsFormat:
        """This format, indexing the local shard file ``shard`` (read from any path)."""
        return MdsFormat(shard)

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every sample of ``path``; empty or non-UTF-8 texts are skipped."""
        shard = self._shard or path
        data = path.read_bytes()
        layout = _read_layout(data, shard)
        n = len(layout.offsets) - 1
        entry = _find_entry(shard)
        if entry is not None and (n, len(data)) != (entry.samples, entry.raw_bytes):
            raise DataError(
                f"{shard}: {n} samples in {len(data)} bytes where "
                f"{shard.parent / INDEX_FILE} says {entry.samples} in {entry.raw_bytes}: the "
                "shard and its index disagree; re-copy the folder or re-write it"
            )
        if entry is not None:
            _check_hashes(data, entry, shard)
        column = self._text_column(layout, field, shard)
        ranges = _text_ranges(data, layout, column, shard)
        skips = SkipCounter()
        usable = np.ones(n, dtype=bool)
        for i, (start, length) in enumerate(ranges.tolist()):
            if length == 0:
                skips.add(SkipReason.EMPTY_DOCUMENT, [i + 1])
                usable[i] = False
                continue
            try:
                data[start : start + length].decode()
            except UnicodeDecodeError:
                skips.add(SkipReason.INVALID_UTF8, [i + 1])
                usable[i] = False
        good = ranges[usable]
        return skips.index(good[:, 0], good[:, 1], good[:, 1])

    @staticmethod
    def _text_column(layout: _Layout, field: str, shard: Path) -> int:
        """The position of column ``field``, a ``ConfigError`` unless it holds ``str``."""
        if field in layout.names:
            column = layout.names.index(field)
            if layout.encodings[column] == TEXT_ENCODING:
                return column
        present = ", ".join(
            f"{n} ({e})" for n, e in zip(layout.names, layout.encodings, strict=True)
        )
        raise ConfigError(
            f"{shard.parent}: MDS shards need a text column {field!r} of encoding "
            f"{TEXT_ENCODING!r}; the columns are {present}: set the dataset's field to one of "
            f"the {TEXT_ENCODING!r} columns, or re-write the folder"
        )

    def open(self, path: Path) -> ReadOnlyFile:
        """Open ``path`` (the uncompressed shard) for ``read``."""
        return ReadOnlyFile(path)

    def read(
        self, handle: ReadOnlyFile, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """Texts of ``rows``; ``None`` where the bytes are no longer UTF-8."""
        return read_utf8_ranges(handle, index, rows)
