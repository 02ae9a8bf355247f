"""One initial checkpoint per recipe: every run of a recipe starts from the same weights.

TorchTitan initialises a sharded model differently on each dp size on CPU, so every run
loads the seed checkpoint of its ``init_key`` instead, made once per machine under a file
lock in ``$ZEPHON_HOME/init/<init_key>/``; its ``sha256`` goes into the run's records.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.errors import LaunchError
from orchestrator.experiment import ExperimentConfig, write_data_spec
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts
from orchestrator.run.devices import Devices
from orchestrator.run.launch import Launch, launch_env, run_local, train_command
from orchestrator.run.recipe import Recipe, recipe_flags
from pipeline.filelock import file_lock
from pipeline.paths import zephon_home

RECORD = "init.json"
CREATE_TIMEOUT_S = 900


@dataclass(frozen=True)
class InitCheckpoint:
    """Where a recipe's initial weights are, and their content hash."""

    init_key: str
    path: str
    """Absolute path of the DCP checkpoint folder (``--checkpoint.initial-load-path``)."""
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def init_checkpoint_path(recipe: Recipe) -> Path:
    """Where the initial checkpoint of ``recipe`` is (or will be) on this machine."""
    return zephon_home() / "init" / recipe.init_key / "step-0"


def ensure_init_checkpoint(config: ExperimentConfig, recipe: Recipe) -> InitCheckpoint:
    """The initial checkpoint of ``recipe``, made now (one TorchTitan process on CPU, data
    of ``config``) unless this machine has it. Raises LaunchError if making it fails."""
    home = init_checkpoint_path(recipe).parent
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
            made = InitCheckpoint(recipe.init_key, str(target), _hash_checkpoint_files(target))
            record = {**made.to_dict(), "init": recipe.init}
            (home / f"{RECORD}.tmp").write_text(json.dumps(record, indent=1, sort_keys=True))
            (home / f"{RECORD}.tmp").replace(home / RECORD)  # last: its presence means done
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return made


def _read_init_record(home: Path) -> InitCheckpoint | None:
    try:
        record = json.loads((home / RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return InitCheckpoint(record["init_key"], record["path"], record["sha256"])


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
    cpu = Devices("cpu", 1, "cpu")
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


def _hash_checkpoint_files(folder: Path) -> str:
    """sha256 over every file of ``folder``: relative path, then content, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()
