"""Batch digests: composable from lane digests, sensitive to every token and boundary."""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from pipeline import DigestChain, global_batch_digest, lane_digest
from pipeline.stages.pack import PackedSequence


def seq(tokens: list[int], starts: list[int], num_valid: int | None = None) -> PackedSequence:
    return PackedSequence(
        tokens=np.asarray(tokens, dtype=np.int32),
        doc_starts=np.asarray(starts, dtype=np.int32),
        doc_sources=np.zeros(len(starts), dtype=np.int16),
        num_valid=len(tokens) if num_valid is None else num_valid,
    )


def test_lane_digest_matches_the_documented_definition() -> None:
    s = seq([5, 6, 7], [0, 2], num_valid=3)
    body = struct.pack("<III", 3, 3, 2) + struct.pack("<2I", 0, 2) + struct.pack("<3I", 5, 6, 7)
    assert (
        lane_digest(4, [s])
        == hashlib.sha256(b"zephon.lane.v1" + struct.pack("<I", 4) + body).digest()
    )


def test_global_digest_from_a_mapping_equals_lane_order() -> None:
    digests = [lane_digest(lane, [seq([lane, 1, 2], [0])]) for lane in range(4)]
    shuffled = {2: digests[2], 0: digests[0], 3: digests[3], 1: digests[1]}
    assert global_batch_digest(digests) == global_batch_digest(shuffled)
    assert global_batch_digest(digests) != global_batch_digest(digests[::-1])


def test_digest_changes_with_tokens_boundaries_and_padding() -> None:
    base = lane_digest(0, [seq([1, 2, 3, 4], [0])])
    assert lane_digest(0, [seq([1, 2, 3, 5], [0])]) != base
    assert lane_digest(0, [seq([1, 2, 3, 4], [0, 2])]) != base
    assert lane_digest(0, [seq([1, 2, 3, 4], [0], num_valid=3)]) != base
    assert lane_digest(1, [seq([1, 2, 3, 4], [0])]) != base


def test_chain_depends_on_order() -> None:
    a, b = "00" * 32, "11" * 32
    one, two = DigestChain(), DigestChain()
    one.update(a), one.update(b)
    two.update(b), two.update(a)
    assert one.hexdigest != two.hexdigest and one.steps == 2


def test_chain_resumes_from_a_saved_value() -> None:
    whole = DigestChain()
    for d in ("00" * 32, "11" * 32, "22" * 32):
        whole.update(d)
    first = DigestChain()
    first.update("00" * 32)
    resumed = DigestChain(first.hexdigest, first.steps)
    resumed.update("11" * 32), resumed.update("22" * 32)
    assert resumed.hexdigest == whole.hexdigest and resumed.steps == 3
