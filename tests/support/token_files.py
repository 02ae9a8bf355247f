"""Pre-tokenized files for tests, written by the real writers' layouts: Megatron indexed
datasets by megatron-core's ``IndexedDatasetBuilder`` itself (a dev dependency), OLMo-core
token files with numpy exactly as OLMo-core's data-loading guide writes them (``ai2-olmo-core``
cannot be installed beside the project's pins: it needs older ``filelock`` and ``rich``)."""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.tokenizer import load_tokenizer

TEXTS = [
    f"Document {i}: " + " ".join(f"word{(i * 7 + j) % 31}" for j in range(5 + (i * 13) % 40))
    for i in range(120)
]
"""The documents of the pre-tokenized fixtures, as text (gpt2 is their tokenizer)."""


def gpt2_documents(texts: Sequence[str] = TEXTS) -> list[list[int]]:
    """``texts`` tokenized with gpt2, the fixtures' tokenizer."""
    return load_tokenizer("gpt2").encode_batch(list(texts))


def write_megatron(
    prefix: Path,
    documents: Sequence[Sequence[int]],
    *,
    dtype: type[np.number] = np.uint16,
    eos_id: int | None = None,
    sequences: int = 1,
) -> Path:
    """``prefix.bin`` and ``prefix.idx`` written by ``IndexedDatasetBuilder``, each document
    as ``sequences`` items (sentences) then ``end_document`` (followed by ``eos_id`` where
    given, as ``--append-eod`` does); returns the ``.bin``."""
    import torch

    builder = _indexed_dataset().IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in documents:
        ids = [*doc, eos_id] if eos_id is not None else list(doc)
        cuts = np.array_split(np.asarray(ids, dtype=np.int64), sequences)
        for part in cuts:
            builder.add_item(torch.from_numpy(part))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return Path(f"{prefix}.bin")


def write_token_array(
    path: Path, documents: Sequence[Sequence[int]], *, eos_id: int, dtype: type = np.uint16
) -> Path:
    """An OLMo-core token file: every document's ids followed by EOS, in one raw memmap."""
    ids = [t for doc in documents for t in [*doc, eos_id]]
    data = np.memmap(path, mode="w+", dtype=dtype, shape=(len(ids),))
    data[:] = ids
    data.flush()
    del data
    return path


@functools.cache
def _indexed_dataset() -> Any:
    """megatron-core's ``indexed_dataset`` module, loaded without ``megatron.core``'s
    ``__init__``: that imports the whole library (6 s) and wandb, whose import leaves
    folders in the temporary directory. The module needs only ``log_single_rank`` of
    ``megatron.core.utils`` (a log call); its writer runs as shipped. ``sys.modules`` is left
    as it was."""
    import megatron  # a namespace package: runs nothing

    root = Path(megatron.__path__[0]) / "core"
    before = {k: v for k, v in sys.modules.items() if k.startswith("megatron.")}
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = lambda logger, *args, **kwargs: logger.log(*args, **kwargs)  # type: ignore[attr-defined]
    sys.modules["megatron.core.utils"] = utils
    for name, folder in (("megatron.core", root), ("megatron.core.datasets", root / "datasets")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    try:
        return importlib.import_module("megatron.core.datasets.indexed_dataset")
    finally:
        for name in [k for k in sys.modules if k.startswith("megatron.")]:
            del sys.modules[name]
        sys.modules.update(before)
