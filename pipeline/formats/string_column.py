"""What Parquet and Arrow shards share: a string column's usable rows and their skips."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.shard_index import SkipCounter, SkipReason


def is_string(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds texts (any Arrow string type)."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def usable_rows(
    column: pa.Array | pa.ChunkedArray, row_numbers: np.ndarray, skips: SkipCounter
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a string ``column`` with a non-empty text, and those texts' UTF-8 byte
    lengths; null values are counted in ``skips`` as a missing field, empty ones as empty
    documents, at their 1-based ``row_numbers``."""
    lengths = pc.fill_null(pc.binary_length(column), -1).to_numpy()
    for reason, bad in (
        (SkipReason.MISSING_FIELD, lengths < 0),
        (SkipReason.EMPTY_DOCUMENT, lengths == 0),
    ):
        if bad.any():
            skips.add(reason, row_numbers[bad])
    good = np.flatnonzero(lengths > 0)
    return good, lengths[good]
