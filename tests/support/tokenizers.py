"""Tokenizer files for the tests: the real GPT-NeoX tokenizer, and a BPE trained on the corpus."""

from __future__ import annotations

from pathlib import Path

from demo.local_tokenizer import EOS, train_byte_level_bpe

#: EleutherAI's GPT-NeoX tokenizer (tokenizer.json + tokenizer_config.json), tests/data/.
GPT_NEOX = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt-neox"
GPT_NEOX_VOCAB = 50277

__all__ = ["EOS", "GPT_NEOX", "GPT_NEOX_VOCAB", "train_byte_level_bpe"]
