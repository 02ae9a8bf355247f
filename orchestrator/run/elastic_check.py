"""``verify_elastic``: train on one dp size, resume on another, check every global batch digest.

The check behind ``zephon verify-elastic`` and the service's ``verify`` jobs: a reference
run trained uninterrupted, and a run checkpointed at the split step and resumed on another
dp size; the data guarantee holds when their digests agree at every step.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import ExperimentError, LaunchError
from orchestrator.experiment import (
    DeviceKind,
    ExperimentConfig,
    Launcher,
    ResourcesSection,
    load_experiment,
    split_step_problems,
)
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import discover
from orchestrator.run.api import resume, run


def verify_elastic(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    first_dp: int,
    second_dp: int,
    split_step: int | None = None,
    overrides: list[str] | None = None,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Train to ``split_step`` on ``first_dp`` ranks and to the end uninterrupted on
    ``first_dp``; resume the first on ``second_dp``; report whether every digest matches.

    The two first runs are independent: where the free devices hold both, they train side by
    side, each on half of them (CPU: half the cores; CUDA: half the GPUs).
    """
    base = load_experiment(config, overrides)
    steps = base.train.steps
    problems = split_step_problems(steps, split_step)
    if problems:
        raise ExperimentError(problems)
    split = steps // 2 if split_step is None else split_step
    base = replace(
        base,
        train=replace(base.train, checkpoint_interval=split, keep_checkpoints=0),
        eval=replace(base.eval, enable=False),
    )
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    short = replace(base, train=replace(base.train, steps=split))
    jobs = {"ref": base, "split": short}
    halves = side_by_side_halves(base.resources, first_dp)
    if halves is not None:  # room for both at once, and they are independent
        jobs = {n: replace(c, resources=h) for (n, c), h in zip(jobs.items(), halves, strict=True)}
    with ThreadPoolExecutor(1 if halves is None else 2) as pool:
        futures = {
            n: pool.submit(
                run,
                c,
                dp=first_dp,
                run_name=f"{base.name}-verify-{stamp}-{n}",
                progress=progress,
                tracking=False,
                fresh=True,  # a check trains; an earlier run's answer would check nothing
            )
            for n, c in jobs.items()
        }
        reference, first = futures["ref"].result(), futures["split"].result()
    if first.status != RunStatus.SUCCEEDED or reference.status != RunStatus.SUCCEEDED:
        raise LaunchError("\n".join(reference.messages + first.messages))
    # like=short: on the resources of the experiment, not of the half it trained on
    resumed = resume(Path(first.folder), dp=second_dp, progress=progress, steps=steps, like=short)
    want = RunFolder(reference.folder).digests()
    got = RunFolder(resumed.folder).digests()
    mismatched = sorted(s for s in want if got.get(s) != want[s])
    return {
        "ok": not mismatched and resumed.status == RunStatus.SUCCEEDED,
        "first_dp": first_dp,
        "second_dp": second_dp,
        "split_step": split,
        "steps": steps,
        "matched_steps": len(want) - len(mismatched),
        "first_mismatch": mismatched[0] if mismatched else None,
        "reference_folder": reference.folder,
        "resumed_folder": resumed.folder,
        "messages": resumed.messages,
    }


def side_by_side_halves(
    r: ResourcesSection, dp: int
) -> tuple[ResourcesSection, ResourcesSection] | None:
    """``r`` split into two halves of this node's free devices that each hold ``dp``
    processes (CPU: cores, CUDA: GPUs); None where the devices do not hold two."""
    if r.nodes != 1 or r.launcher != Launcher.LOCAL:
        return None
    devices = discover(r.device, r.gpu_ids)
    if devices.kind == DeviceKind.CUDA:
        ids = list(devices.gpu_ids)
        if len(ids) < 2 * dp:
            return None
        return replace(r, gpu_ids=ids[:dp]), replace(r, gpu_ids=ids[dp : 2 * dp])
    cores = r.max_procs or devices.count
    if cores < 2 * dp:
        return None
    return replace(r, max_procs=cores // 2), replace(r, max_procs=cores // 2)
