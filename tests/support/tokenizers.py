"""Tokenizer files for the tests: the real GPT-NeoX tokenizer, and a BPE trained on the corpus."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

#: EleutherAI's GPT-NeoX tokenizer (tokenizer.json + tokenizer_config.json), tests/data/.
GPT_NEOX = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt-neox"
GPT_NEOX_VOCAB = 50277
EOS = "<|endoftext|>"


def train_byte_level_bpe(texts: Iterable[str], folder: Path, vocab_size: int = 2000) -> Path:
    """Train a byte-level BPE on ``texts`` and save it as ``folder/tokenizer.json`` (no
    tokenizer_config.json: it names no EOS, which the spec must then give)."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"
