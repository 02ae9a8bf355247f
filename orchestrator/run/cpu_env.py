"""What a launch runs (:data:`TRAIN_MODULE`) and the environment it starts from: what every
launch gets, and CPU launches' malloc and OpenMP defaults. Light (``os`` only):
``zephon-run`` computes it before its own imports, to start the warm server
(:mod:`orchestrator.run.warm_start`) as soon as it begins.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import os

TRAIN_MODULE = "orchestrator.titan.train"
"""The trainer every launch runs (``zephon-train``)."""

CPU_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(16 << 30),
    "MALLOC_TOP_PAD_": str(512 << 20),
}
"""glibc malloc settings for CPU training (the user's own values win). By default glibc
serves each block over 32 MB (the debug model's embedding and its gradients, FSDP's
gathered parameters) with a fresh mmap and returns it on free, so every step faults the
same pages in again: measured on 2 AVX2 cores (dp 2, 8 steps), 55 s of 140 s CPU were
system time and a step took 6.8 s; with these, 17 s and 4.1 s. Memory stays mapped
at its peak instead."""
CPU_THREAD_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""OpenMP settings for CPU training (the user's own values win). By default an OpenMP
thread spins at each barrier waiting for the others; when anything else wants the core
(the run's own pipeline threads, another run, its evaluation) the spinning threads starve
the one that has work. Measured on 2 AMD EPYC cores, ``zephon_mini`` at dp 1 on 2 threads:
942 tokens/s alone and 271 beside a busy process by default; with ``PASSIVE``, 1,881
and 1,466."""


def cpu_start_env() -> dict[str, str]:
    """The environment every CPU launch starts from (no GPU, the malloc and OpenMP defaults
    unless the user set them); :func:`.launch.launch_env` adds the run's caches and thread count.
    A warm server started with it serves every CPU launch (:mod:`.warm_start`)."""
    defaults = {**CPU_MALLOC_ENV, **CPU_THREAD_ENV}
    return {
        **common_env(),
        "CUDA_VISIBLE_DEVICES": "",
        **{k: v for k, v in defaults.items() if k not in os.environ},
    }


def common_env() -> dict[str, str]:
    """This process's environment, offline and unbuffered, as every launch gets it."""
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def trainer_import_env() -> dict[str, str]:
    """What a process that imports the trainer outside any run folder (the recipe resolver,
    the warm server) adds to its environment: torch makes its compile cache's folder on
    import, here in Zephon's cache, not in the system's temporary folder (a launch's: its
    run folder)."""
    # deferred: pipeline's package imports numpy and tokenizers; this module stays light
    from pipeline.paths import zephon_home

    return {"TORCHINDUCTOR_CACHE_DIR": str(zephon_home() / "inductor")}
