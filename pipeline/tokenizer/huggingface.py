"""``HuggingFaceTokenizer``: a Hugging Face ``tokenizer.json`` (GPT-NeoX, Pythia, OLMo, ...)."""

from __future__ import annotations

import importlib.metadata
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

from pipeline.errors import ConfigError, TokenizerError
from pipeline.tokenizer.base import Tokenizer, sha256_hex

#: ``tokenizers`` reads this environment variable at every batch call: "false" encodes a
#: batch in the calling thread only.
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"
#: The file beside ``tokenizer.json`` that names its EOS token (``eos_token``).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def read_tokenizer_config(config_path: Path) -> dict[str, Any]:
    """A ``tokenizer_config.json`` as a dict; ``{}`` when there is none."""
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise TokenizerError(f"cannot read {config_path}: {e}") from e
    return config if isinstance(config, dict) else {}


def eos_token_of(config: dict[str, Any]) -> str | None:
    """The ``eos_token`` of a tokenizer config (a string or ``{"content": ...}``)."""
    eos = config.get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) and eos else None


class HuggingFaceTokenizer(Tokenizer):
    """A ``tokenizers`` tokenizer from a local ``tokenizer.json``.

    Special-token strings inside the text are encoded as plain text (as for gpt2), and no
    BOS/EOS template is applied: the pipeline places EOS between documents itself.
    """

    def __init__(self, path: Path, eos: str | None = None) -> None:
        """Load ``path`` (a ``tokenizer.json``); EOS is ``eos``, else the ``eos_token`` of the
        ``tokenizer_config.json`` beside it.

        Raises:
            TokenizerError: the file is missing or not a tokenizer.json.
            ConfigError: no EOS token is known, or it is not in the vocabulary.
        """
        try:
            data = path.read_bytes()
        except OSError as e:
            raise TokenizerError(f"cannot read the tokenizer file {path}: {e}") from e
        try:
            tokenizer = tokenizers.Tokenizer.from_str(data.decode())
        except Exception as e:  # the Rust parser raises a plain Exception
            raise TokenizerError(f"{path} is not a Hugging Face tokenizer.json: {e}") from e
        config_path = path.parent / TOKENIZER_CONFIG_FILE
        eos_token = eos or eos_token_of(read_tokenizer_config(config_path))
        specials = sorted(
            token.content
            for token in tokenizer.get_added_tokens_decoder().values()
            if token.special
        )
        if eos_token is None:
            raise ConfigError(
                f"the tokenizer {path} names no EOS token (no eos_token in {config_path}); "
                f"set it explicitly, e.g. data.tokenizer='{path};eos={specials[0] if specials else '<|endoftext|>'}'"
                f" (its special tokens: {specials or 'none'})"
            )
        eos_id = tokenizer.token_to_id(eos_token)
        if eos_id is None:
            raise ConfigError(
                f"EOS token {eos_token!r} is not in the vocabulary of {path}; "
                f"its special tokens are {specials or 'none'}"
            )
        tokenizer.encode_special_tokens = True  # special-token strings in data are text
        # The pipeline's tokenize workers are its parallelism: tokenizers fanning every batch
        # out over all cores as well would use more cores than asked (and measured slower on
        # chunks of ~8k tokens). An explicit setting of the user's is kept.
        os.environ.setdefault(TOKENIZERS_PARALLELISM, "false")
        self.name = "huggingface"
        self.eos_id = eos_id
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.version = importlib.metadata.version("tokenizers")
        self.fingerprint = self.content_fingerprint(
            {
                "name": self.name,
                "tokenizer_json_sha256": sha256_hex(data),
                "eos": eos_token,
                "eos_id": eos_id,
                "n_vocab": self.vocab_size,
            }
        )
        self._tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no template tokens added)."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as uint32 arrays; ``tokenizers`` encodes the batch in
        parallel with the GIL released."""
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [np.asarray(encoding.ids, dtype=np.uint32) for encoding in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens included."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)
