"""Compressed JSONL shards: a plain copy is written, because records cannot be read by
offset from a compressed stream."""

from __future__ import annotations

import gzip
import shutil
import zlib
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO

import zstandard

from pipeline.errors import DataError
from pipeline.formats.shard_format import READ_BLOCK_BYTES


class Compression(StrEnum):
    """How a JSONL shard is compressed (from its file name's last suffix)."""

    GZ = "gz"
    ZST = "zst"


def decompress(path: Path, compression: Compression, out: BinaryIO) -> None:
    """Stream-decompress ``path`` into ``out``.

    Raises ``DataError`` naming the file if it is corrupt or truncated.
    """
    try:
        with open(path, "rb") as f:
            if compression is Compression.GZ:
                with gzip.open(f) as g:
                    shutil.copyfileobj(g, out, READ_BLOCK_BYTES)
            else:
                _decompress_zstd_frames(f, out)
    except (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError) as e:
        raise DataError(
            f"{path}: cannot decompress ({e}); the file is corrupt or truncated, "
            "re-download or re-compress it"
        ) from e


def _decompress_zstd_frames(f: BinaryIO, out: BinaryIO) -> None:
    # A frame-by-frame loop rather than stream_reader: stream_reader silently
    # stops at a truncated frame, and files may hold several frames.
    frame = None
    while block := f.read(READ_BLOCK_BYTES):
        while block:
            if frame is None:
                frame = zstandard.ZstdDecompressor().decompressobj()
            out.write(frame.decompress(block))
            if not frame.eof:
                break
            block, frame = frame.unused_data, None  # the rest starts the next frame
    if frame is not None:
        raise EOFError("compressed data ended in the middle of a frame")
