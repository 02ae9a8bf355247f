"""The experiment's data: its pipeline, data contract and fingerprints.

The fingerprints are computed from the data pipeline the trainer will build, so they
cannot drift from it. Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.experiment.config import DataSection, ExperimentConfig
from orchestrator.experiment.phases import compared_phase, pipeline_mixture, split_contract
from orchestrator.experiment.variant_axis import parse_axis, split_varied, varied_identity
from pipeline import ConfigError, Dataset, Pipeline, WorkSource, fingerprint, load_tokenizer
from pipeline.choice import parse_choice
from pipeline.dataset import TokenDeclaration, TokenDtype
from pipeline.paths import zephon_home


@dataclass
class Fingerprints:
    """The data contract without the run's mixture, the mixture (a staged mixture's: its
    compared phase's, :mod:`orchestrator.experiment.phases`), and their fingerprints."""

    contract: dict[str, Any]
    mixture: dict[str, str]
    contract_fingerprint: str
    variant: str
    varied: dict[str, Any] = field(default_factory=dict)
    """What the variant differs in besides the mixture (``data.compared``; empty for a
    mixture: its variant is then what it always was)."""

    @classmethod
    def of(
        cls, contract: dict[str, Any], mixture: dict[str, str], varied: dict[str, Any]
    ) -> Fingerprints:
        """The fingerprints of a run's data, from its children's: the contract's digest, and
        the variant's from the contract's, the mixture and what else varies."""
        contract_fp = fingerprint(contract)
        variant: dict[str, Any] = {"contract": contract_fp, "mixture": mixture}
        if varied:
            variant["varied"] = varied_identity(varied)
        return cls(contract, mixture, contract_fp, fingerprint(variant), varied)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fingerprints(config: ExperimentConfig, dp: int = 1) -> Fingerprints:
    """Index the datasets, calibrate, and fingerprint the data contract (seconds, not minutes)."""
    pipeline = build_pipeline(
        config.data, dp_size=dp, dp_rank=0, microbatch_size=config.train.microbatch_size
    )
    try:
        contract, mixture = split_contract(pipeline.contract(), compared_phase(config.data))
        measured = pipeline.source.calibrate(load_tokenizer(config.data.tokenizer))
        contract["tokens_per_byte"] = {k: round(v, 6) for k, v in measured.items()}
    finally:
        pipeline.close()
    paths = {name: [absolute(p) for p in globs] for name, globs in config.data.datasets.items()}
    contract, varied = split_varied(contract, parse_axis(config.data.compared), paths)
    return Fingerprints.of(contract, mixture, varied)


def build_pipeline(
    data: DataSection,
    *,
    dp_size: int,
    dp_rank: int,
    microbatch_size: int,
    tokenize_parallelism: int = 1,
    runner: str = "threads",
    prefetch_steps: int = 2,
    sizes_hint: str | None = None,
) -> Pipeline:
    """One rank's validated ``Pipeline`` for the data contract ``data`` (no data is read yet;
    ``tokenize_parallelism``, ``runner`` and ``prefetch_steps`` change speed only). The
    trainer builds its data here too, so the fingerprints are those of the data it trains
    on. Raises ConfigError, its message followed by ``sizes_hint`` (where the caller's sizes
    come from: a trainer names its flags) in parentheses when given."""

    def datasets(paths_by_name: dict[str, list[str]], **options: Any) -> list[Dataset]:
        return [
            Dataset(
                name,
                [absolute(p) for p in paths],
                field=data.text_field,
                cache_dir=data.cache_dir,
                io_options=data.io_options,
                tokens=token_declaration(data, name),
                **options,
            )
            for name, paths in sorted(paths_by_name.items())
        ]

    try:
        source = WorkSource(
            datasets(data.datasets, exhausted=data.exhausted),
            pipeline_mixture(data),
            seed=data.seed,
            chunk_tokens=data.chunk_tokens,
            holdout_bytes=data.holdout_bytes,
            holdout_docs=data.holdout_docs,
            order=data.order,
            shard_window=data.shard_window,
            eval_sets=datasets(data.eval_sets),
        )
        pipeline = (
            Pipeline(source)
            .options(
                lanes=data.lanes,
                dp_rank=dp_rank,
                dp_size=dp_size,
                flush_every=data.flush_every,
                overlap_ngram=data.overlap_ngram,
                token_cache_dir=token_cache_dir(data),
                token_cache_bytes=int(data.token_cache * (1 << 30)),
                runner=runner,
                prefetch_steps=prefetch_steps,
            )
            .process(*data.process)
            .tokenize(data.tokenizer, data.text_field, tokenize_parallelism)
            .pack_flat(max_length=data.seq_len)
            .shuffle(data.shuffle_buffer, data.shuffle_seed)
            .batch(microbatch_size=microbatch_size, global_batch_size=data.global_batch_size)
        )
        pipeline.validate()
    except ConfigError as error:
        if sizes_hint is None:
            raise
        raise ConfigError(f"{error} ({sizes_hint})") from None
    return pipeline


def token_declaration(data: DataSection, name: str) -> TokenDeclaration | None:
    """The declared tokenizer of dataset (or eval set) ``name``'s token files; None if none."""
    section = data.pretokenized.get(name)
    if section is None:
        return None
    key = f"data.pretokenized.{name}.dtype"
    dtype = None if section.dtype is None else parse_choice(TokenDtype, section.dtype, key)
    return TokenDeclaration(section.tokenizer, dtype)


def token_cache_dir(data: DataSection) -> str | None:
    """The token cache's folder for ``data`` (None: off)."""
    if not data.token_cache:
        return None
    return absolute(data.token_cache_dir or str(zephon_home() / "token_cache"))


def absolute(path: str) -> str:
    """A local path made absolute (a URL unchanged): runs start in other folders."""
    return path if "://" in path else str(Path(os.path.expanduser(path)).absolute())
