"""``TokenDeclaration``: the tokenizer a pre-tokenized dataset's files were written with.

A dataset of Megatron indexed datasets or OLMo-core token files holds token ids, not text:
its tokenizer must be declared, and it is the run's (checked by fingerprint when the plan
calibrates, before any batch). The declaration enters the data contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from pipeline.errors import ConfigError
from pipeline.formats import TokenFiles
from pipeline.tokenizer import Tokenizer, load_tokenizer


class TokenDtype(StrEnum):
    """The width of an OLMo-core file's ids (OLMo-core's ``NumpyDatasetDType``)."""

    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"


@dataclass(frozen=True)
class TokenDeclaration:
    """A pre-tokenized dataset's tokenizer (a ``load_tokenizer`` spec) and, for OLMo-core
    token files, the width of their ids (None: OLMo-core's rule by vocabulary size)."""

    tokenizer: str
    dtype: TokenDtype | None = None

    def load(self) -> Tokenizer:
        """The declared tokenizer (loaded once per process)."""
        return load_tokenizer(self.tokenizer)

    def files(self) -> TokenFiles:
        """What the readers need of the declaration."""
        tokenizer = self.load()
        dtype = None if self.dtype is None else np.dtype(str(self.dtype)).newbyteorder("<")
        return TokenFiles(tokenizer.eos_id, tokenizer.vocab_size, dtype)

    def index_key(self) -> str:
        """What a shard's index depends on besides its bytes (in place of a text field)."""
        return f"tokens:{self.load().fingerprint}:{self.dtype or 'inferred'}"

    def contract(self) -> dict[str, Any]:
        """The declaration's part of the data contract: the tokenizer by content, never by
        path, and the declared width."""
        tokenizer = self.load()
        return {
            "tokenizer": tokenizer.name,
            "fingerprint": tokenizer.fingerprint,
            "dtype": str(self.dtype or "inferred"),
        }

    def check_tokenizer(self, dataset: str, run: Tokenizer) -> None:
        """ConfigError unless the run tokenizes with the declared tokenizer: the files' ids
        mean nothing to another one."""
        declared = self.load()
        if declared.fingerprint != run.fingerprint:
            raise ConfigError(
                f"dataset {dataset!r} is pre-tokenized with {self.tokenizer!r} "
                f"(fingerprint {declared.fingerprint[:12]}), but the run tokenizes with "
                f"{run.name} (fingerprint {run.fingerprint[:12]}); set the run's tokenizer "
                "(data.tokenizer) to the files' tokenizer, or tokenize the text again"
            )
