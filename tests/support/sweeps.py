"""Sweeps over the shared test corpus: ``zephon-run -m`` and its Hydra overrides."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support import REPO
from tests.support.titan_run import corpus_tokenizer


def multirun(
    work: Path, name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 1200
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``zephon-run -m hydra/sweeper=zephon_mix ARGS`` in ``work`` (``env`` added to this
    process's); (the finished process, its sweep dir ``work/multirun/<name>``)."""
    command, sweep_dir = multirun_command(work, name, *args)
    process = subprocess.run(
        command,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    return process, sweep_dir


def multirun_command(work: Path, name: str, *args: str) -> tuple[list[str], Path]:
    """The command of :func:`multirun` (to start it in ``work`` yourself) and its sweep dir."""
    sweep_dir = work / "multirun" / name
    command = [
        sys.executable,
        "-m",
        "sweeps.app",
        "-m",
        "hydra/sweeper=zephon_mix",
        f"hydra.sweep.dir={sweep_dir}",
        *args,
    ]
    return command, sweep_dir


def datasets_override(built: dict[str, list[Path]]) -> str:
    """``data.datasets={name:['path',...],...}`` for a corpus from :func:`titan_run.corpus`."""
    datasets = ",".join(
        f"{name}:[{','.join(repr(str(p)) for p in paths)}]" for name, paths in sorted(built.items())
    )
    return f"data.datasets={{{datasets}}}"


def tokenizer_override(built: dict[str, list[Path]]) -> str:
    """``data.tokenizer=...``: the small BPE of the shared corpus ``built``
    (:func:`tests.support.titan_run.corpus_tokenizer`)."""
    return f"data.tokenizer={corpus_tokenizer(built)}"


def mixes_override(domains: Sequence[str], *weights: Sequence[float]) -> str:
    """``hydra.sweeper.mix.explicit=[...]``: one mix per weight tuple (in ``domains`` order)."""
    items = [
        "{" + ",".join(f"{d}:{w:.1f}" for d, w in zip(domains, ws, strict=True)) + "}"
        for ws in weights
    ]
    return f"hydra.sweeper.mix.explicit=[{','.join(items)}]"


def tiny_sweep_overrides(built: dict[str, list[Path]]) -> list[str]:
    """The overrides of the tests' real sweeps: the shared corpus ``built`` as data with its
    small tokenizer, ``zephon_mini`` trained 2 steps, held-out text scored at step 2."""
    return [
        datasets_override(built),
        tokenizer_override(built),
        "model=mini",
        "data.holdout_bytes=4096",
        "train=smoke",
        "train.steps=2",
        "eval.interval=2",
    ]
