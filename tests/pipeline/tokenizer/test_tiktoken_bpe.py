"""A tiktoken BPE file with its pattern and EOS (as Llama 3's ``tokenizer.model`` is used)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline import ConfigError, TokenizerError, load_tokenizer
from pipeline.tokenizer.gpt2 import provisioned_gpt2_path

TEXT = "Hello world <|endoftext|> déjà vu\n\tdef f(x): return x ** 2\n"


@pytest.fixture
def bpe_folder(tmp_path: Path) -> Path:
    """The gpt2 ranks as a ``tokenizer.model`` in a folder of its own."""
    folder = tmp_path / "bpe"
    folder.mkdir()
    shutil.copy(provisioned_gpt2_path(), folder / "tokenizer.model")
    return folder


def test_gpt2_ranks_with_the_r50k_pattern_give_gpt2_ids(bpe_folder: Path) -> None:
    tok = load_tokenizer(f"{bpe_folder};pattern=r50k_base;eos=<|endoftext|>;eos_id=50256")
    gpt2 = load_tokenizer("gpt2")
    assert (tok.name, tok.eos_id, tok.vocab_size) == ("tiktoken", 50256, 50257)
    assert tok.encode(TEXT) == gpt2.encode(TEXT)
    assert tok.decode(tok.encode(TEXT)) == TEXT


def test_another_pattern_gives_other_ids_and_another_fingerprint(bpe_folder: Path) -> None:
    r50k = load_tokenizer(f"{bpe_folder};pattern=r50k_base;eos=<|endoftext|>;eos_id=50256")
    llama = load_tokenizer(f"{bpe_folder};pattern=llama3;eos=<|endoftext|>;eos_id=50256")
    assert llama.fingerprint != r50k.fingerprint
    assert llama.encode("  1234567") != r50k.encode("  1234567")


def test_eos_and_extra_specials_from_a_tokenizer_config_beside_the_file(bpe_folder: Path) -> None:
    (bpe_folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "<|end_of_text|>",
                "added_tokens_decoder": {
                    "50257": {"content": "<|begin_of_text|>"},
                    "50258": {"content": "<|end_of_text|>"},
                },
            }
        )
    )
    tok = load_tokenizer(f"{bpe_folder / 'tokenizer.model'};pattern=r50k_base;vocab_size=50304")
    assert (tok.eos_id, tok.vocab_size) == (50258, 50304)


def test_what_a_bpe_file_lacks_is_asked_for(bpe_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pattern=NAME"):
        load_tokenizer(str(bpe_folder))
    with pytest.raises(ConfigError, match="eos=TOKEN;eos_id=N"):
        load_tokenizer(f"{bpe_folder};pattern=llama3")
    with pytest.raises(ConfigError, match="must exceed its largest id"):
        load_tokenizer(f"{bpe_folder};pattern=llama3;eos=<e>;eos_id=50256;vocab_size=100")
    (tmp_path / "junk.model").write_text("not base64 at all\n")
    with pytest.raises(TokenizerError, match="not a tiktoken BPE file"):
        load_tokenizer(f"{tmp_path / 'junk.model'};pattern=llama3;eos=<e>;eos_id=9")
