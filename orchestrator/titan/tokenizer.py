"""``ZephonTokenizer``: Zephon's offline tiktoken encoding as a TorchTitan tokenizer component.

TorchTitan builds ``config.tokenizer`` before the data loader and hands it to
``config.dataloader.build(tokenizer=...)`` (and to the validator). Its default
``HuggingFaceTokenizer`` needs tokenizer files under ``--hf-assets-path``; this
component instead loads the encoding Zephon provisions at set-up
(``zephon-provision-tokenizer``), so training never touches the network, and the
trainer's tokenizer is the very one the lane pipeline tokenizes with.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.tokenizer import BaseTokenizer

from pipeline import Tokenizer, load_tokenizer


class ZephonTokenizer(BaseTokenizer):
    """``encode(text, add_bos, add_eos)`` over a Zephon tokenizer; gpt2 has no BOS token."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        name: str = "gpt2"
        """Zephon tokenizer id (``pipeline.tokenizer.SUPPORTED_TOKENIZERS``)."""

    def __init__(self, config: Config, *, tokenizer_path: str | None = None) -> None:
        # tokenizer_path (TorchTitan's --hf-assets-path) is not used: the file is provisioned.
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
        """Number of token ids (gpt2: 50257)."""
        return self.tokenizer.vocab_size
