"""Megatron indexed datasets, as megatron-core's IndexedDatasetBuilder writes them: every
document read back as written, both files in the shard's fingerprint, and a damaged shard
refused by the plan (its shard metadata), naming the file."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.dataset import Dataset, TokenDeclaration
from pipeline.errors import ConfigError, DataError
from pipeline.formats import FormatName, detect_format
from tests.support.token_files import gpt2_documents, write_megatron

GPT2 = TokenDeclaration("gpt2")
EOS = 50256
documents = st.lists(
    st.lists(st.integers(0, EOS - 1), max_size=40), min_size=1, max_size=30
).filter(any)


def megatron_dataset(tmp: Path, bin_path: Path | str, **kwargs) -> Dataset:
    return Dataset("m", bin_path, tokens=GPT2, cache_dir=tmp / "cache", **kwargs)


def all_tokens(ds: Dataset) -> list[list[int]]:
    keys = ds.global_keys(range(ds.num_records))
    return [ids.tolist() for ids in ds.read_record_tokens(keys)[0]]


@pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=documents,
    dtype=st.sampled_from([np.uint16, np.int32, np.int64]),
    sequences=st.integers(1, 3),
    append_eod=st.booleans(),
)
def test_every_document_reads_back_as_the_writer_wrote_it(
    docs: list[list[int]], dtype: type, sequences: int, append_eod: bool
) -> None:
    with tempfile.TemporaryDirectory(dir=Path(tempfile.gettempdir())) as tmp:
        eos = EOS if append_eod else None
        bin_path = write_megatron(
            Path(tmp) / "d", docs, dtype=dtype, eos_id=eos, sequences=sequences
        )
        ds = megatron_dataset(Path(tmp), bin_path)
        kept = [d for d in docs if d]  # a document of no tokens is a bad record
        assert all_tokens(ds) == kept
        assert ds.report()["skipped"] == (
            {"empty_document": len(docs) - len(kept)} if len(kept) < len(docs) else {}
        )
        # The plan's costs are token counts: "text bytes" hold them.
        assert ds.record_bytes.tolist() == [len(d) for d in kept]


def test_records_read_as_text_are_the_documents_decoded(tmp_path: Path) -> None:
    texts = ["Hello, world.", "The quick brown fox"]
    ds = megatron_dataset(tmp_path, write_megatron(tmp_path / "d", gpt2_documents(texts)))
    assert ds.pretokenized
    assert ds.read_texts([0, 1]) == texts
    assert ds.read_record_tokens(ds.global_keys([1]))[1] == 2 * len(gpt2_documents(texts)[1])


def test_the_fingerprint_covers_the_idx(tmp_path: Path) -> None:
    # The same .bin, split into documents differently: an .idx of the same size.
    one = write_megatron(tmp_path / "a", [[1, 2], [3]])
    two = write_megatron(tmp_path / "b", [[1], [2, 3]])
    assert one.read_bytes() == two.read_bytes()
    assert one.with_suffix(".idx").stat().st_size == two.with_suffix(".idx").stat().st_size
    fp_one = megatron_dataset(tmp_path, one).shard_fingerprint(0)
    assert fp_one != megatron_dataset(tmp_path, two).shard_fingerprint(0)
    assert all_tokens(megatron_dataset(tmp_path, two)) == [[1], [2, 3]]
    # Another count of documents: the plan's contract (sizes, read without hashing) differs.
    three = write_megatron(tmp_path / "c", [[1, 2, 3]])
    manifest = megatron_dataset(tmp_path, three).manifest_fingerprint
    assert manifest != megatron_dataset(tmp_path, two).manifest_fingerprint


def damage(bin_path: Path, how: str) -> Path:
    """The file ``how`` damages (and that the error must name)."""
    idx = bin_path.with_suffix(".idx")
    if how == "missing_idx":
        idx.unlink()
        return bin_path
    if how == "cut_bin":
        bin_path.write_bytes(bin_path.read_bytes()[:-2])
        return bin_path
    raw = bytearray(idx.read_bytes())
    if how == "magic":
        raw[0:1] = b"X"
    elif how == "version":
        raw[9:17] = struct.pack("<Q", 2)
    elif how == "float_dtype":
        raw[17] = 6
    elif how == "cut_idx":
        raw = raw[:-8]
    idx.write_bytes(bytes(raw))
    return idx


@pytest.mark.parametrize(
    "how", ["missing_idx", "cut_bin", "magic", "version", "float_dtype", "cut_idx"]
)
def test_a_damaged_shard_is_refused_by_the_plan_naming_its_file(tmp_path: Path, how: str) -> None:
    good = write_megatron(tmp_path / "good", gpt2_documents()[:5])
    bad = write_megatron(tmp_path / "bad", gpt2_documents()[5:10])
    named = damage(bad, how)
    ds = megatron_dataset(tmp_path, [good, bad])
    with pytest.raises(DataError, match=str(named).replace(".", r"\.")):
        ds.shard_metadata()  # what the plan reads of each shard


def test_an_id_outside_the_vocabulary_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = write_megatron(tmp_path / "bad", [[1, 2], [3, 60000]], dtype=np.int32)
    ds = megatron_dataset(tmp_path, bad)
    with pytest.raises(DataError, match=rf"{bad}: token 3 is id 60000, not in .* 50257"):
        ds.shard_records(0)


def test_token_files_need_a_declared_tokenizer_and_stay_apart_from_text(tmp_path: Path) -> None:
    bin_path = write_megatron(tmp_path / "d", [[1, 2]])
    with pytest.raises(ConfigError, match=r"pre-tokenized .*\(data\.pretokenized\.m\.tokenizer"):
        Dataset("m", bin_path, cache_dir=tmp_path / "cache")
    text = tmp_path / "t.txt"
    text.write_text("some text")
    with pytest.raises(ConfigError, match="mixes token files"):
        megatron_dataset(tmp_path, [bin_path, text])
    with pytest.raises(ConfigError, match="holds text, but a tokenizer is declared"):
        megatron_dataset(tmp_path, text)
    with pytest.raises(ConfigError, match=r"give the \.bin files only"):
        detect_format(bin_path.with_suffix(".idx"))
    assert detect_format(bin_path) == (FormatName.MEGATRON, None)


def test_a_bin_cut_while_open_is_a_changed_shard_naming_the_record(tmp_path: Path) -> None:
    bin_path = write_megatron(tmp_path / "d", [[1, 2], [3, 4, 5]], dtype=np.int32)
    ds = megatron_dataset(tmp_path, bin_path)
    assert all_tokens(ds) == [[1, 2], [3, 4, 5]]  # the shard's handle is open now
    with open(bin_path, "r+b") as f:
        f.truncate(bin_path.stat().st_size - 3)  # inside the last id
    with pytest.raises(DataError, match=rf"record \('m', 0, 1\): shard {bin_path} changed"):
        ds.read_record_tokens(ds.global_keys([1]))
