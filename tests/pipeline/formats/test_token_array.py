"""OLMo-core token files (raw arrays of ids, each document followed by EOS): every document
read back as written, the ids' width declared or inferred as OLMo-core infers it, and a
damaged file refused naming it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.dataset import Dataset, TokenDeclaration, TokenDtype
from pipeline.errors import DataError
from pipeline.formats import FormatName, TokenFiles, detect_format
from tests.support.token_files import gpt2_documents, write_token_array

EOS = 50256
documents = st.lists(
    st.lists(st.integers(0, EOS - 1), max_size=40), min_size=1, max_size=30
).filter(any)


def array_dataset(tmp: Path, path: Path, dtype: TokenDtype | None = None) -> Dataset:
    tokens = TokenDeclaration("gpt2", dtype)
    return Dataset("a", path, tokens=tokens, cache_dir=tmp / "cache")


def all_tokens(ds: Dataset) -> list[list[int]]:
    keys = ds.global_keys(range(ds.num_records))
    return [ids.tolist() for ids in ds.read_record_tokens(keys)[0]]


@pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=documents, wide=st.booleans(), last_eos=st.booleans())
def test_every_document_reads_back_as_written(
    docs: list[list[int]], wide: bool, last_eos: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-0-00000.npy"
        write_token_array(path, docs, eos_id=EOS, dtype=np.uint32 if wide else np.uint16)
        if not last_eos:  # ids after the last EOS are a last document
            path.write_bytes(path.read_bytes()[: -(4 if wide else 2)])
        ds = array_dataset(Path(tmp), path, TokenDtype.UINT32 if wide else None)
        kept = [d for d in docs if d]  # an EOS right after an EOS: an empty document
        assert all_tokens(ds) == kept
        assert ds.record_bytes.tolist() == [len(d) for d in kept]


def test_records_read_as_text_are_the_documents_decoded(tmp_path: Path) -> None:
    texts = ["Hello, world.", "The quick brown fox"]
    path = write_token_array(tmp_path / "a.npy", gpt2_documents(texts), eos_id=EOS)
    ds = array_dataset(tmp_path, path)
    assert detect_format(path) == (FormatName.TOKEN_ARRAY, None)
    assert ds.read_texts([0, 1]) == texts
    assert ds.read_record_tokens(ds.global_keys([1]))[1] == 2 * len(gpt2_documents(texts)[1])


def test_a_file_cut_inside_an_id_is_refused_by_the_plan_naming_it(tmp_path: Path) -> None:
    good = write_token_array(tmp_path / "good.npy", [[1, 2]], eos_id=EOS)
    bad = write_token_array(tmp_path / "bad.npy", [[1, 2]], eos_id=EOS)
    bad.write_bytes(bad.read_bytes()[:-1])
    ds = array_dataset(tmp_path, [good, bad])
    with pytest.raises(DataError, match=rf"{bad}: 5 bytes, not a whole number of uint16"):
        ds.shard_metadata()  # what the plan reads of each shard


def test_a_file_written_by_np_save_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "saved.npy"
    np.save(path, np.array([1, 2, EOS], np.uint16))
    with pytest.raises(DataError, match=rf"{path}: written by np\.save"):
        array_dataset(tmp_path, path).shard_metadata()


def test_an_id_outside_the_vocabulary_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = write_token_array(tmp_path / "a.npy", [[1, 2], [60000]], eos_id=EOS, dtype=np.uint32)
    ds = array_dataset(tmp_path, path, TokenDtype.UINT32)
    with pytest.raises(DataError, match=rf"{path}: token 3 is id 60000, not in .* 50257"):
        ds.shard_records(0)


def test_a_uint32_file_read_with_an_inferred_width_is_refused(tmp_path: Path) -> None:
    path = write_token_array(tmp_path / "a.npy", gpt2_documents()[:3], eos_id=EOS, dtype=np.uint32)
    with pytest.raises(
        DataError, match=r"every other uint16 id is 0: the ids look wider; declare their dtype"
    ):
        array_dataset(tmp_path, path).shard_records(0)
    assert all_tokens(array_dataset(tmp_path, path, TokenDtype.UINT32)) == gpt2_documents()[:3]


@pytest.mark.parametrize(
    ("vocab", "dtype"), [(256, "uint8"), (257, "uint16"), (65536, "uint16"), (65537, "uint32")]
)
def test_an_undeclared_width_is_the_narrowest_holding_the_vocabulary(
    vocab: int, dtype: str
) -> None:
    assert TokenFiles(eos_id=0, vocab_size=vocab).array_dtype() == np.dtype(dtype)
