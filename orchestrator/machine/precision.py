"""The precision a run trains in: TorchTitan's ``training.mixed_precision_param``.

``train.precision: auto`` is bfloat16 on CUDA and on CPUs where a bfloat16 matmul is
measured no slower than a float32 one, float32 on the others; the measurement is cached
per CPU model and torch version in ``$ZEPHON_HOME/precision.json``. Runs in different
precisions are not replicates of each other.

Design: docs/design/orchestrator_run.md (precision)
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from orchestrator.experiment.setting_enums import DeviceKind, Precision, choice_problem
from pipeline.filelock import file_lock
from pipeline.paths import zephon_home

SHAPE = (256, 256, 1024)
"""(m, k, n) of the measured matmul: the size of the debug model's layers."""
REPEATS = 3
CACHE_FILE = "precision.json"


def resolve_precision(requested: str, device_kind: str) -> Precision:
    """``float32`` or ``bfloat16`` for ``requested`` on ``device_kind`` (the rule:
    docs/design/orchestrator_run.md)."""
    problem = choice_problem("train.precision", requested, Precision)
    if problem:
        raise ValueError(problem[0])
    if requested != Precision.AUTO:
        return Precision(requested)
    if device_kind == DeviceKind.CUDA:
        return Precision.BFLOAT16
    fast = cpu_bfloat16_measurement()["bfloat16_fast"]
    return Precision.BFLOAT16 if fast else Precision.FLOAT32


def cpu_bfloat16_measurement() -> dict[str, Any]:
    """This CPU's cached bfloat16 vs float32 matmul timing, measured on first use."""
    # The installed version, not torch.__version__: a cached answer needs no torch import.
    key = f"{cpu_model()}|torch {importlib.metadata.version('torch')}"
    path = zephon_home() / CACHE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_suffix(".lock")):
        cached = _read_precision_cache(path)
        if key not in cached:
            cached[key] = _measure_cpu_precision()
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(cached, indent=2, sort_keys=True) + "\n")
            tmp.replace(path)
        return cached[key]


def _measure_cpu_precision() -> dict[str, Any]:
    """The record cached for this CPU: timings, the decision, what was measured."""
    import torch

    timing = _time_matmuls()
    return {
        **timing,
        "bfloat16_fast": timing["bfloat16_s"] <= timing["float32_s"],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "shape": list(SHAPE),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _time_matmuls() -> dict[str, float]:
    """Best of ``REPEATS`` one-thread matmuls of ``SHAPE``: ``{"float32_s", "bfloat16_s"}``."""
    import torch

    m, k, n = SHAPE
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-core speed: what each of several CPU ranks gets
    try:
        best = {}
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            a @ b  # warm-up: kernel selection, page faults
            times = []
            for _ in range(REPEATS):
                start = time.perf_counter()
                a @ b
                times.append(time.perf_counter() - start)
            best[f"{str(dtype).removeprefix('torch.')}_s"] = min(times)
    finally:
        torch.set_num_threads(threads)
    return best


def cpu_model() -> str:
    """This CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _read_precision_cache(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
