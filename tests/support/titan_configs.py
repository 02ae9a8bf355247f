"""TorchTitan configs of the titan tests (``--module tests.support.titan_configs --config stock_mini``).

``zephon_mini_deep`` is ``zephon_mini`` with 3 layers instead of 2: another model size,
everything else equal (the guard must tell them apart).

``stock_mini`` is ``orchestrator.titan.configs.zephon_mini`` (same model, optimizer,
schedule, tokenizer, seed) with TorchTitan's stock HuggingFace text loader instead of
the lane pipeline, reading a local JSON dataset through TorchTitan's own ``c4_test``
entry (``load_dataset(<--dataloader.dataset-path>, split="train")``; no network). The
loader is TorchTitan's, unchanged: :class:`RecordingTextDataLoader` only writes down
what it yields, so the tests can see which data each step got.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

import orchestrator.titan  # noqa: F401  (cpu_compat must prepare TorchTitan before its import)

# isort: split
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.trainer import Trainer

from orchestrator.titan.configs import zephon_mini
from orchestrator.titan.trainer import ZephonTrainer


class RecordingTextDataLoader(HuggingFaceTextDataLoader):
    """The stock loader; each rank also appends the sha256 of every batch it yields to
    ``<record_dir>/batches.dp<rank>.jsonl``."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTextDataLoader.Config):
        record_dir: str = "."
        """Folder of the per-rank batch records."""

    def __init__(self, config: Config, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.record = Path(config.record_dir) / f"batches.dp{self.dp_rank}.jsonl"

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for inputs, labels in super().__iter__():
            digest = hashlib.sha256(inputs["input"].numpy().tobytes()).hexdigest()
            with self.record.open("a") as f:
                f.write(json.dumps({"batch": digest}) + "\n")
            yield inputs, labels


def stock_mini() -> Trainer.Config:
    """``zephon_mini`` on TorchTitan's stock loader; set ``--dataloader.dataset-path``."""
    zephon = zephon_mini()
    settings = {f.name: getattr(zephon, f.name) for f in fields(Trainer.Config) if f.init}
    settings["dataloader"] = RecordingTextDataLoader.Config(dataset="c4_test")
    settings["training"].global_batch_size = -1  # TorchTitan's default: local batch x dp
    return Trainer.Config(**settings)


def zephon_mini_deep() -> ZephonTrainer.Config:
    """``zephon_mini`` with 3 layers (module docstring)."""
    return zephon_mini(n_layers=3)


def zephon_mini_gpt2_vocab() -> ZephonTrainer.Config:
    """``zephon_mini`` whose vocabulary stays gpt2's (50,257 ids) whatever the tokenizer."""
    config = zephon_mini()
    config.vocab_follows_tokenizer = False
    return config
