"""A byte-level BPE trained on the local corpus, for models that learn in minutes on a CPU.

The gpt2 vocabulary (50,257 tokens) makes a small model's output layer nearly all of its
arithmetic and leaves a 10-step proxy near an untrained model's score; a vocabulary of a
couple of thousand tokens learned from the corpus itself lets the main job's models learn.
The build is deterministic and idempotent (``tokenizer_config.json``, written last, marks a
finished folder). Design: docs/design/benchmarks_local_corpus.md
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from pipeline import Dataset

EOS = "<|endoftext|>"
TRAINING_BYTES_PER_DOMAIN = 1_000_000
"""Text of each domain the BPE learns from (the first records of its shards)."""


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


def build_local_tokenizer(
    corpus: dict[str, list[Path]], folder: Path, *, vocab_size: int = 2048
) -> Path:
    """The folder of a byte-level BPE of ``vocab_size`` tokens learned from the first
    :data:`TRAINING_BYTES_PER_DOMAIN` of each domain of ``corpus`` (built once; a folder
    with its ``tokenizer_config.json`` is reused), EOS named, as ``data.tokenizer`` takes it."""
    if (folder / "tokenizer_config.json").exists():
        return folder
    texts: list[str] = []
    for name, paths in sorted(corpus.items()):
        dataset = Dataset(name, [str(p) for p in paths], cache_dir=str(folder / "index"))
        taken = 0
        for start in range(0, dataset.num_records, 256):
            batch = dataset.read_texts(list(range(start, min(start + 256, dataset.num_records))))
            texts += batch
            taken += sum(len(t.encode()) for t in batch)
            if taken >= TRAINING_BYTES_PER_DOMAIN:
                break
    train_byte_level_bpe(texts, folder, vocab_size=vocab_size)
    # written last: its presence says the folder is complete
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    return folder
