"""The gpt2 tokenizer (tiktoken's ``r50k_base``), usable without network access.

``tiktoken.get_encoding("gpt2")`` downloads its vocabulary at run time, which
fails on air-gapped training nodes. Zephon instead provisions the BPE file once,
at set-up time (``zephon-provision-tokenizer``, run by ``scripts/setup.sh``), into
``zephon_home()/"tokenizers"``; training only ever reads that file.

Where the file comes from: the source distribution of ``openai-whisper==20250625``
(MIT) ships ``whisper/assets/gpt2.tiktoken``, which is byte-identical to tiktoken's
``r50k_base.tiktoken``. ``pip download`` fetches that archive from the package
registry, which is reachable from machines that can install Python packages at
all. The file is checked against the sha256 that tiktoken itself expects.

Provisioning also drops a copy into tiktoken's own cache, so plain
``tiktoken.get_encoding("r50k_base")`` works offline too (tests compare against it).
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

from pipeline.errors import ConfigError, TokenizerError
from pipeline.paths import zephon_home

#: sha256 of ``r50k_base.tiktoken``: the ``expected_hash`` of ``r50k_base`` in
#: ``tiktoken_ext/openai_public.py`` (tiktoken 0.14.0).
R50K_BASE_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
#: File name of the provisioned BPE file inside ``zephon_home()/"tokenizers"``.
BPE_FILE_NAME = "r50k_base.tiktoken"
#: tiktoken caches files under ``sha1(url)``; this URL is only used as that cache key.
TIKTOKEN_R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"

#: The source archive that carries the file, and the file's path inside it.
SOURCE_REQUIREMENT = "openai-whisper==20250625"
SOURCE_MEMBER_SUFFIX = "whisper/assets/gpt2.tiktoken"

GPT2_NAME = "gpt2"
EOS_TOKEN = "<|endoftext|>"
GPT2_EOS_ID = 50256
GPT2_VOCAB_SIZE = 50257
#: Tokenizer ids accepted by ``load_tokenizer``; both name the same encoding.
SUPPORTED_TOKENIZERS = ("gpt2", "r50k_base")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; the file is public data that other users may share.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_if_valid(path: Path) -> bytes | None:
    """Return the file's bytes if it exists and has the expected hash, else None."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return data if _sha256(data) == R50K_BASE_SHA256 else None


def _tiktoken_cache_path() -> Path | None:
    """Where tiktoken looks for a cached ``r50k_base`` file (see ``tiktoken/load.py``).

    Returns None when the user disabled tiktoken's cache (``TIKTOKEN_CACHE_DIR=""``).
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return Path(cache_dir) / hashlib.sha1(TIKTOKEN_R50K_URL.encode()).hexdigest()


def _fetch_from_registry(dest: Path) -> bytes:
    """Download the whisper source archive with pip and return the verified BPE file.

    ``dest`` (where the file will go) only appears in error messages.
    """
    by_hand = f"copy {BPE_FILE_NAME} (sha256 {R50K_BASE_SHA256}) to {dest} by hand"
    with tempfile.TemporaryDirectory(prefix="zephon-tokenizer-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            SOURCE_REQUIREMENT,
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-10:])
            raise TokenizerError(
                f"could not download {SOURCE_REQUIREMENT} (it carries the gpt2 tokenizer file): "
                f"pip exited with code {proc.returncode}:\n{tail}\n"
                f"Run this on a machine that can reach the package registry, or {by_hand}."
            )
        archives = sorted(Path(tmp).glob("*.tar.gz"))
        if not archives:
            raise TokenizerError(
                f"pip downloaded no source archive for {SOURCE_REQUIREMENT} into {tmp}; "
                "check that the package index offers its source distribution."
            )
        data = None
        with tarfile.open(archives[0], "r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(SOURCE_MEMBER_SUFFIX):
                    extracted = tar.extractfile(member)
                    if extracted is not None:
                        data = extracted.read()
                    break
        if data is None:
            raise TokenizerError(
                f"{archives[0].name} has no member ending in {SOURCE_MEMBER_SUFFIX}; the "
                f"pinned {SOURCE_REQUIREMENT} archive seems altered; {by_hand}."
            )
    actual = _sha256(data)
    if actual != R50K_BASE_SHA256:
        raise TokenizerError(
            f"sha256 mismatch for {SOURCE_MEMBER_SUFFIX} from {SOURCE_REQUIREMENT}: expected "
            f"{R50K_BASE_SHA256}, got {actual}. Not installing it; check the package index "
            f"or {by_hand}."
        )
    return data


def provision(dest_dir: Path | None = None) -> Path:
    """Make sure the gpt2 BPE file is on disk; return its path.

    A file already at ``<dest_dir>/r50k_base.tiktoken`` (default
    ``zephon_home()/"tokenizers"``) with the expected sha256 is kept as is and pip
    is not called. Otherwise the file is extracted from the ``openai-whisper``
    source archive (downloaded with pip), verified and written atomically. In both
    cases a verified copy is also placed in tiktoken's cache (unless the user
    disabled it) so that ``tiktoken.get_encoding("r50k_base")`` works offline.

    Raises:
        TokenizerError: the download failed, the archive lacks the file, the hash
            does not match, or a file cannot be written.
    """
    dest = (dest_dir if dest_dir is not None else zephon_home() / "tokenizers") / BPE_FILE_NAME
    data = _read_if_valid(dest)
    try:
        if data is None:
            data = _fetch_from_registry(dest)
            _write_atomic(dest, data)
        cache_path = _tiktoken_cache_path()
        if cache_path is not None and _read_if_valid(cache_path) is None:
            _write_atomic(cache_path, data)
    except OSError as e:
        raise TokenizerError(
            f"could not write the gpt2 tokenizer file: {e}; check permissions or set "
            "ZEPHON_HOME / TIKTOKEN_CACHE_DIR to a writable directory."
        ) from e
    return dest


def provision_main(argv: Sequence[str] | None = None) -> int:
    """CLI ``zephon-provision-tokenizer``: provision the gpt2 file, print its path.

    Returns the process exit code: 0 on success, 1 with the error on stderr.
    """
    parser = argparse.ArgumentParser(
        prog="zephon-provision-tokenizer",
        description="Fetch and verify the gpt2 (r50k_base) tokenizer file for offline use.",
    )
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="directory for the file (default: $ZEPHON_HOME/tokenizers or "
        "~/.cache/zephon/tokenizers)",
    )
    args = parser.parse_args(argv)
    try:
        path = provision(args.dest)
    except TokenizerError as e:
        print(f"zephon-provision-tokenizer: error: {e}", file=sys.stderr)
        return 1
    print(f"gpt2 tokenizer file: {path}")
    return 0


def _parse_bpe(data: bytes, path: Path) -> dict[bytes, int]:
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
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as e:
            raise TokenizerError(f"cannot parse line {line[:80]!r} of {path}: {e}") from e
    return ranks


class Tokenizer:
    """The gpt2 encoding, built from a local BPE file (no network access).

    Attributes:
        name: encoding name, always ``"gpt2"`` (``r50k_base`` is the same encoding).
        eos_id: id of ``<|endoftext|>`` (50256).
        vocab_size: number of ids (50257).
        fingerprint: sha256 hex identifying the encoding (BPE file hash, name, regex,
            special tokens); equal fingerprints give equal ids. Used in data contracts.
        version: version of the tiktoken package doing the encoding.
    """

    def __init__(self, path: Path) -> None:
        """Load and verify the BPE file at ``path``.

        Raises:
            TokenizerError: the file is missing, corrupt or unparsable.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise TokenizerError(
                f"gpt2 tokenizer file not found at {path}; run `zephon-provision-tokenizer` "
                "(or `bash scripts/setup.sh`) on a machine that can reach the package "
                "registry, or copy the file there"
            ) from e
        actual = _sha256(data)
        if actual != R50K_BASE_SHA256:
            raise TokenizerError(
                f"gpt2 tokenizer file at {path} is corrupt: sha256 mismatch (expected "
                f"{R50K_BASE_SHA256}, got {actual}); delete it and run "
                "`zephon-provision-tokenizer` again"
            )
        self.name: str = GPT2_NAME
        self.eos_id: int = GPT2_EOS_ID
        self.vocab_size: int = GPT2_VOCAB_SIZE
        self.version: str = importlib.metadata.version("tiktoken")
        identity = {
            "name": self.name,
            "bpe_sha256": actual,
            "pat_str": r50k_pat_str,
            "special_tokens": {EOS_TOKEN: GPT2_EOS_ID},
            "n_vocab": GPT2_VOCAB_SIZE,
        }
        self.fingerprint: str = _sha256(json.dumps(identity, sort_keys=True).encode())
        self._ranks = _parse_bpe(data, path)
        self._enc = self._new_encoding()
        self._per_thread = threading.local()

    def _new_encoding(self) -> tiktoken.Encoding:
        return tiktoken.Encoding(
            name=self.name,
            pat_str=r50k_pat_str,
            mergeable_ranks=self._ranks,
            special_tokens={EOS_TOKEN: GPT2_EOS_ID},
            explicit_n_vocab=GPT2_VOCAB_SIZE,
        )

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

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, on the calling thread (callers parallelise themselves).

        tiktoken releases the GIL while encoding, so several threads calling this scale.
        """
        encode = self._enc.encode_ordinary
        return [encode(text) for text in texts]

    def encode_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as uint32 arrays, skipping Python lists (the fast path).

        Encodes with the calling thread's own copy of the encoding (see
        ``_thread_encoding``); ``disallowed_special=()`` makes special-token strings
        plain text, as in ``encode``.
        """
        encode = self._thread_encoding().encode_to_numpy
        return [encode(text, disallowed_special=()) for text in texts]

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The underlying ``tiktoken.Encoding`` (for comparisons against raw tiktoken)."""
        return self._enc

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; invalid UTF-8 byte sequences become U+FFFD."""
        return self._enc.decode(list(ids))

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, fingerprint={self.fingerprint[:12]}...)"


@functools.lru_cache(maxsize=8)
def _load_cached(path: Path) -> Tokenizer:
    # Keyed by path (not id) so "gpt2" and "r50k_base" share one instance and a
    # changed ZEPHON_HOME is honoured. Failures are not cached by lru_cache.
    return Tokenizer(path)


def load_tokenizer(tokenizer_id: str = "gpt2") -> Tokenizer:
    """Return the tokenizer ``tokenizer_id`` from ``zephon_home()/"tokenizers"``.

    Loading takes ~0.3 s, so instances are cached per file.

    Raises:
        ConfigError: ``tokenizer_id`` is not one of ``SUPPORTED_TOKENIZERS``.
        TokenizerError: the file is missing or corrupt (the message says how to fix it).
    """
    if tokenizer_id not in SUPPORTED_TOKENIZERS:
        raise ConfigError(
            f"unknown tokenizer {tokenizer_id!r}; supported: {', '.join(SUPPORTED_TOKENIZERS)}"
        )
    return _load_cached(zephon_home() / "tokenizers" / BPE_FILE_NAME)


def clear_tokenizer_cache() -> None:
    """Forget loaded tokenizers (after replacing files or changing ``ZEPHON_HOME``)."""
    _load_cached.cache_clear()
