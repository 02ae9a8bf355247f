"""Repetition caps from an experiment: a domain's largest share before its data repeats too
often in one run's token budget."""

from __future__ import annotations

from orchestrator.experiment.config import ExperimentConfig
from orchestrator.experiment.fingerprints import build_pipeline
from orchestrator.search.propose import REPETITION_EPOCHS, Bounds
from pipeline import load_tokenizer


def dataset_tokens(config: ExperimentConfig) -> dict[str, float]:
    """Estimated tokens per dataset of ``config``: its text bytes (order v2: estimated from
    the shards' sizes) times the tokens per byte the plan measures with the run's own
    tokenizer (the calibration the contract records)."""
    pipeline = build_pipeline(
        config.data, dp_size=1, dp_rank=0, microbatch_size=config.train.microbatch_size
    )
    try:
        source = pipeline.source
        source.calibrate(load_tokenizer(config.data.tokenizer))
        return {ds.name: source.estimated_tokens(d) for d, ds in enumerate(source.datasets)}
    finally:
        pipeline.close()


def token_budget(config: ExperimentConfig) -> int:
    """Tokens one run of ``config`` trains on: steps x global batch x sequence length."""
    return config.train.steps * config.data.global_batch_size * config.data.seq_len


def capped_bounds(
    config: ExperimentConfig, bounds: Bounds, max_epochs: float = REPETITION_EPOCHS
) -> Bounds:
    """``bounds`` with each dataset's share capped at ``max_epochs`` passes over its tokens
    in one run of ``config``."""
    return bounds.with_repetition_cap(dataset_tokens(config), token_budget(config), max_epochs)
