"""``detect_format``: a shard's format and compression, from its file name."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.formats.compression import Compression
from pipeline.formats.shard_format import FormatName
from pipeline.io import is_url, url_filename

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": Compression.GZ, ".zst": Compression.ZST}
"""The compression of a JSONL file, by its last suffix."""
MDS_COMPRESSIONS = {".gz": Compression.GZ, ".zstd": Compression.ZST}
"""The compression of an MDS shard, by its last suffix (Streaming's names for them)."""
MDS_UNREAD_COMPRESSIONS = (".br", ".bz2", ".snappy")
"""The other compressions Streaming writes: no decoder for them is installed here."""
TABLE_SUFFIXES = (".csv", ".tsv", ".feather", ".orc", ".avro", ".xlsx")
"""Files of records in a format no reader here reads: read as one plain-text document each,
their rows would train as one document of column text, so they are refused."""


def detect_format(path: str | os.PathLike[str]) -> tuple[FormatName, Compression | None]:
    """Return ``(format, compression or None)`` for a shard, from its file name.

    ``path`` is a local path or a URL (the file name of its path counts, not
    its query). ``.jsonl``/``.json``/``.ndjson`` (optionally ``.gz``/``.zst``)
    is JSONL, ``.parquet`` is Parquet, ``.arrow`` is Arrow, ``.mds`` (optionally
    ``.zstd``/``.gz``) is MDS, ``.bin`` a Megatron indexed dataset (its ``.idx`` beside it),
    ``.npy`` an OLMo-core token file, an ``.idx`` alone, a table of another format (:data:`TABLE_SUFFIXES`)
    or an MDS shard of another compression a ``ConfigError``, and any other file is
    one plain-text document.
    """
    location = os.fspath(path)
    name = (url_filename(location) if is_url(location) else os.path.basename(location)).lower()
    suffix = Path(name).suffix
    inner = Path(name[: -len(suffix)]).suffix if suffix else ""
    if inner == ".mds" and suffix in (*MDS_COMPRESSIONS, *MDS_UNREAD_COMPRESSIONS):
        if suffix in MDS_COMPRESSIONS:
            return FormatName.MDS, MDS_COMPRESSIONS[suffix]
        raise ConfigError(
            f"{path}: an MDS shard compressed with {suffix[1:]!r}, which is not read here "
            f"(only {' and '.join(s[1:] for s in MDS_COMPRESSIONS)}); re-write the dataset "
            "with MDSWriter(compression='zstd') or without compression"
        )
    if suffix in COMPRESSIONS:
        if inner in JSONL_SUFFIXES:
            return FormatName.JSONL, COMPRESSIONS[suffix]
        # Reading compressed bytes as a text document is never what was meant.
        raise ConfigError(
            f"{path}: only compressed JSONL is supported ({', '.join(JSONL_SUFFIXES)} "
            f"followed by {' or '.join(COMPRESSIONS)}); decompress the file or rename it"
        )
    if suffix in JSONL_SUFFIXES:
        return FormatName.JSONL, None
    if suffix == ".parquet":
        return FormatName.PARQUET, None
    if suffix == ".arrow":
        return FormatName.ARROW, None
    if suffix == ".mds":
        return FormatName.MDS, None
    if suffix == ".bin":
        return FormatName.MEGATRON, None
    if suffix == ".npy":
        return FormatName.TOKEN_ARRAY, None
    if suffix == ".idx":
        # Matched by a glob beside its .bin: read as text it would train as one document.
        raise ConfigError(
            f"{path}: the index of a Megatron dataset, read with its .bin; give the .bin "
            "files only (e.g. a glob ending in *.bin)"
        )
    if suffix in TABLE_SUFFIXES:
        raise ConfigError(
            f"{path}: {suffix} files are not read (each would train as one document); write "
            "the records as JSONL, Parquet or Arrow with a text column"
        )
    return FormatName.TEXT, None
