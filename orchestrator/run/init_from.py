"""A user's checkpoint as a run's initial weights (``train.init_from``), checked at plan time.

The checkpoint is a TorchTitan DCP step folder or a Hugging Face safetensors folder; it is
loaded by TorchTitan itself (``checkpoint.initial_load_path``, ``initial_load_in_hf``).
Before anything launches, its tensors' shapes are read from its metadata (no weights) and
compared with the model's; its content digest is the run's initial-weights identity.

Design: docs/anneals.md
"""

from __future__ import annotations

import json
import struct
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import ExperimentConfig

DCP_METADATA = ".metadata"
OPTIMIZER_PREFIX = "optimizer."
EMBEDDING = {"titan": "tok_embeddings.weight", "hf": "model.embed_tokens.weight"}
STATES_NOT_RESTORED = ("dataloader", "lr_scheduler", "train_state")
"""TorchTitan states that ``train.init_optimizer`` leaves behind: the run keeps its own data
order, learning-rate schedule and step counter (the base run's would replace them)."""
_ADVICE = (
    "give a TorchTitan checkpoint step folder (<run>/titan/checkpoint/step-N) or a Hugging "
    "Face safetensors folder of the same model (model=... and its model.args)"
)


class CheckpointFormat(StrEnum):
    """How a checkpoint folder stores its tensors."""

    DCP = "dcp"
    """TorchTitan's Distributed Checkpoint: a ``.metadata`` file and ``*.distcp`` shards."""
    HF = "hf"
    """Hugging Face safetensors (``*.safetensors``), read through TorchTitan's state-dict
    adapter of the model."""


def checkpoint_format(path: Path) -> CheckpointFormat:
    """The format of the checkpoint folder ``path``; ``ExperimentError`` if it is neither."""
    if not path.is_dir():
        raise ExperimentError([f"train.init_from={path}: no such folder; {_ADVICE}"])
    if (path / DCP_METADATA).is_file():
        return CheckpointFormat.DCP
    if any(path.glob("*.safetensors")):
        return CheckpointFormat.HF
    raise ExperimentError(
        [
            f"train.init_from={path}: neither a DCP checkpoint ({DCP_METADATA}) nor *.safetensors "
            f"files; {_ADVICE}"
        ]
    )


def check_init_from(
    config: ExperimentConfig, parameter_shapes: dict[str, Any], vocab_size: int
) -> None:
    """Check that ``config.train.init_from`` can initialise the model whose parameter shapes
    are ``parameter_shapes`` (:attr:`orchestrator.run.recipe.Recipe.parameter_shapes`): every
    tensor the model needs, with its shape, and a vocabulary of at least ``vocab_size`` (the
    tokenizer's). Raises ``ExperimentError`` naming the first mismatched tensor."""
    t = config.train
    assert t.init_from is not None, "check_init_from needs train.init_from"
    path = Path(t.init_from)
    fmt = checkpoint_format(path)
    names = "hf" if fmt is CheckpointFormat.HF else "titan"
    expected = parameter_shapes.get(names)
    if expected is None:
        raise ExperimentError(
            [
                f"train.init_from={path} is a Hugging Face folder, but the model has no "
                "TorchTitan state-dict adapter to read it; convert it to a DCP checkpoint"
            ]
        )
    found = _dcp_shapes(path) if fmt is CheckpointFormat.DCP else _safetensors_shapes(path)
    problems = _shape_problems(
        path, found=found, expected=expected, embedding=EMBEDDING[names], vocab_size=vocab_size
    )
    if t.init_optimizer and fmt is CheckpointFormat.HF:
        problems.append(
            f"train.init_optimizer: {path} is a Hugging Face folder, which holds no optimizer "
            "state; set train.init_optimizer=false or give a DCP checkpoint"
        )
    elif t.init_optimizer and not any(k.startswith(OPTIMIZER_PREFIX) for k in found):
        problems.append(
            f"train.init_optimizer: {path} holds no optimizer state (a model-only "
            "checkpoint); set train.init_optimizer=false or give a full checkpoint step"
        )
    if problems:
        raise ExperimentError(problems)


def initial_load_flags(config: ExperimentConfig) -> list[str]:
    """TorchTitan's flags that load ``config.train.init_from`` as the initial weights, the
    path excepted (none without ``init_from``: the recipe's own seed checkpoint is DCP)."""
    t = config.train
    if t.init_from is None:
        return []
    if checkpoint_format(Path(t.init_from)) is CheckpointFormat.HF:
        return ["--checkpoint.initial-load-in-hf"]
    if t.init_optimizer:
        return [
            "--checkpoint.no-initial-load-model-only",
            "--checkpoint.exclude-from-loading",
            ",".join(STATES_NOT_RESTORED),
        ]
    return []


def _shape_problems(
    path: Path,
    *,
    found: dict[str, list[int]],
    expected: dict[str, list[int]],
    embedding: str,
    vocab_size: int,
) -> list[str]:
    """The first missing or mismatched tensor, said so that the user knows what to change."""
    rows = found.get(embedding, [0])[0]
    if embedding in found and rows < vocab_size:
        return [
            f"train.init_from={path}: its vocabulary has {rows} rows ({embedding} "
            f"{found[embedding]}), fewer than the tokenizer's {vocab_size} tokens; use the "
            "tokenizer the checkpoint was trained with (data.tokenizer)"
        ]
    for name, shape in sorted(expected.items()):
        if name not in found:
            return [
                f"train.init_from={path}: no tensor {name} (shape {shape}), which the model "
                f"needs; {_ADVICE}"
            ]
        if list(found[name]) != list(shape):
            return [
                f"train.init_from={path}: tensor {name} has shape {list(found[name])} but the "
                f"model needs {list(shape)}; {_ADVICE}"
            ]
    return []


def _dcp_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor shapes of a DCP checkpoint, from its ``.metadata`` (no tensor is read)."""
    import torch.distributed.checkpoint as dcp  # torch: only plans with init_from pay it

    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as e:  # a damaged pickle raises anything
        raise ExperimentError(
            [
                f"train.init_from={path}: cannot read {DCP_METADATA} ({type(e).__name__}: {e}); "
                f"{_ADVICE}"
            ]
        ) from e
    return {
        name: list(entry.size)
        for name, entry in metadata.state_dict_metadata.items()
        if hasattr(entry, "size")
    }


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor shapes of every ``*.safetensors`` file of ``path``, from their JSON headers."""
    shapes: dict[str, list[int]] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with open(file, "rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(length))
        except (OSError, struct.error, ValueError) as e:
            raise ExperimentError(
                [f"train.init_from={path}: {file.name} is not a safetensors file ({e}); {_ADVICE}"]
            ) from e
        shapes.update(
            {name: entry["shape"] for name, entry in header.items() if name != "__metadata__"}
        )
    return shapes
