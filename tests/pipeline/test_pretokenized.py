"""Pre-tokenized datasets in the lane pipeline: the same documents given as token files or as
text give the same global batches, alone, mixed with text and through a filter; their
declared tokenizer must be the run's, and a step that changes text cannot apply to them.

Text and token files are compared with a byte-level tokenizer of no merges (one token per
byte of ASCII text): then a text dataset's measured tokens per byte is exactly 1, as a
pre-tokenized dataset's is by construction, so the plan's estimated costs, and with them
every draw, chunk and batch, are the same. With a BPE the text dataset's costs would be
estimates (bytes x measured tokens per byte) where the token files' are exact: other chunks,
so other batches, by design."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from pipeline import Dataset, WorkSource
from pipeline.dataset import TokenDeclaration
from pipeline.errors import ConfigError, StageError
from pipeline.tokenizer import load_tokenizer
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.pipelines import make_pipeline
from tests.support.token_files import TEXTS, write_megatron, write_token_array
from tests.support.tokenizers import EOS, train_byte_level_bpe

OTHER_TEXTS = [f"Other {i}: " + "lorem ipsum dolor " * (1 + i % 9) for i in range(80)]
STEPS = 6


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A byte-level BPE without merges (256 bytes and EOS), as a tokenizer spec."""
    path = train_byte_level_bpe(TEXTS, tmp_path_factory.mktemp("tok"), vocab_size=257)
    return f"{path};eos={EOS}"


def as_tokens(tmp: Path, fmt: str, spec: str) -> Dataset:
    """``TEXTS`` as dataset ``a``: JSONL, or tokenized with ``spec`` into token files."""
    if fmt == "jsonl":
        return Dataset("a", write_jsonl(tmp / "a.jsonl", TEXTS), cache_dir=tmp / "cache")
    tokenizer = load_tokenizer(spec)
    docs = tokenizer.encode_batch(TEXTS)
    if fmt == "megatron":
        path = write_megatron(tmp / "a", docs, eos_id=tokenizer.eos_id, sequences=2)
    else:
        path = write_token_array(tmp / "a.npy", docs, eos_id=tokenizer.eos_id)
    return Dataset("a", path, tokens=TokenDeclaration(spec), cache_dir=tmp / "cache")


def mixed(tmp: Path, fmt: str, spec: str) -> WorkSource:
    """``a`` (in format ``fmt``) and the JSONL dataset ``b``, 70/30, in folder ``tmp``."""
    tmp.mkdir(exist_ok=True)
    b = Dataset("b", write_jsonl(tmp / "b.jsonl", OTHER_TEXTS), cache_dir=tmp / "cache")
    return WorkSource(
        [as_tokens(tmp, fmt, spec), b], {"a": 0.7, "b": 0.3}, seed=3, chunk_tokens=300
    )


@pytest.mark.parametrize("fmt", ["megatron", "token_array"])
@pytest.mark.parametrize("process", [[], [{"step": "length", "min_chars": 60}]])
def test_token_files_give_the_batches_of_the_same_text(
    fmt: str, process: list, byte_tokenizer: str, tmp_path: Path
) -> None:
    text = run_ranks(
        mixed(tmp_path / "text", "jsonl", byte_tokenizer),
        2,
        STEPS,
        tokenizer=byte_tokenizer,
        process=process,
    )
    tokens = run_ranks(
        mixed(tmp_path / "tokens", fmt, byte_tokenizer),
        2,
        STEPS,
        tokenizer=byte_tokenizer,
        process=process,
        token_cache_dir=str(tmp_path / "token_cache"),  # passed by: nothing to cache
    )
    assert tokens.digests == text.digests
    for step in range(STEPS):
        np.testing.assert_array_equal(
            tokens.tokens[step], text.tokens[step], err_msg=f"step {step}"
        )


def test_another_tokenizer_than_the_declared_one_is_refused_before_any_read(
    byte_tokenizer: str, tmp_path: Path
) -> None:
    source = mixed(tmp_path, "megatron", byte_tokenizer)
    pipeline = make_pipeline(source, tokenizer="gpt2")
    with pytest.raises(ConfigError, match=r"dataset 'a' is pre-tokenized .* set the run's"):
        next(iter(pipeline))
    assert source.datasets[0].report()["shards_indexed"] == 0


def test_a_step_that_changes_text_cannot_apply_to_token_files(
    byte_tokenizer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shouting.py").write_text(
        textwrap.dedent(
            """
            def shout(text):
                return text.upper()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    source = mixed(tmp_path, "token_array", byte_tokenizer)
    with pytest.raises(StageError, match="steps that transform text cannot apply to token files"):
        run_ranks(source, 1, 1, tokenizer=byte_tokenizer, process=["shouting:shout"])
    # Limited to the text dataset, it applies.
    step = {"function": "shouting:shout", "datasets": ["b"]}
    run_ranks(source, 1, 1, tokenizer=byte_tokenizer, process=[step])
