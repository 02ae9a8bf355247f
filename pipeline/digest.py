"""Canonical SHA-256 digests of global batches (definition ``zephon.batch.v1``).

A step's global batch is its ``G`` packed sequences in lane order. Every rank hashes its own
lanes (tag, lane number and each sequence's lengths, document starts and tokens, as
little-endian u32) and ranks only exchange 32-byte lane digests, never data. The chain of
global digests over all steps is the run's data fingerprint.

Design: docs/design/pipeline_digests.md
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from pipeline.stages.pack import PackedSequence

_LANE_TAG = b"zephon.lane.v1"
_BATCH_TAG = b"zephon.batch.v1"
_CHAIN_TAG = b"zephon.chain.v1"
_U32 = np.dtype("<u4")
_HEADER = struct.Struct("<III")  # a sequence's length, valid tokens and document starts
_I32 = np.dtype("<i4")


def sequence_bytes(seq: PackedSequence) -> bytes:
    """Return the canonical byte encoding of one packed sequence."""
    return b"".join(bytes(part) for part in _sequence_parts(seq))


def lane_digest(lane: int, sequences: Iterable[PackedSequence]) -> bytes:
    """Return the 32-byte digest of one lane's sequences of one step."""
    # One join and one update: per-part updates cost more than hashing a step's bytes. The
    # loop is inlined: a step's sequences make per-sequence function calls count.
    parts = [_LANE_TAG, struct.pack("<I", lane)]
    pack_header = _HEADER.pack
    for seq in sequences:
        tokens, starts = seq.tokens, seq.doc_starts
        header = pack_header(len(tokens), seq.num_valid, len(starts))
        parts += (header, _as_u32(starts), _as_u32(tokens))
    return hashlib.sha256(b"".join(parts)).digest()


def _sequence_parts(seq: PackedSequence) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``sequence_bytes(seq)`` in three buffers (arrays are not copied until joined)."""
    header = _HEADER.pack(len(seq.tokens), seq.num_valid, len(seq.doc_starts))
    return header, _as_u32(seq.doc_starts), _as_u32(seq.tokens)


def _as_u32(values: np.ndarray) -> np.ndarray:
    """``values`` as contiguous little-endian uint32; int32 is reinterpreted, not copied
    (two's complement gives the bytes ``astype`` would)."""
    if values.dtype == _I32 and values.flags.c_contiguous:
        return values.view(_U32)
    return values.astype(_U32)


def global_batch_digest(lane_digests: Mapping[int, bytes] | Sequence[bytes]) -> str:
    """Combine the lane digests of all ``L`` lanes of a step into the global batch digest (hex).

    ``lane_digests`` is either a sequence in lane order or a mapping lane -> digest
    that must hold every lane ``0..L-1`` (e.g. the union of all ranks' digests).
    """
    if isinstance(lane_digests, Mapping):
        num_lanes = len(lane_digests)
        missing = sorted(set(range(num_lanes)) - set(lane_digests))
        assert not missing, f"lane digests must cover lanes 0..{num_lanes - 1}; missing {missing}"
        ordered = [lane_digests[lane] for lane in range(num_lanes)]
    else:
        ordered = list(lane_digests)
    h = hashlib.sha256(_BATCH_TAG + struct.pack("<I", len(ordered)))
    for digest in ordered:
        assert len(digest) == 32, f"a lane digest is 32 bytes, got {len(digest)}"
        h.update(digest)
    return h.hexdigest()


class DigestChain:
    """Running chain of global batch digests: the run's data fingerprint."""

    def __init__(self, resume_from: str | None = None, steps: int = 0) -> None:
        """Start a new chain, or continue one saved as ``hexdigest`` after ``steps`` steps."""
        self._value = (
            bytes.fromhex(resume_from) if resume_from else hashlib.sha256(_CHAIN_TAG).digest()
        )
        assert len(self._value) == 32, f"a data fingerprint is 32 bytes, got {resume_from!r}"
        self.steps = steps

    def update(self, global_digest_hex: str) -> str:
        """Append one step's global digest; return the new chain value (hex)."""
        self._value = hashlib.sha256(self._value + bytes.fromhex(global_digest_hex)).digest()
        self.steps += 1
        return self._value.hex()

    @property
    def hexdigest(self) -> str:
        """The chain value after the steps seen so far."""
        return self._value.hex()
