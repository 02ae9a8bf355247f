"""Before a segment trains: the newest checkpoint checked against its manifest, and a damaged
one moved out of TorchTitan's sight, so the run resumes from the newest whole one.

A checkpoint torn by a kill (no ``.metadata``) is passed over by TorchTitan itself; one
whose files changed after it was written (:mod:`orchestrator.experiment.checkpoint_manifest`)
is not, and would fail the load or load wrong weights. Nothing is deleted: the damaged
folder goes to ``titan/damaged-checkpoints/``, where its bytes stay to be looked at.
"""

from __future__ import annotations

import os

from orchestrator.experiment.checkpoint_manifest import damage
from orchestrator.experiment.runfolder import RunFolder

DAMAGED_DIR = "damaged-checkpoints"
"""Where, in TorchTitan's dump folder, damaged checkpoints are moved."""


def set_aside_damaged(folder: RunFolder) -> list[str]:
    """Move ``folder``'s newest complete checkpoints that fail their manifest aside, newest
    first, until one is whole; a line for each, and one naming the step training resumes
    from ([] when the newest is whole)."""
    lines = []
    while (step := folder.last_checkpoint_step()) is not None:
        checkpoint = folder.checkpoint_dir / f"step-{step}"
        problem = damage(checkpoint)
        if problem is None:
            break
        target = folder.titan_dir / DAMAGED_DIR / checkpoint.name
        for n in range(1, 1000):  # a step damaged again after an earlier resume
            if not target.exists():
                break
            target = target.with_name(f"{checkpoint.name}.{n}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(checkpoint, target)
        lines.append(
            f"{folder.name}: checkpoint step-{step} is damaged ({problem}); moved to {target}"
        )
    if lines:
        step = folder.last_checkpoint_step()
        lines.append(
            f"{folder.name}: resuming from checkpoint step-{step}"
            if step is not None
            else f"{folder.name}: no whole checkpoint is left; training starts again at step 1"
        )
    return lines
