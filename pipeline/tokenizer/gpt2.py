"""The gpt2 tokenizer (tiktoken's ``r50k_base``), provisioned once at set-up, read offline.

Where the file comes from and why: docs/design/pipeline_tokenizers.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tiktoken_ext.openai_public import r50k_pat_str

from pipeline.errors import TokenizerError
from pipeline.paths import zephon_home
from pipeline.tokenizer.base import sha256_hex
from pipeline.tokenizer.tiktoken_bpe import TiktokenTokenizer

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
#: Names of the gpt2 encoding accepted by ``load_tokenizer``.
GPT2_NAMES = ("gpt2", "r50k_base")


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
    return data if sha256_hex(data) == R50K_BASE_SHA256 else None


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
    actual = sha256_hex(data)
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


class Gpt2Tokenizer(TiktokenTokenizer):
    """The gpt2 encoding (``r50k_base``) from the provisioned, verified BPE file."""

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
        actual = sha256_hex(data)
        if actual != R50K_BASE_SHA256:
            raise TokenizerError(
                f"gpt2 tokenizer file at {path} is corrupt: sha256 mismatch (expected "
                f"{R50K_BASE_SHA256}, got {actual}); delete it and run "
                "`zephon-provision-tokenizer` again"
            )
        super().__init__(
            data,
            path,
            pattern=r50k_pat_str,
            special_tokens={EOS_TOKEN: GPT2_EOS_ID},
            eos_id=GPT2_EOS_ID,
            vocab_size=GPT2_VOCAB_SIZE,
            name=GPT2_NAME,
        )


def provisioned_gpt2_path() -> Path:
    """Where ``zephon-provision-tokenizer`` puts the gpt2 BPE file."""
    return zephon_home() / "tokenizers" / BPE_FILE_NAME
