"""Device discovery: what is free, decided without importing torch where no GPU can exist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from orchestrator.machine import devices
from tests.support import REPO


def test_without_visible_gpus_discovery_gives_the_cores_and_never_imports_torch() -> None:
    probe = (
        "import sys; from orchestrator.machine.devices import discover, usable_cores; d = discover();"
        "print(d.kind, d.count == usable_cores(), 'torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["cpu", "True", "False"], out.stderr


@pytest.mark.parametrize(
    ("visible", "nodes", "platform", "expected"),
    [
        ("", ("/dev/nvidia0",), "linux", False),  # hidden on purpose
        ("-1", ("/dev/nvidia0",), "linux", False),
        (None, (), "linux", False),  # no driver: no GPU
        (None, ("/dev/nvidiactl",), "linux", True),
        (None, ("/dev/kfd",), "linux", True),  # ROCm
        ("0,1", ("/dev/nvidia0",), "linux", True),
        (None, (), "darwin", False),
        (None, (), "win32", True),  # no device files to look at: ask torch
    ],
)
def test_torch_is_asked_only_where_agpu_may_be_visible(
    monkeypatch: pytest.MonkeyPatch,
    visible: str | None,
    nodes: tuple[str, ...],
    platform: str,
    expected: bool,
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(devices.os.path, "exists", lambda path: path in nodes)
    monkeypatch.setattr(devices.sys, "platform", platform)
    assert devices.gpu_may_be_visible() is expected


def test_inside_a_slurm_job_the_cores_are_the_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda _: set(range(8)), raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "2")
    assert devices.usable_cores() == 8  # a leftover variable outside a job counts for nothing
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert devices.usable_cores() == 2
