"""A Hugging Face tokenizer.json: the real GPT-NeoX tokenizer, and a BPE trained by the test."""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch

from pipeline import ConfigError, Dataset, Pipeline, WorkSource, load_tokenizer
from pipeline.tokenizer import HuggingFaceTokenizer
from tests.support.tokenizers import EOS, GPT_NEOX, GPT_NEOX_VOCAB, train_byte_level_bpe


@pytest.fixture(scope="module")
def texts(datasets: list[Dataset]) -> list[str]:
    """Held-out documents of every corpus domain (code, docs, unicode)."""
    source = WorkSource(datasets, {ds.name: 1.0 for ds in datasets}, holdout_bytes=40_000)
    return [text for d in range(len(datasets)) for text in source.heldout_documents(d)]


def contract_fingerprint(datasets: list[Dataset], tokenizer: str) -> str:
    """The data contract fingerprint of a small pipeline over the corpus with ``tokenizer``."""
    source = WorkSource(datasets, {ds.name: 1.0 for ds in datasets}, calibration_bytes=20_000)
    pipeline = (
        Pipeline(source).tokenize(tokenizer).pack_flat(max_length=64).batch(microbatch_size=2)
    )
    return pipeline.contract_fingerprint()


def test_gpt_neox_from_its_folder_has_its_vocabulary_and_eos() -> None:
    tok = load_tokenizer(str(GPT_NEOX))
    assert isinstance(tok, HuggingFaceTokenizer)
    assert (tok.name, tok.eos_id, tok.vocab_size) == ("huggingface", 0, GPT_NEOX_VOCAB)
    assert load_tokenizer(str(GPT_NEOX / "tokenizer.json")).fingerprint == tok.fingerprint


def test_ids_are_those_of_the_tokenizers_package(texts: list[str]) -> None:
    raw = tokenizers.Tokenizer.from_file(str(GPT_NEOX / "tokenizer.json"))
    tok = load_tokenizer(str(GPT_NEOX))
    plain = [t for t in texts if EOS not in t]
    expected = [e.ids for e in raw.encode_batch(plain, add_special_tokens=False)]
    assert [a.tolist() for a in tok.encode_arrays(plain)] == expected
    assert tok.encode(plain[0]) == expected[0]
    assert all(a.dtype == np.uint32 for a in tok.encode_arrays(plain[:3]))


@pytest.mark.parametrize("preset", [None, "true"])
def test_tokenizers_own_thread_pool_is_off_unless_the_user_set_it(
    monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    """The pipeline's ``parallelism`` workers are its cores; a user's explicit setting wins."""
    if preset is None:
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    else:
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", preset)
    HuggingFaceTokenizer(GPT_NEOX / "tokenizer.json")
    assert os.environ["TOKENIZERS_PARALLELISM"] == (preset or "false")


def test_special_token_strings_in_data_are_plain_text() -> None:
    tok = load_tokenizer(str(GPT_NEOX))
    ids = tok.encode(f"a {EOS} b")
    assert tok.eos_id not in ids
    assert tok.decode(ids) == f"a {EOS} b"


def test_decoding_gives_back_the_text_up_to_the_tokenizers_own_normalizer(
    texts: list[str],
) -> None:
    """Held-out bits per byte sum -log2 p over a document's tokens and divide by its UTF-8
    bytes. GPT-NeoX normalises to NFC, so its tokens spell NFC(text): the unicode domain has
    compatibility ideographs that NFC changes, every other document comes back byte for byte."""
    tok = load_tokenizer(str(GPT_NEOX))
    changed = 0
    for text, ids in zip(texts, tok.encode_arrays(texts), strict=True):
        assert tok.decode(ids.tolist()) == unicodedata.normalize("NFC", text)
        changed += unicodedata.normalize("NFC", text) != text
    assert 0 < changed < len(texts) / 10


def test_the_same_file_elsewhere_is_the_same_contract_and_an_edit_another(
    tmp_path: Path, datasets: list[Dataset]
) -> None:
    elsewhere = tmp_path / "copy"
    shutil.copytree(GPT_NEOX, elsewhere)
    original = contract_fingerprint(datasets, str(GPT_NEOX))
    assert contract_fingerprint(datasets, str(elsewhere)) == original
    assert contract_fingerprint(datasets, "gpt2") != original

    edited = tmp_path / "edited"
    shutil.copytree(GPT_NEOX, edited)
    spec = json.loads((edited / "tokenizer.json").read_text())
    merges = spec["model"]["merges"]
    merges[-1], merges[-2] = merges[-2], merges[-1]  # one changed merge rule
    (edited / "tokenizer.json").write_text(json.dumps(spec))
    assert load_tokenizer(str(edited)).fingerprint != load_tokenizer(str(GPT_NEOX)).fingerprint
    assert contract_fingerprint(datasets, str(edited)) != original


def test_a_tokenizer_without_eos_is_refused_saying_what_to_set(tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    shutil.copy(GPT_NEOX / "tokenizer.json", tmp_path / "bare" / "tokenizer.json")
    with pytest.raises(ConfigError, match=r"names no EOS token.*;eos=<\|endoftext\|>"):
        load_tokenizer(str(tmp_path / "bare"))
    with pytest.raises(ConfigError, match="not in the vocabulary"):
        load_tokenizer(f"{tmp_path / 'bare'};eos=<nope>")
    assert load_tokenizer(f"{tmp_path / 'bare'};eos={EOS}").eos_id == 0


def test_a_bpe_trained_by_the_test_tokenizes_the_pipeline(
    tmp_path: Path, texts: list[str], datasets: list[Dataset]
) -> None:
    path = train_byte_level_bpe(texts, tmp_path / "trained", vocab_size=1000)
    tok = load_tokenizer(f"{path};eos={EOS}")
    assert (tok.eos_id, tok.vocab_size) == (0, 1000)
    assert all(
        tok.decode(ids.tolist()) == text
        for text, ids in zip(texts, tok.encode_arrays(texts), strict=True)
    )
    source = WorkSource(datasets, {ds.name: 1.0 for ds in datasets}, calibration_bytes=20_000)
    pipeline = (
        Pipeline(source)
        .tokenize(f"{path};eos={EOS}", parallelism=2)
        .pack_flat(max_length=64)
        .batch(microbatch_size=2)
    )
    try:
        steps = [
            batch.to_training()["input"] for batch, _ in zip(pipeline, range(40), strict=False)
        ]
    finally:
        pipeline.close()
    tokens = torch.cat(steps)
    assert int(tokens.max()) < tok.vocab_size and (tokens == tok.eos_id).any()
