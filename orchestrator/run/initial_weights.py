"""A run's initial weights: one seed checkpoint per recipe, or the user's own checkpoint.

TorchTitan initialises a sharded model differently on each dp size on CPU, so every run
loads the seed checkpoint of its ``init_key`` instead, made once per machine under a file
lock in ``$ZEPHON_HOME/init/<init_key>/``; its ``sha256`` goes into the run's records. A
run with ``train.init_from`` loads that checkpoint instead (an anneal), identified the same
way: by the digest of its files (:func:`checkpoint_digest`, cached by their stat). Such a
checkpoint is a TorchTitan DCP step folder or a Hugging Face safetensors folder, loaded by
TorchTitan itself (:func:`initial_load_flags`); before anything launches, its tensors'
shapes are read from its metadata (no weights) and compared with the model's
(:func:`check_init_from`). A resumed run needs its initial weights only while it has no
checkpoint of its own (:func:`resumed_init`).

Design: docs/design/orchestrator_run.md, docs/anneals.md
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError, LaunchError
from orchestrator.experiment import DeviceKind, ExperimentConfig, write_data_spec
from orchestrator.experiment.run_record import InitCheckpoint
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices
from orchestrator.run import interrupts
from orchestrator.run.launch import Launch, launch_env, run_local, train_command
from orchestrator.run.recipe import Recipe, recipe_flags
from orchestrator.tracking.mirrored_run import MirroredRun
from pipeline.filelock import file_lock
from pipeline.paths import zephon_home

RECORD = "init.json"
CREATE_TIMEOUT_S = 900
RACY_NS = 2_000_000_000
"""A file modified this recently may change again without its (size, mtime) changing."""


def init_checkpoint_path(config: ExperimentConfig, recipe: Recipe) -> Path:
    """Where the initial checkpoint of ``config`` is: ``train.init_from``, or the one made
    for ``recipe`` on this machine (it may not exist yet)."""
    if config.train.init_from is not None:
        return Path(config.train.init_from)
    return zephon_home() / "init" / recipe.init_key / "step-0"


def ensure_init_checkpoint(config: ExperimentConfig, recipe: Recipe) -> InitCheckpoint:
    """The initial checkpoint of ``config``: ``train.init_from`` with its digest, or the one
    of ``recipe``, made now (one TorchTitan process on CPU, data of ``config``) unless this
    machine has it. Raises LaunchError if making it fails."""
    if config.train.init_from is not None:
        path = Path(config.train.init_from)
        return InitCheckpoint.of(recipe.init_key, str(path), checkpoint_digest(path))
    home = init_checkpoint_path(config, recipe).parent
    found = _read_init_record(home)
    if found is not None:
        return found
    with file_lock(home.parent / f"{recipe.init_key}.lock"):
        found = _read_init_record(home)  # made by another job while this one waited
        if found is not None:
            return found
        home.parent.mkdir(parents=True, exist_ok=True)
        print(
            f"[zephon] making the initial checkpoint of init key {recipe.init_key[:12]} "
            "(once on this machine; every run of the recipe starts from it)",
            file=sys.stderr,
        )
        build = Path(tempfile.mkdtemp(prefix=f"{recipe.init_key[:12]}-build-", dir=home.parent))
        try:
            checkpoint = _create_seed_checkpoint(config, build)
            home.mkdir(exist_ok=True)
            target = home / "step-0"
            shutil.rmtree(target, ignore_errors=True)  # a half-moved one from a killed job
            shutil.move(str(checkpoint), target)
            made = InitCheckpoint.of(recipe.init_key, str(target), checkpoint_digest(target))
            record = {**made.to_dict(), "init": recipe.init}
            (home / f"{RECORD}.tmp").write_text(json.dumps(record, indent=1, sort_keys=True))
            (home / f"{RECORD}.tmp").replace(home / RECORD)  # last: its presence means done
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return made


def resumed_init(
    run: MirroredRun, config: ExperimentConfig, recipe: Recipe
) -> InitCheckpoint | None:
    """The initial checkpoint a resumed run needs: none once it has its own checkpoint (or
    when it was recorded without one); else the recorded one, made again if it is gone."""
    init = run.experiment.recorded_init
    if init is None or run.folder.last_checkpoint_step() is not None:
        return None
    if Path(init.path).is_dir():
        return init
    made = ensure_init_checkpoint(config, recipe)
    if made.sha256 != init.sha256:
        raise ExperimentError(
            [
                f"{run.folder.path} started from initial checkpoint {init.sha256[:12]}, which is "
                f"gone; this machine makes {made.sha256[:12]} for its recipe (another torch or "
                "TorchTitan version?). Start the run again instead of resuming it"
            ]
        )
    return made


def _read_init_record(home: Path) -> InitCheckpoint | None:
    try:
        record = json.loads((home / RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return InitCheckpoint.of(record["init_key"], record["path"], record["sha256"])


def _create_seed_checkpoint(config: ExperimentConfig, build: Path) -> Path:
    """TorchTitan's seed checkpoint of ``config``'s recipe, made in ``build``; its folder."""
    folder = RunFolder(build)
    write_data_spec(folder.data_spec_path, config.data)  # the trainer builds its data loader
    args = [
        *recipe_flags(config),
        *("--dump-folder", str(folder.titan_dir.absolute())),
        *("--dataloader.spec", str(folder.data_spec_path.absolute())),
        *("--checkpoint.enable", "--checkpoint.create-seed-checkpoint"),
        "--checkpoint.last-save-model-only",
    ]
    cpu = Devices(DeviceKind.CPU, 1, "cpu")
    launch = Launch(
        [train_command(1, args)],
        launch_env(folder, cpu, 1, config.resources.max_procs),
        folder,
        timeout_s=CREATE_TIMEOUT_S,
    )
    code = run_local(launch)
    if code < 0:
        raise interrupts.Interrupted()
    checkpoint = folder.checkpoint_dir / "step-0"
    if code != 0 or not checkpoint.is_dir():
        raise LaunchError(
            f"making the initial checkpoint failed (exit {code}); {folder.log_path}:\n"
            f"{folder.log_tail()}"
        )
    return checkpoint


def checkpoint_digest(folder: Path) -> str:
    """sha256 over every file of ``folder``: relative path, then content, in path order. The
    answer is remembered with every file's (size, mtime, inode), so a second plan of a
    checkpoint of gigabytes stats it instead of reading it; a file modified in the last two
    seconds could change again unseen, so such an answer is not remembered."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    stats = [[str(p.relative_to(folder)), *_file_version(p)] for p in files]
    entry = zephon_home() / "cache" / "checkpoint_digests" / f"{_path_key(folder)}.json"
    try:
        remembered = json.loads(entry.read_text())
        if remembered["files"] == stats:
            return remembered["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or damaged: hash again
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    sha256 = digest.hexdigest()
    newest = max((version[1] for _, *version in stats), default=0)
    if time.time_ns() - newest > RACY_NS:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"folder": str(folder), "files": stats, "sha256": sha256}))
        os.replace(partial, entry)
    return sha256


def _file_version(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _path_key(folder: Path) -> str:
    return hashlib.sha256(str(folder.absolute()).encode()).hexdigest()


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
