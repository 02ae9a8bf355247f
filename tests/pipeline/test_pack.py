"""wrap packing: no token lost or repeated, document starts exact, padded tail at flush."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages.pack import TokenizedChunk, WrapPacker

EOS = 9999


def chunk_of(docs: list[list[int]], source: int = 0) -> TokenizedChunk:
    flat = [t for d in docs for t in [*d, EOS]]
    return TokenizedChunk(
        tokens=np.asarray(flat, dtype=np.int32),
        doc_lengths=np.asarray([len(d) + 1 for d in docs], dtype=np.int64),
        doc_sources=np.full(len(docs), source, dtype=np.int16),
    )


docs_strategy = st.lists(st.lists(st.integers(0, 5000), max_size=40), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(docs_strategy, min_size=1, max_size=5), max_length=st.integers(1, 33))
def test_sequences_rebuild_the_stream_exactly(
    chunks: list[list[list[int]]], max_length: int
) -> None:
    packer = WrapPacker(max_length, pad_id=EOS)
    out = []
    stream: list[int] = []
    starts: list[int] = []
    for docs in chunks:
        for d in docs:
            starts.append(len(stream))
            stream.extend([*d, EOS])
        out += packer.add(chunk_of(docs))
    out += packer.flush()

    rebuilt: list[int] = []
    for k, seq in enumerate(out):
        assert len(seq.tokens) == max_length + 1
        assert seq.doc_starts[0] == 0
        valid = seq.tokens[: seq.num_valid].tolist()
        rebuilt += valid if k == 0 else valid[1:]  # consecutive sequences overlap by one token
        assert (seq.tokens[seq.num_valid :] == EOS).all()
        # Every document start inside this sequence's inputs is recorded, and nothing else.
        offset = k * max_length
        expected = sorted(
            {0}
            | {s - offset for s in starts if offset <= s < offset + min(max_length, seq.num_valid)}
        )
        assert seq.doc_starts.tolist() == expected
    assert rebuilt == stream if len(stream) >= 2 else rebuilt == []
    assert all(seq.num_valid == max_length + 1 for seq in out[:-1])


def test_flush_resets_and_sources_follow_documents() -> None:
    packer = WrapPacker(4, pad_id=EOS)
    first = packer.add(chunk_of([[1, 2, 3]], source=0)) + packer.add(
        chunk_of([[4, 5, 6, 7, 8]], source=2)
    )
    assert [s.tokens.tolist() for s in first] == [[1, 2, 3, EOS, 4], [4, 5, 6, 7, 8]]
    assert first[0].doc_starts.tolist() == [0] and first[0].doc_sources.tolist() == [0]
    assert first[1].doc_starts.tolist() == [0] and first[1].doc_sources.tolist() == [2]
    tail = packer.flush()
    assert [s.tokens.tolist() for s in tail] == [[8, EOS, EOS, EOS, EOS]] and tail[0].num_valid == 2
    assert packer.flush() == []
    assert packer.add(chunk_of([[1, 2, 3]])) == []  # 4 tokens: not yet a full sequence of 5
    (tail,) = packer.flush()
    assert tail.tokens.tolist() == [1, 2, 3, EOS, EOS] and tail.num_valid == 4
