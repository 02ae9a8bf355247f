"""``ArrowFormat``: rows of an Arrow IPC stream or file (Hugging Face ``datasets`` writes
streams: ``data-0000x-of-0000n.arrow``), their text in one string column; and the data
files of a ``Dataset.save_to_disk`` folder.

A remote ``.arrow`` shard is downloaded whole by the IO cache and read from its copy, never
by byte range: a stream has no footer saying where its record batches are, so finding them
means reading every message header, and the index needs every row's text length anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.errors import ConfigError, DataError
from pipeline.formats.shard_format import FormatName
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason
from pipeline.formats.string_column import is_string, usable_rows

FILE_MAGIC = b"ARROW1"
"""The first bytes of an Arrow IPC file (a stream starts with a message)."""
STREAM_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The end-of-stream marker a writer closes a stream with: without it, a stream cut at a
message boundary would read as a shorter valid one."""
STATE_FILE = "state.json"
"""A ``save_to_disk`` folder's list of its data files, in order."""
DATASET_DICT_FILE = "dataset_dict.json"
"""Marks a ``DatasetDict`` folder: one sub-folder per split."""


@dataclass(frozen=True)
class _ArrowHandle:
    batches: list[pa.RecordBatch]
    """Memory-mapped: reading a row brings in only its pages."""


def read_batches(path: Path) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The schema and record batches of the Arrow IPC stream or file at ``path``, memory-
    mapped; ``DataError`` naming the file if it is damaged or truncated."""
    try:
        source = pa.memory_map(str(path))
        size = source.size()
        if source.read(len(FILE_MAGIC)) == FILE_MAGIC:
            source.seek(0)
            reader = pa.ipc.open_file(source)  # checks the footer, so a cut file fails here
            return reader.schema, [reader.get_batch(b) for b in range(reader.num_record_batches)]
        source.seek(max(size - len(STREAM_END), 0))
        if source.read(len(STREAM_END)) != STREAM_END:
            raise DataError(
                f"{path}: the Arrow stream has no end marker: the file is truncated or still "
                "being written; re-copy or re-save it"
            )
        source.seek(0)
        stream = pa.ipc.open_stream(source)
        return stream.schema, list(stream)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read Arrow file ({e}); re-copy or re-save it") from e


class ArrowFormat:
    """Rows of an Arrow IPC stream or file; the record's text is the string column ``field``.

    The index holds (record batch, row in the batch, text bytes) per usable row. The file is
    memory-mapped, so a handle costs no copy of the data: a read decodes only its rows.
    Null, empty or non-string values are bad records, as in Parquet.
    """

    name = FormatName.ARROW

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every row of ``path``; null, empty or non-string values are skipped."""
        schema, batches = read_batches(path)
        usable = field in schema.names and is_string(schema.field(field).type)
        skips = SkipCounter()
        empty = np.empty(0, dtype=np.int64)
        in_batch, rows, text_bytes = [empty], [empty], [empty]
        first_row = 0
        for b, batch in enumerate(batches):
            row_numbers = np.arange(first_row + 1, first_row + batch.num_rows + 1)
            first_row += batch.num_rows
            if not usable:
                skips.add(SkipReason.MISSING_FIELD, row_numbers)
                continue
            good, lengths = usable_rows(batch.column(field), row_numbers, skips)
            in_batch.append(np.full(len(good), b, dtype=np.int64))
            rows.append(good)
            text_bytes.append(lengths)
        return skips.index(
            np.concatenate(in_batch), np.concatenate(rows), np.concatenate(text_bytes)
        )

    def open(self, path: Path) -> _ArrowHandle:
        """Map ``path`` for ``read``."""
        return _ArrowHandle(read_batches(path)[1])

    def read(
        self, handle: _ArrowHandle, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """Texts of ``rows``; ``None`` where the file no longer holds a string there."""
        texts: list[str | None] = []
        for b, r in zip(index.offsets[rows].tolist(), index.lengths[rows].tolist(), strict=True):
            value = None
            if b < len(handle.batches) and field in handle.batches[b].schema.names:
                column = handle.batches[b].column(field)
                value = column[r].as_py() if r < len(column) else None
            texts.append(value if type(value) is str else None)
        return texts


def save_to_disk_files(folder: Path) -> list[Path]:
    """The data files of a ``datasets`` ``save_to_disk`` folder, in its ``state.json``'s
    order; ``ConfigError`` for a ``DatasetDict`` folder or a listed file that is missing."""
    if (folder / DATASET_DICT_FILE).is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / STATE_FILE).is_file())
        raise ConfigError(
            f"{folder} is a DatasetDict folder (splits: {', '.join(splits) or 'none'}); name "
            f"the split's folder instead, e.g. {folder / (splits[0] if splits else 'train')}"
        )
    state_path = folder / STATE_FILE
    try:
        names = [f["filename"] for f in json.loads(state_path.read_bytes())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{state_path}: not a datasets state file ({e!r}); re-save the dataset "
            "with Dataset.save_to_disk"
        ) from e
    files = [folder / name for name in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ConfigError(
            f"{state_path} lists data files that are missing: {', '.join(missing)}; "
            "re-copy the folder or re-save the dataset"
        )
    return files
