"""Tokenizer specs: names, paths, options, and the errors that say what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import ConfigError, TokenizerError, canonical_tokenizer_spec, load_tokenizer
from tests.support.tokenizers import GPT_NEOX


def test_a_relative_path_is_made_absolute_and_gpt2_names_are_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(GPT_NEOX.parent)
    assert canonical_tokenizer_spec("gpt-neox;eos=<|endoftext|>") == (
        f"{GPT_NEOX / 'tokenizer.json'};eos=<|endoftext|>"
    )
    assert canonical_tokenizer_spec("r50k_base") == "gpt2"


def test_the_loaded_tokenizer_is_cached_per_spec_and_file() -> None:
    assert load_tokenizer(str(GPT_NEOX)) is load_tokenizer(str(GPT_NEOX / "tokenizer.json"))


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("llama3", ConfigError, "unknown tokenizer 'llama3'"),
        ("gpt2;eos=<|x|>", ConfigError, "gpt2 takes no options"),
        ("/no/such/tokenizer.json", TokenizerError, "no tokenizer file at /no/such"),
        (f"{GPT_NEOX};eos", ConfigError, "is not KEY=VALUE"),
        (f"{GPT_NEOX};colour=red", ConfigError, "is not KEY=VALUE"),
        (f"{GPT_NEOX};pattern=llama3", ConfigError, "applies to tiktoken BPE files"),
    ],
)
def test_bad_specs_are_refused_saying_why(spec: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        load_tokenizer(spec)


def test_a_folder_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"holds neither tokenizer\.json nor tokenizer\.model"):
        load_tokenizer(str(tmp_path))
