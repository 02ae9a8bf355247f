"""``TokenArrayFormat``: documents of an OLMo-core token file, read as token ids.

OLMo-core (and Dolma's tokenizer) write a dataset as raw arrays of token ids: no header,
despite the ``.npy`` suffix (``np.memmap(path, mode="w+", dtype=..., shape=(n,))``), each
document's ids followed by the tokenizer's EOS; OLMo-core finds the documents by their EOS
(``iter_document_indices``), and so does this reader. The ids' width is not in the file: it is
declared (``TokenFiles.dtype``), else OLMo-core's rule: the narrowest that holds the
vocabulary. The optional
``.csv.gz`` metadata Dolma writes beside a file is not read. A record is one document without
its EOS; ids after the last EOS are a last document.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.errors import DataError
from pipeline.formats.shard_format import (
    FormatName,
    TokenFile,
    TokenFiles,
    read_token_ranges,
    scan_tokens,
)
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason

NPY_MAGIC = b"\x93NUMPY"
"""The start of a file ``np.save`` wrote: a header, then the array (not OLMo-core's layout)."""
_WIDTH_SAMPLE = 1 << 16
"""Ids looked at to tell a uint32 file from a uint16 one when the width is inferred."""


class TokenArrayFormat:
    """Documents of an OLMo-core token file (module docstring).

    A file whose size is not a multiple of the id width, that starts with a ``np.save``
    header, or that holds an id outside the declared tokenizer's vocabulary is a
    ``DataError`` naming it; two EOS in a row make an empty document (a bad record).
    """

    name = FormatName.TOKEN_ARRAY

    def __init__(self, tokens: TokenFiles) -> None:
        self.tokens = tokens
        self.dtype = tokens.array_dtype()

    def check(self, path: Path) -> None:
        """The plan's check: the file's size and first bytes."""
        size = path.stat().st_size
        width = self.dtype.itemsize
        if size % width:
            raise DataError(
                f"{path}: {size} bytes, not a whole number of {self.dtype.name} token ids "
                f"({width} bytes each): the file is cut, or its ids are of another width; "
                "declare its dtype (data.pretokenized.NAME.dtype) or copy it again"
            )
        with open(path, "rb") as f:
            start = f.read(len(NPY_MAGIC))
        if start == NPY_MAGIC:
            raise DataError(
                f"{path}: written by np.save (it has a header), not a raw token array as "
                "OLMo-core writes; write the ids with np.memmap or ndarray.tofile"
            )

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every document of ``path`` (``field`` does not apply)."""
        self.check(path)
        n = path.stat().st_size // self.dtype.itemsize
        eos = scan_tokens(path, self.dtype, self.tokens)
        if self.tokens.dtype is None and self.dtype.itemsize < 4:
            self._check_not_wider(path)
        trailing = n > 0 and (not len(eos) or eos[-1] != n - 1)  # ids after the last EOS
        ends = np.append(eos, n) if trailing else eos
        starts = np.concatenate([[0], eos + 1])[: len(ends)]
        counts = ends - starts
        skips = SkipCounter()
        empty = counts == 0
        if empty.any():
            skips.add(SkipReason.EMPTY_DOCUMENT, np.flatnonzero(empty) + 1)
        width = self.dtype.itemsize
        return skips.index(starts[~empty] * width, counts[~empty], counts[~empty])

    def open(self, path: Path) -> TokenFile:
        """Open ``path`` for ``read_tokens``."""
        return TokenFile(path, self.dtype)

    def read_tokens(
        self, handle: TokenFile, index: ShardIndex, rows: np.ndarray
    ) -> list[np.ndarray]:
        """Token ids of ``rows`` (uint32, no EOS)."""
        return read_token_ranges(handle, index, rows)

    def _check_not_wider(self, path: Path) -> None:
        """A file of wider ids read with a narrower inferred width (uint32 ids as uint16) has
        a zero in every other place, the ids' high halves: refused (on its first ids) rather
        than trained on as other ids."""
        halves = np.fromfile(path, self.dtype, _WIDTH_SAMPLE)
        if len(halves) >= 2 and not halves[1 : len(halves) - len(halves) % 2 : 2].any():
            raise DataError(
                f"{path}: every other {self.dtype.name} id is 0: the ids look wider; declare "
                "their dtype (data.pretokenized.NAME.dtype, e.g. uint32)"
            )
