"""``ZephonTokenizer``: the lane pipeline's tokenizer (``pipeline.load_tokenizer``) as a
TorchTitan tokenizer component, so the trainer's tokenizer is the very one the pipeline
tokenizes with and training reads only local files."""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.tokenizer import BaseTokenizer

from pipeline import Tokenizer, load_tokenizer


class ZephonTokenizer(BaseTokenizer):
    """``encode(text, add_bos, add_eos)`` over a Zephon tokenizer; no BOS is ever added (the
    lane pipeline separates documents with EOS alone)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        name: str = "gpt2"
        """Zephon tokenizer spec: ``gpt2`` or a tokenizer file (``pipeline.load_tokenizer``)."""

    def __init__(self, config: Config, *, tokenizer_path: str | None = None) -> None:
        # tokenizer_path (TorchTitan's --hf-assets-path) is not used: the spec names the file.
        super().__init__()
        self.name = config.name
        self.tokenizer: Tokenizer = load_tokenizer(config.name)
        self.eos_id = self.tokenizer.eos_id
        self.bos_id = None

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Token ids of ``text``, plus EOS when ``add_eos`` (``add_bos`` has no effect)."""
        ids = self.tokenizer.encode(text)
        if add_eos:
            ids.append(self.tokenizer.eos_id)
        return ids

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``."""
        return self.tokenizer.decode(ids)

    def get_vocab_size(self) -> int:
        """Number of token ids, special tokens included (gpt2: 50257)."""
        return self.tokenizer.vocab_size
