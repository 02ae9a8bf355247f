"""Hydra overrides for sweeps over the shared test corpus."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def datasets_override(built: dict[str, list[Path]]) -> str:
    """``data.datasets={name:['path',...],...}`` for a corpus from :func:`titan_run.corpus`."""
    datasets = ",".join(
        f"{name}:[{','.join(repr(str(p)) for p in paths)}]" for name, paths in sorted(built.items())
    )
    return f"data.datasets={{{datasets}}}"


def mixes_override(domains: Sequence[str], *weights: Sequence[float]) -> str:
    """``hydra.sweeper.mix.explicit=[...]``: one mix per weight tuple (in ``domains`` order)."""
    items = [
        "{" + ",".join(f"{d}:{w:.1f}" for d, w in zip(domains, ws, strict=True)) + "}"
        for ws in weights
    ]
    return f"hydra.sweeper.mix.explicit=[{','.join(items)}]"
