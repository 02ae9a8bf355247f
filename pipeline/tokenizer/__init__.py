"""Tokenizers read from local files: gpt2 (provisioned at set-up), Hugging Face, tiktoken BPE."""

from pipeline.tokenizer.base import Tokenizer
from pipeline.tokenizer.gpt2 import (
    BPE_FILE_NAME,
    R50K_BASE_SHA256,
    SOURCE_REQUIREMENT,
    Gpt2Tokenizer,
    provision,
    provision_main,
)
from pipeline.tokenizer.huggingface import HuggingFaceTokenizer
from pipeline.tokenizer.loader import (
    TokenizerKind,
    TokenizerSpec,
    canonical_tokenizer_spec,
    clear_tokenizer_cache,
    load_tokenizer,
)
from pipeline.tokenizer.tiktoken_bpe import TiktokenTokenizer

__all__ = [
    "BPE_FILE_NAME",
    "R50K_BASE_SHA256",
    "SOURCE_REQUIREMENT",
    "Gpt2Tokenizer",
    "HuggingFaceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerKind",
    "TokenizerSpec",
    "canonical_tokenizer_spec",
    "clear_tokenizer_cache",
    "load_tokenizer",
    "provision",
    "provision_main",
]
