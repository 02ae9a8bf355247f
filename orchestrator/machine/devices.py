"""Which devices are free now, and the dp size a run gets on them.

CUDA: every visible GPU whose memory is less than ``BUSY_MEMORY_FRACTION`` used
(``torch.cuda.mem_get_info``; another job's allocation shows up there) counts
as free; torch is not even imported where no GPU can be visible (no GPU device
files on Linux, ``CUDA_VISIBLE_DEVICES=""``). CPU: one process per usable core
(``os.sched_getaffinity``, within a Slurm job its cores on this node). The dp size of a run is the one requested, if the
devices allow it, else the largest divisor of the lane count that fits: data is
identical on every dp size, so the choice only changes speed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    DeviceKind,
    DeviceRequest,
    ExperimentConfig,
    dp_problems,
    dp_sizes,
)

BUSY_MEMORY_FRACTION = 0.10


@dataclass(frozen=True)
class Devices:
    """Free devices of one kind on this machine."""

    kind: DeviceKind
    count: int
    """Free GPUs, or usable cores."""
    name: str
    """GPU model, or ``cpu``."""
    gpu_ids: tuple[int, ...] = ()
    """Indexes of the free GPUs (for ``CUDA_VISIBLE_DEVICES``)."""

    @property
    def label(self) -> str:
        return "cpu" if self.kind == DeviceKind.CPU else f"cuda:{self.name}"


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, within a Slurm job no more than the
    job's cores on this node (``SLURM_CPUS_ON_NODE``; Slurm without a task plugin that
    binds CPUs leaves the affinity at every core)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    allocated = os.environ.get("SLURM_CPUS_ON_NODE") if os.environ.get("SLURM_JOB_ID") else None
    return min(cores, int(allocated)) if allocated else cores


def discover(device: str = DeviceRequest.AUTO, gpu_ids: list[int] | None = None) -> Devices:
    """Free devices now: CUDA GPUs if ``device`` allows and any is free, else CPU cores.

    ``gpu_ids`` restricts the GPUs to those indexes (a scheduler's lease).
    """
    if device in (DeviceRequest.AUTO, DeviceRequest.CUDA):
        gpus = [i for i in _free_gpus() if gpu_ids is None or i in gpu_ids]
        if gpus:
            import torch

            return Devices(
                DeviceKind.CUDA, len(gpus), torch.cuda.get_device_name(gpus[0]), tuple(gpus)
            )
        if device == DeviceRequest.CUDA:
            raise ExperimentError(
                ["resources.device=cuda but no free CUDA GPU is visible; use device=auto or cpu"]
            )
    return Devices(DeviceKind.CPU, usable_cores(), "cpu")


def _free_gpus() -> list[int]:
    if not gpu_may_be_visible():
        return []  # known without importing torch (3 s of a CLI's start on 2 cores)
    import torch

    if not torch.cuda.is_available():
        return []
    free = []
    for i in range(torch.cuda.device_count()):
        available, total = torch.cuda.mem_get_info(i)
        if (total - available) / total < BUSY_MEMORY_FRACTION:
            free.append(i)
    return free


def choose_dp(config: ExperimentConfig, devices: Devices, requested: int | None = None) -> int:
    """The dp size for ``config`` on ``devices`` (module docstring); ExperimentError if none fits."""
    r = config.resources
    per_node = devices.count if devices.kind == DeviceKind.CUDA else (r.max_procs or devices.count)
    capacity = per_node * max(1, r.nodes)
    requested = r.dp if requested is None else requested
    if requested is not None:
        problems = dp_problems(config, requested)
        over = requested > capacity and not (devices.kind == DeviceKind.CPU and r.oversubscribe)
        if over:
            problems.append(
                f"dp={requested} needs {requested} {devices.kind} devices but {capacity} are free; "
                "pick a smaller dp"
                + (" or set resources.oversubscribe=true" if devices.kind == DeviceKind.CPU else "")
            )
        if problems:
            raise ExperimentError(problems)
        return requested
    fitting = [k for k in dp_sizes(config) if k <= capacity]
    if not fitting:
        raise ExperimentError(
            [
                f"no dp size fits: lanes={config.data.lanes}, resources.nodes={max(1, r.nodes)}, "
                f"{capacity} free {devices.kind} devices; every dp size divides the lanes and "
                "splits into the nodes"
            ]
        )
    return max(fitting)


GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")
"""Device files of an NVIDIA driver (``nvidiactl``, ``nvidia0``) or of ROCm (``kfd``): on
Linux, torch can see a GPU only where one of them exists (containers included)."""


def gpu_may_be_visible() -> bool:
    """False where no CUDA/ROCm GPU can be visible to torch: ``CUDA_VISIBLE_DEVICES`` empty
    or ``-1``, Linux without GPU device files, or macOS; True elsewhere (ask torch)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    if sys.platform == "darwin":
        return False
    if sys.platform.startswith("linux"):
        return any(os.path.exists(node) for node in GPU_DEVICE_NODES)
    return True
