"""``Tokenizer``: what the pipeline, the trainer and the evaluator need of a tokenizer."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


class Tokenizer(abc.ABC):
    """A tokenizer read from local files; equal fingerprints give equal ids.

    Attributes:
        name: the kind of tokenizer (``gpt2``, ``huggingface``, ``tiktoken``); never a path,
            so that the same file elsewhere gives the same data contract.
        eos_id: id of the end-of-sequence token packed between documents.
        vocab_size: number of ids, special tokens included (the model's embedding must be
            at least this large).
        fingerprint: sha256 hex of the tokenizer's content (file hash, pattern, special
            tokens, EOS), recorded in data contracts.
        version: version of the package doing the encoding.
    """

    name: str
    eos_id: int
    vocab_size: int
    fingerprint: str
    version: str

    @staticmethod
    def content_fingerprint(identity: dict[str, Any]) -> str:
        """The fingerprint of a tokenizer described by ``identity`` (JSON-serialisable)."""
        return sha256_hex(json.dumps(identity, sort_keys=True).encode())

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in the text are plain text."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text."""
        return [array.tolist() for array in self.encode_arrays(texts)]

    @abc.abstractmethod
    def encode_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as uint32 arrays (the pipeline's fast path)."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, fingerprint={self.fingerprint[:12]}...)"
