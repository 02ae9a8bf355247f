"""The composed Hydra config (``conf/``) as an orchestrator experiment.

``conf/config.yaml`` holds one :class:`~orchestrator.experiment.ExperimentConfig`
plus the keys of the ``zephon-run`` app (:data:`APP_KEYS`); :func:`experiment_from`
splits them. Importing this module registers the ``zephon_local_corpus`` resolver
that ``conf/data/stdlib.yaml`` uses::

    datasets: ${zephon_local_corpus:3}   # build (once) and name the local corpus, 3 MB a domain
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.experiment import ExperimentConfig, load_experiment
from pipeline.paths import zephon_home

APP_KEYS = ("run_name", "dry_run", "resume", "sweep")
"""Keys of ``conf/config.yaml`` that belong to the app, not to the experiment."""


@dataclass(frozen=True)
class AppOptions:
    """What ``zephon-run`` does with the experiment (``conf/config.yaml``)."""

    run_name: str | None
    """The run folder's name; None: generated."""
    dry_run: bool
    """Plan only: print the resolved plan and fingerprints."""
    resume: bool
    """Continue the folder of ``run_name`` if it exists (one that finished is reported as is)."""
    sweep_name: str | None
    """The sweep this run belongs to (set by the mix sweeper)."""
    parent_run_id: str | None
    """The sweep's parent MLflow run."""


def local_corpus(mb_per_domain: float) -> dict[str, list[str]]:
    """``${zephon_local_corpus:MB}``: build (or reuse) the local corpus under
    ``$ZEPHON_HOME/corpus-<MB>mb`` and return ``{domain: [shard paths]}``."""
    from demo.local_corpus import build_local_corpus

    size = float(mb_per_domain)
    folder = zephon_home() / f"corpus-{size:g}mb"
    built = build_local_corpus(folder, max_bytes_per_domain=int(size * 1e6))
    return {name: [str(p) for p in paths] for name, paths in built.items()}


if not OmegaConf.has_resolver("zephon_local_corpus"):
    OmegaConf.register_new_resolver("zephon_local_corpus", local_corpus, use_cache=True)


def split(cfg: DictConfig) -> tuple[dict[str, Any], AppOptions]:
    """The experiment part of ``cfg`` (resolved, as plain data) and the app's options."""
    experiment_keys = [k for k in cfg if k != "hydra" and k not in APP_KEYS]
    container = OmegaConf.to_container(OmegaConf.masked_copy(cfg, experiment_keys), resolve=True)
    assert isinstance(container, dict)
    sweep = cfg.get("sweep") or {}
    options = AppOptions(
        run_name=cfg.get("run_name"),
        dry_run=bool(cfg.get("dry_run", False)),
        resume=bool(cfg.get("resume", False)),
        sweep_name=sweep.get("name"),
        parent_run_id=sweep.get("parent_run_id"),
    )
    return container, options


def experiment_from(cfg: DictConfig) -> ExperimentConfig:
    """The :class:`ExperimentConfig` of a composed config (unknown keys are errors)."""
    return load_experiment(split(cfg)[0])
