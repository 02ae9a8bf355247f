"""The learning rate a base run had at its checkpoint's step: an anneal's peak
(``train.lr_from_init``), as Marin's anneals rescale theirs.

The base run's recorded recipe holds its peak learning rate, its schedule and its steps;
TorchTitan's own scheduler (``LRSchedulersContainer.Config``) gives the factor at the step.

Design: docs/anneals.md
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import ExperimentError
from orchestrator.experiment.runfolder import RunFolder

STEP_FOLDER = re.compile(r"step-(\d+)")
SCHEDULE_FIELDS = ("warmup_steps", "decay_ratio", "decay_type", "min_lr_factor", "total_steps")
"""TorchTitan's ``lr_scheduler`` fields that shape the schedule."""


def base_learning_rate(checkpoint: Path) -> float:
    """The learning rate of the Zephon run that saved ``checkpoint`` (``<run>/titan/
    checkpoint/step-N``) for its step N + 1, the first step it would have trained next.
    Raises ``ExperimentError`` if ``checkpoint`` is not such a folder."""
    step = STEP_FOLDER.fullmatch(checkpoint.name)
    folder = RunFolder(checkpoint.parents[2]) if len(checkpoint.parents) > 2 else None
    try:
        recipe = folder.experiment().recipe if folder is not None and step else None
    except (OSError, ValueError):
        recipe = None
    if recipe is None:
        raise ExperimentError(
            [
                f"train.lr_from_init: {checkpoint} is not a step folder of a Zephon run "
                "(<run>/titan/checkpoint/step-N beside <run>/experiment.json), so its "
                "schedule is unknown; set train.lr instead"
            ]
        )
    # torch and TorchTitan: only plans of such anneals pay their import (~2 s), not every CLI.
    import torch
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

    schedule = {k: v for k, v in recipe["lr_scheduler"].items() if k in SCHEDULE_FIELDS}
    peak = float(recipe["optimizer"]["param_groups"][0]["optimizer_kwargs"]["lr"])
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    schedulers = LRSchedulersContainer.Config(**schedule).build(
        optimizers=[probe], training_steps=int(recipe["training"]["steps"])
    )
    # TorchTitan's step s trains with the factor at s - 1: step N + 1 with the factor at N.
    return peak * schedulers.schedulers[0].lr_lambdas[0](int(step.group(1)))
