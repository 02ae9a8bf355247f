"""Tests of the offline gpt2 tokenizer.

They never download anything: they rely on ``provision()`` having run at set-up
(``bash scripts/setup.sh``), and every test that could reach pip has
``subprocess.run`` replaced.
"""

from __future__ import annotations

import inspect
import io
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public

from pipeline import tokenizer as tok_mod
from pipeline.errors import ConfigError, TokenizerError
from pipeline.paths import zephon_home
from pipeline.tokenizer import (
    BPE_FILE_NAME,
    R50K_BASE_SHA256,
    clear_tokenizer_cache,
    load_tokenizer,
    provision,
    provision_main,
)
from pipeline.tokenizer import (
    Gpt2Tokenizer as Tokenizer,
)


def _no_pip(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"subprocess.run must not be called: {args}")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No pip, a private tiktoken cache, and no tokenizer cached across tests."""
    monkeypatch.setattr(subprocess, "run", _no_pip)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    clear_tokenizer_cache()
    yield
    clear_tokenizer_cache()


@pytest.fixture(scope="session")
def bpe_bytes() -> bytes:
    """The provisioned BPE file (read before any test changes ZEPHON_HOME)."""
    path = zephon_home() / "tokenizers" / BPE_FILE_NAME
    if not path.is_file():
        pytest.fail(f"{path} missing: run `bash scripts/setup.sh` (it provisions the tokenizer)")
    return path.read_bytes()


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bpe_bytes: bytes) -> Path:
    """A ZEPHON_HOME under tmp_path holding a valid copy of the BPE file."""
    (tmp_path / "home" / "tokenizers").mkdir(parents=True)
    (tmp_path / "home" / "tokenizers" / BPE_FILE_NAME).write_bytes(bpe_bytes)
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _sample_texts() -> list[str]:
    from pydoc_data.topics import topics

    return [
        inspect.getsource(json),
        topics["assert"],
        "naïve café — 日本語のテキスト, emoji 🎉, tabs\tand  spaces\n\n\n",
        "text with <|endoftext|> inside",
        "",
    ]


def test_ids_match_tiktoken_r50k_base(home: Path) -> None:
    provision()  # valid file: only fills the private tiktoken cache, no pip
    reference = tiktoken.get_encoding("r50k_base")
    tok = load_tokenizer()
    texts = _sample_texts()
    for text in texts:
        ids = tok.encode(text)
        assert ids == reference.encode_ordinary(text)
        assert tok.decode(ids) == text
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_known_ids_and_attributes(home: Path) -> None:
    tok = load_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.name == "gpt2"
    assert tok.eos_id == 50256
    assert tok.vocab_size == 50257
    assert tok.decode([tok.eos_id]) == "<|endoftext|>"
    assert tok.eos_id not in tok.encode("a <|endoftext|> b")
    assert tok.version == tiktoken.__version__
    assert len(tok.fingerprint) == 64
    assert Tokenizer(home / "tokenizers" / BPE_FILE_NAME).fingerprint == tok.fingerprint


def test_ids_are_cached_and_aliases_share_the_encoding(home: Path) -> None:
    assert load_tokenizer("gpt2") is load_tokenizer("gpt2")
    assert load_tokenizer("r50k_base") is load_tokenizer("gpt2")


def test_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "empty"))
    with pytest.raises(TokenizerError, match="zephon-provision-tokenizer") as info:
        load_tokenizer()
    assert str(tmp_path / "empty" / "tokenizers" / BPE_FILE_NAME) in str(info.value)


def test_corrupt_file(home: Path) -> None:
    path = home / "tokenizers" / BPE_FILE_NAME
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(TokenizerError, match="mismatch"):
        load_tokenizer()


def test_unknown_id() -> None:
    with pytest.raises(ConfigError, match="gpt2, r50k_base"):
        load_tokenizer("cl100k_base")


def test_provision_is_idempotent_without_pip(tmp_path: Path, bpe_bytes: bytes) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / BPE_FILE_NAME).write_bytes(bpe_bytes)
    before = (dest / BPE_FILE_NAME).stat().st_mtime_ns
    assert provision(dest) == dest / BPE_FILE_NAME
    assert provision(dest) == dest / BPE_FILE_NAME
    assert (dest / BPE_FILE_NAME).stat().st_mtime_ns == before
    cached = list((tmp_path / "tiktoken-cache").iterdir())
    assert [p.read_bytes() for p in cached] == [bpe_bytes]


def _fake_pip(monkeypatch: pytest.MonkeyPatch, members: dict[str, bytes], rc: int = 0) -> None:
    """Make ``pip download`` write an sdist with ``members`` (or fail with ``rc``)."""

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        assert cmd[1:4] == ["-m", "pip", "download"] and tok_mod.SOURCE_REQUIREMENT in cmd
        if rc:
            return subprocess.CompletedProcess(cmd, rc, "", "ERROR: no matching distribution")
        out = Path(cmd[cmd.index("-d") + 1])
        with tarfile.open(out / "openai_whisper-20250625.tar.gz", "w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)


MEMBER = "openai_whisper-20250625/whisper/assets/gpt2.tiktoken"


def test_provision_extracts_and_verifies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bpe_bytes: bytes
) -> None:
    _fake_pip(monkeypatch, {"openai_whisper-20250625/setup.py": b"", MEMBER: bpe_bytes})
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / BPE_FILE_NAME).write_bytes(b"corrupt")  # replaced, not trusted
    path = provision(dest)
    assert path.read_bytes() == bpe_bytes
    assert sorted(p.name for p in dest.iterdir()) == [BPE_FILE_NAME]  # no temp files left


@pytest.mark.parametrize(
    ("members", "rc", "message"),
    [
        ({}, 1, "pip exited with code 1"),
        ({"openai_whisper-20250625/setup.py": b""}, 0, "has no member"),
        ({MEMBER: b"not the file"}, 0, "sha256 mismatch"),
    ],
)
def test_provision_errors(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    members: dict[str, bytes],
    rc: int,
    message: str,
) -> None:
    _fake_pip(monkeypatch, members, rc)
    with pytest.raises(TokenizerError, match=message):
        provision(tmp_path / "dest")
    assert not (tmp_path / "dest" / BPE_FILE_NAME).exists()


def test_provision_main(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    bpe_bytes: bytes,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / BPE_FILE_NAME).write_bytes(bpe_bytes)
    assert provision_main(["--dest", str(tmp_path / "ok")]) == 0
    assert str(tmp_path / "ok" / BPE_FILE_NAME) in capsys.readouterr().out

    _fake_pip(monkeypatch, {}, rc=1)
    assert provision_main(["--dest", str(tmp_path / "bad")]) == 1
    assert "no matching distribution" in capsys.readouterr().err


def test_expected_hash_is_tiktokens() -> None:
    assert R50K_BASE_SHA256 in inspect.getsource(openai_public.r50k_base)
