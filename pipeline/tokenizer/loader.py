"""``load_tokenizer(spec)``: gpt2 by name, or a tokenizer file named by its path and options.

A spec is ``gpt2`` (alias ``r50k_base``), or ``PATH[;KEY=VALUE]...`` where PATH is

* a Hugging Face ``tokenizer.json``, or a folder holding one (TorchTitan's assets layout);
  EOS from the ``tokenizer_config.json`` beside it, or ``;eos=TOKEN``;
* a tiktoken BPE file (``base64(token) rank`` lines, e.g. Llama 3's ``tokenizer.model``), or
  a folder holding ``tokenizer.model``; it needs ``;pattern=NAME|REGEX`` and EOS from the
  ``tokenizer_config.json`` beside it or ``;eos=TOKEN;eos_id=N``, optionally ``;vocab_size=N``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pipeline.errors import ConfigError, TokenizerError
from pipeline.tokenizer.base import Tokenizer
from pipeline.tokenizer.gpt2 import GPT2_NAMES, Gpt2Tokenizer, provisioned_gpt2_path
from pipeline.tokenizer.huggingface import (
    TOKENIZER_CONFIG_FILE,
    HuggingFaceTokenizer,
    eos_token_of,
    read_tokenizer_config,
)
from pipeline.tokenizer.tiktoken_bpe import NAMED_PATTERNS, TiktokenTokenizer


class TokenizerKind(StrEnum):
    """What a tokenizer spec names, and so what reads it."""

    GPT2 = "gpt2"
    """The gpt2 BPE provisioned at set-up, named (``gpt2`` or ``r50k_base``)."""
    HUGGINGFACE = "huggingface"
    """A Hugging Face ``tokenizer.json``."""
    TIKTOKEN = "tiktoken"
    """A tiktoken BPE file."""


#: Options a spec may carry after the path, and the kinds of tokenizer that read each.
SPEC_OPTIONS = {
    "eos": (TokenizerKind.HUGGINGFACE, TokenizerKind.TIKTOKEN),
    "eos_id": (TokenizerKind.TIKTOKEN,),
    "pattern": (TokenizerKind.TIKTOKEN,),
    "vocab_size": (TokenizerKind.TIKTOKEN,),
}
#: File names looked for inside a tokenizer folder, by kind.
HF_FILE_NAME = "tokenizer.json"
TIKTOKEN_FILE_NAME = "tokenizer.model"


def tokenizer_file_location(spec: str) -> str | None:
    """The file or folder ``spec`` names, as written (``~`` expanded), without opening it;
    None for a gpt2 name."""
    location = spec.split(";", 1)[0]
    return None if location in GPT2_NAMES else os.path.expanduser(location)


@dataclass(frozen=True)
class TokenizerSpec:
    """A parsed tokenizer spec: a gpt2 name, or a file with its kind and options."""

    path: Path | None
    """The tokenizer file (absolute); None for gpt2."""
    kind: TokenizerKind
    options: tuple[tuple[str, str], ...] = ()
    """The ``;KEY=VALUE`` options, in spec order."""

    def option(self, key: str) -> str | None:
        """The value of option ``key``, or None."""
        return dict(self.options).get(key)

    @classmethod
    def parse(cls, spec: str) -> TokenizerSpec:
        """Parse ``spec`` (module docstring). Raises ConfigError or TokenizerError."""
        location, *option_texts = spec.split(";")
        options: dict[str, str] = {}
        for text in option_texts:
            key, sep, value = text.partition("=")
            if not sep or key.strip() not in SPEC_OPTIONS:
                raise ConfigError(
                    f"tokenizer option {text!r} of {spec!r} is not KEY=VALUE with KEY one of "
                    f"{', '.join(SPEC_OPTIONS)}"
                )
            options[key.strip()] = value
        file_location = tokenizer_file_location(spec)
        if file_location is None:
            if options:
                raise ConfigError(f"{location} takes no options, got {spec!r}: write {location}")
            return cls(None, TokenizerKind.GPT2)
        path = Path(file_location).absolute()
        if not path.exists():
            if "/" not in location and "." not in location:
                raise ConfigError(
                    f"unknown tokenizer {location!r}: give one of {', '.join(GPT2_NAMES)}, or the path "
                    "of a tokenizer.json, a tiktoken BPE file or a folder holding one"
                )
            raise TokenizerError(
                f"no tokenizer file at {path}: copy the tokenizer there or fix data.tokenizer "
                "(nothing is downloaded at run time)"
            )
        path, kind = _tokenizer_file(path)
        for key in options:
            if kind not in SPEC_OPTIONS[key]:
                raise ConfigError(f"option {key!r} applies to tiktoken BPE files, not to {path}")
        return cls(path, kind, tuple(options.items()))

    def canonical(self) -> str:
        """The spec with an absolute path, so that runs started elsewhere find the file."""
        if self.path is None:
            return "gpt2"
        return ";".join([str(self.path), *(f"{k}={v}" for k, v in self.options)])


def _tokenizer_file(path: Path) -> tuple[Path, TokenizerKind]:
    """The tokenizer file at ``path`` (a file or a folder holding one) and its kind."""
    if path.is_dir():
        for name, kind in (
            (HF_FILE_NAME, TokenizerKind.HUGGINGFACE),
            (TIKTOKEN_FILE_NAME, TokenizerKind.TIKTOKEN),
        ):
            if (path / name).is_file():
                return path / name, kind
        raise TokenizerError(
            f"the folder {path} holds neither {HF_FILE_NAME} nor {TIKTOKEN_FILE_NAME}; "
            "name the tokenizer file itself"
        )
    if path.suffix == ".json":
        return path, TokenizerKind.HUGGINGFACE
    return path, TokenizerKind.TIKTOKEN


def _integer_option(spec: TokenizerSpec, key: str) -> int | None:
    value = spec.option(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as e:
        raise ConfigError(f"tokenizer option {key}={value!r} must be an integer") from e


def _tiktoken_specials(spec: TokenizerSpec) -> tuple[dict[str, int], int]:
    """Special tokens and the EOS id of a tiktoken file: options, else its tokenizer_config."""
    assert spec.path is not None
    config_path = spec.path.parent / TOKENIZER_CONFIG_FILE
    config = read_tokenizer_config(config_path)
    specials = {
        token["content"]: int(token_id)
        for token_id, token in (config.get("added_tokens_decoder") or {}).items()
    }
    eos_token = spec.option("eos") or eos_token_of(config)
    eos_id = _integer_option(spec, "eos_id")
    if eos_token is not None and eos_id is not None:
        specials[eos_token] = eos_id
    if eos_token is None or eos_token not in specials:
        raise ConfigError(
            f"the tiktoken BPE file {spec.path} names no EOS token with its id (no "
            f"{TOKENIZER_CONFIG_FILE} beside it says so); add ';eos=TOKEN;eos_id=N' to "
            "data.tokenizer (Llama 3: ';eos=<|end_of_text|>;eos_id=128001')"
        )
    return specials, specials[eos_token]


@functools.lru_cache(maxsize=16)
def _load_cached(spec: TokenizerSpec, modified_ns: int) -> Tokenizer:
    # modified_ns: a file replaced in place is read again; failures are not cached.
    del modified_ns
    if spec.kind is TokenizerKind.GPT2:
        return Gpt2Tokenizer(provisioned_gpt2_path())
    assert spec.path is not None
    if spec.kind is TokenizerKind.HUGGINGFACE:
        return HuggingFaceTokenizer(spec.path, eos=spec.option("eos"))
    pattern = spec.option("pattern")
    if pattern is None:
        raise ConfigError(
            f"a tiktoken BPE file does not carry its pre-tokenizer pattern: add ';pattern=NAME' "
            f"({', '.join(NAMED_PATTERNS)}) or ';pattern=REGEX' to data.tokenizer for {spec.path}"
        )
    specials, eos_id = _tiktoken_specials(spec)
    try:
        data = spec.path.read_bytes()
    except OSError as e:
        raise TokenizerError(f"cannot read the tokenizer file {spec.path}: {e}") from e
    return TiktokenTokenizer(
        data,
        spec.path,
        pattern=pattern,
        special_tokens=specials,
        eos_id=eos_id,
        vocab_size=_integer_option(spec, "vocab_size"),
    )


def load_tokenizer(spec: str = "gpt2") -> Tokenizer:
    """The tokenizer ``spec`` names (module docstring), read from local files only.

    Instances are cached per spec and file version (loading takes ~0.3 s).

    Raises:
        ConfigError: the spec is malformed, or names no EOS token (the message says what to set).
        TokenizerError: a file is missing, corrupt or not a tokenizer (the message says how to fix it).
    """
    parsed = TokenizerSpec.parse(spec)
    path = parsed.path if parsed.path is not None else provisioned_gpt2_path()
    try:
        modified_ns = path.stat().st_mtime_ns
    except FileNotFoundError:
        modified_ns = -1  # the loader raises the helpful error
    return _load_cached(parsed, modified_ns)


def canonical_tokenizer_spec(spec: str) -> str:
    """``spec`` with an absolute path (``gpt2`` for the gpt2 names), for run configs."""
    return TokenizerSpec.parse(spec).canonical()


def clear_tokenizer_cache() -> None:
    """Forget loaded tokenizers (after replacing files or changing ``ZEPHON_HOME``)."""
    _load_cached.cache_clear()
