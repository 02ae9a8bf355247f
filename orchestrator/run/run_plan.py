"""A run's plan as plain data: the resolved experiment, its recipe (:mod:`.recipe`), its
initial checkpoint and where it trains.

Only data lives here; what makes it (:mod:`.planner`, :mod:`.initial_weights`) and what
turns it into a command, a launch or a Slurm job (:mod:`.trainer_command`, :mod:`.launch`,
:mod:`.slurm`) import it from above.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.experiment import ExperimentConfig, Fingerprints, Launcher, phase_outline
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices
from orchestrator.run.recipe import Recipe


def is_follower_node(config: ExperimentConfig) -> bool:
    """Whether ``config`` trains node k > 0 of a multi-node run here (node 0 keeps the records)."""
    r = config.resources
    return r.launcher == Launcher.MULTINODE and r.node_rank > 0


@dataclass(frozen=True)
class RunPlan:
    """A resolved, validated experiment and where and how it trains
    (:func:`orchestrator.run.planner.plan` makes it; every launch of the run takes it)."""

    config: ExperimentConfig
    """The experiment: paths absolute, ``train.precision`` resolved for this machine."""
    folder: RunFolder
    dp: int
    devices: Devices
    fingerprints: Fingerprints
    """The data contract, the mixture, and their fingerprints (the run's variant)."""
    recipe: Recipe
    init_path: Path | None
    """The initial checkpoint the launch loads; None once the run folder has its own."""

    @property
    def run_name(self) -> str:
        return self.folder.name

    @property
    def contract(self) -> dict[str, Any]:
        return self.fingerprints.contract

    @property
    def mixture(self) -> dict[str, str]:
        return self.fingerprints.mixture

    @property
    def contract_fingerprint(self) -> str:
        return self.fingerprints.contract_fingerprint

    @property
    def variant(self) -> str:
        return self.fingerprints.variant

    @property
    def is_follower(self) -> bool:
        """Whether this machine is node k > 0 of a multi-node run (node 0 keeps the records)."""
        return is_follower_node(self.config)

    def to_dict(self) -> dict[str, Any]:
        """What ``zephon plan`` prints, but the command
        (:func:`orchestrator.run.planner.plan_summary` adds it)."""
        d, t = self.config.data, self.config.train
        lanes_per_rank = d.lanes // self.dp
        tokens_per_step = d.global_batch_size * d.seq_len
        return {
            "run_name": self.run_name,
            "run_folder": str(self.folder.path.absolute()),
            "device": self.devices.label,
            "free_devices": self.devices.count,
            "dp_size": self.dp,
            "lanes": d.lanes,
            "lanes_per_rank": {
                r: [r * lanes_per_rank + i for i in range(lanes_per_rank)] for r in range(self.dp)
            },
            "steps": t.steps,
            "tokens_per_step": tokens_per_step,
            "tokens": tokens_per_step * t.steps,
            "micro_batches_per_step": d.global_batch_size // (self.dp * t.microbatch_size),
            "precision": t.precision,
            "mixture": self.mixture,
            **({"phases": [o.to_dict() for o in phase_outline(d, t.steps)]} if d.phases else {}),
            "contract": self.contract,
            "contract_fingerprint": self.contract_fingerprint,
            "variant": self.variant,
            **({"varied": self.fingerprints.varied} if self.fingerprints.varied else {}),
            **self.recipe.to_dict(),
            "init_checkpoint": None if self.init_path is None else str(self.init_path),
            "config": self.config.to_dict(),
        }
