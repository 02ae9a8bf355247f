"""``TiktokenTokenizer``: a tiktoken BPE file (``base64(token) rank`` per line) and its pattern."""

from __future__ import annotations

import base64
import importlib.metadata
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

from pipeline.errors import ConfigError, TokenizerError
from pipeline.tokenizer.base import Tokenizer, sha256_hex

#: Pre-tokenizer patterns by name, for ``pattern=NAME`` (any other value is the regex itself).
NAMED_PATTERNS = {
    "r50k_base": r50k_pat_str,
    "gpt2": r50k_pat_str,
    # tiktoken_ext/openai_public.py, cl100k_base (tiktoken 0.14.0).
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    # Meta's Llama 3 tokenizer (llama/tokenizer.py, and TorchTitan's former tiktoken loader).
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


def parse_bpe_ranks(data: bytes, path: Path) -> dict[bytes, int]:
    """Parse the ``.tiktoken`` format (``base64(token) rank`` per line).

    Same format as ``tiktoken.load.load_tiktoken_bpe``, which is not used because it
    also copies any file it reads into tiktoken's cache directory and raises if a
    user-set cache directory is read-only (common on shared cluster nodes).
    """
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as e:
            raise TokenizerError(
                f"{path} is not a tiktoken BPE file: cannot parse line {line[:80]!r} ({e}); "
                "a BPE file holds one `base64(token) rank` per line (a Hugging Face tokenizer "
                "is a tokenizer.json)"
            ) from e
    if not ranks:
        raise TokenizerError(f"{path} is empty: a tiktoken BPE file holds at least one rank")
    return ranks


class TiktokenTokenizer(Tokenizer):
    """A tiktoken encoding built from a local BPE file (no network access)."""

    def __init__(
        self,
        data: bytes,
        path: Path,
        *,
        pattern: str,
        special_tokens: dict[str, int],
        eos_id: int,
        vocab_size: int | None = None,
        name: str = "tiktoken",
    ) -> None:
        """Build the encoding from the BPE file's bytes ``data`` (read from ``path``).

        ``pattern`` is a regex or a name of ``NAMED_PATTERNS``; ``special_tokens`` must
        hold ``eos_id``; ``vocab_size`` defaults to the largest id + 1.

        Raises:
            TokenizerError: the file cannot be parsed.
            ConfigError: the EOS id is not a special token, or the vocabulary is too small.
        """
        ranks = parse_bpe_ranks(data, path)
        pat_str = NAMED_PATTERNS.get(pattern, pattern)
        if eos_id not in special_tokens.values():
            raise ConfigError(
                f"EOS id {eos_id} of {path} is not one of its special tokens {special_tokens}"
            )
        largest = max(max(ranks.values()), max(special_tokens.values()))
        n_vocab = vocab_size if vocab_size is not None else largest + 1
        if n_vocab <= largest:
            raise ConfigError(
                f"vocab_size={n_vocab} of {path} must exceed its largest id {largest}"
            )
        self.name = name
        self.eos_id = eos_id
        self.vocab_size = n_vocab
        self.version = importlib.metadata.version("tiktoken")
        self.fingerprint = self.content_fingerprint(
            {
                "name": name,
                "bpe_sha256": sha256_hex(data),
                "pat_str": pat_str,
                "special_tokens": special_tokens,
                "n_vocab": n_vocab,
            }
        )
        self._ranks = ranks
        self._pattern = pat_str
        self._special_tokens = dict(special_tokens)
        self._enc = self._new_encoding()
        self._per_thread = threading.local()

    def _new_encoding(self) -> tiktoken.Encoding:
        try:
            return tiktoken.Encoding(
                name=self.name,
                pat_str=self._pattern,
                mergeable_ranks=self._ranks,
                special_tokens=self._special_tokens,
            )
        except ValueError as e:
            raise ConfigError(f"cannot build the tiktoken encoding: {e}") from e

    def _thread_encoding(self) -> tiktoken.Encoding:
        """An encoding used by the calling thread alone (built on its first call, ~30 ms).

        Why: tiktoken's regex engine keeps a fast path for the first thread that uses an
        encoding; every other thread takes a locked slow path, ~30% more CPU per token
        (measured: docs/pipeline_performance.md). Private copies make each worker thread
        the first user of its own. The ids are the same: same ranks, pattern and specials.
        """
        encoding = getattr(self._per_thread, "encoding", None)
        if encoding is None:
            encoding = self._per_thread.encoding = self._new_encoding()
        return encoding

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens in the text are encoded as plain text."""
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, on the calling thread (tiktoken releases the GIL)."""
        encode = self._enc.encode_ordinary
        return [encode(text) for text in texts]

    def encode_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as uint32 arrays, with the calling thread's own encoding."""
        encode = self._thread_encoding().encode_to_numpy
        return [encode(text, disallowed_special=()) for text in texts]

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The underlying ``tiktoken.Encoding`` (for comparisons against raw tiktoken)."""
        return self._enc

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; invalid UTF-8 byte sequences become U+FFFD."""
        return self._enc.decode(list(ids))
