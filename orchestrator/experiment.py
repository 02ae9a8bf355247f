"""The experiment: a resolved config, its validation and its fingerprints.

An experiment is a tree of sections (``model``, ``data``, ``train``, ``eval``,
``resources``, ``tracking``), built from a YAML file, a dict or a Hydra/OmegaConf
config plus ``key=value`` overrides. Unknown keys and wrong types are refused
by OmegaConf's structured schema; everything else :func:`validate` checks
before any work starts, reporting every problem at once.

Fingerprints (computed by :func:`fingerprints` from the data pipeline the
trainer will build, so they cannot drift from it)::

    contract   = sha256(canonical data contract without the mixture)
                 datasets (content fingerprints, field, exhausted), tokenizer, seed,
                 seq len, global batch, lanes, packing, shuffle, flush interval,
                 chunk size, held-out bytes, measured tokens/byte
    variant    = sha256(contract, canonical mixture)          "same data, same mix"
    data fingerprint = the run's digest chain over its per-step global batch digests
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator.errors import ExperimentError
from orchestrator.precision import PRECISIONS
from pipeline import Dataset, Pipeline, WorkSource, fingerprint, load_tokenizer

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass
class ModelSection:
    module: str = "orchestrator.titan.configs"
    """Python module holding the TorchTitan config function."""
    config: str = "zephon_debug"
    """Function in ``module`` returning a ``ZephonTrainer.Config``."""
    args: list[str] = field(default_factory=list)
    """Extra TorchTitan flags, e.g. ``["--optimizer.lr", "1e-3"]``."""


@dataclass
class DataSection:
    datasets: dict[str, list[str]] = field(default_factory=dict)
    """Dataset name -> shard paths or globs (JSONL[.gz|.zst], Parquet, text)."""
    mixture: dict[str, float] = field(default_factory=dict)
    """Token share per dataset (normalised); empty: equal shares."""
    text_field: str = "text"
    """Record field holding the text."""
    exhausted: str = "repeat"
    """At a dataset's end: ``repeat`` (next epoch) or ``stop``."""
    seed: int = 0
    """Seed of the plan (record order per dataset)."""
    lanes: int = 4
    """Lanes L; every dp size used must divide it."""
    global_batch_size: int = 8
    """Sequences per step over all ranks (a multiple of lanes)."""
    seq_len: int = 128
    """Tokens per sequence."""
    shuffle_buffer: int = 16
    """Sequences in each lane's shuffle buffer."""
    shuffle_seed: int = 0
    """Seed of the shuffle."""
    flush_every: int = 4
    """Chunks per lane between flush points."""
    chunk_tokens: int = 1024
    """Estimated tokens per work chunk."""
    holdout_bytes: int = 8192
    """Bytes of each dataset held out from training for evaluation (0: none)."""
    tokenizer: str = "gpt2"
    """Tokenizer name (tiktoken)."""
    cache_dir: str | None = None
    """Shard index cache; None: $ZEPHON_HOME/cache."""


@dataclass
class TrainSection:
    steps: int = 20
    """Training steps."""
    microbatch_size: int = 2
    """Sequences per forward pass per rank (TorchTitan's local batch size)."""
    seed: int = 42
    """Model initialisation seed."""
    precision: str = "auto"
    """``auto``, ``float32`` or ``bfloat16`` (TorchTitan's ``training.mixed_precision_param``);
    ``auto``: bfloat16 on CUDA and on CPUs measured fast at it, else float32
    (:mod:`orchestrator.precision`). A plan records the resolved value."""
    checkpoint_interval: int = 10
    """Steps between checkpoints (the last step is always saved)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (0: all)."""


@dataclass
class EvalSection:
    enable: bool = True
    """Held-out bits per byte per dataset (needs ``data.holdout_bytes > 0``)."""
    interval: int = 10
    """Steps between evaluations; the last step is always evaluated."""


@dataclass
class ResourcesSection:
    dp: int | None = None
    """Data-parallel size; None: the largest divisor of lanes the free devices allow."""
    device: str = "auto"
    """``auto`` (CUDA if any GPU is free, else CPU), ``cuda`` or ``cpu``."""
    max_procs: int | None = None
    """Most processes on CPU, and the cores their threads share; None: the usable cores."""
    gpu_ids: list[int] | None = None
    """CUDA GPUs this run may use (indexes); None: every free one."""
    oversubscribe: bool = False
    """Allow a requested dp above ``max_procs`` on CPU (slower, for tests on small machines)."""
    launcher: str = "local"
    """``local`` (torchrun on this machine), ``multinode`` (torchrun c10d) or ``slurm`` (submitit)."""
    nodes: int = 1
    """Nodes (multinode/slurm); dp = nodes x processes per node."""
    node_rank: int = 0
    """This machine's node rank (multinode)."""
    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous (multinode)."""
    slurm: dict[str, Any] = field(default_factory=dict)
    """submitit executor parameters, e.g. ``{"slurm_partition": "gpu", "timeout_min": 60}``."""
    timeout_s: int | None = None
    """Kill the launch after this many seconds; None: no limit."""


@dataclass
class TrackingSection:
    uri: str | None = None
    """MLflow tracking URI; None: the embedded SQLite store ``./mlflow.db``."""
    experiment: str = "zephon"
    """MLflow experiment name."""
    offline_ok: bool = False
    """Train even if the tracking server is unreachable now (sync later with ``zephon sync``)."""


@dataclass
class ExperimentConfig:
    name: str = "run"
    """Run name prefix."""
    runs_root: str = "runs"
    """Folder holding run folders."""
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    resources: ResourcesSection = field(default_factory=ResourcesSection)
    tracking: TrackingSection = field(default_factory=TrackingSection)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_experiment(
    source: ExperimentConfig | DictConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    overrides: list[str] | None = None,
) -> ExperimentConfig:
    """An ``ExperimentConfig`` from a YAML path, a dict or an OmegaConf config, with
    ``key=value`` overrides applied; schema errors become ``ExperimentError``."""
    schema = OmegaConf.structured(ExperimentConfig)
    try:
        if source is None:
            loaded: Any = {}
        elif isinstance(source, ExperimentConfig):
            loaded = OmegaConf.structured(source)
        elif isinstance(source, (str, os.PathLike)):
            path = Path(source)
            if not path.is_file():
                raise ExperimentError([f"experiment file {str(path)!r} does not exist"])
            loaded = OmegaConf.load(path)
        else:
            loaded = source
        merged = OmegaConf.merge(schema, loaded)
        if overrides:
            for override in overrides:
                if "=" not in override:
                    raise ExperimentError([f"override {override!r} is not of the form key=value"])
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ExperimentError(
            [f"{key}: {e.msg.splitlines()[0]}" if key else str(e).splitlines()[0]]
        ) from None
    assert isinstance(config, ExperimentConfig)
    return config


def validate(config: ExperimentConfig, dp: int | None = None) -> None:
    """Raise ExperimentError listing every problem of ``config`` (and of ``dp``, if given)."""
    problems: list[str] = []
    d, t, r = config.data, config.train, config.resources
    if not _NAME.fullmatch(config.name):
        problems.append(f"name {config.name!r}: use letters, digits and _ . - only")
    if not d.datasets:
        problems.append("data.datasets is empty: name at least one dataset and its files")
    for name, paths in d.datasets.items():
        if not _NAME.fullmatch(name):
            problems.append(f"dataset name {name!r}: use letters, digits and _ . - only")
        if not paths:
            problems.append(f"data.datasets.{name} lists no files")
        for pattern in paths:
            if "://" not in pattern and not glob.glob(os.path.expanduser(pattern), recursive=True):
                problems.append(f"data.datasets.{name}: {pattern!r} matches no file")
    unknown = sorted(set(d.mixture) - set(d.datasets))
    if unknown:
        problems.append(
            f"data.mixture names unknown datasets {unknown}; known: {sorted(d.datasets)}"
        )
    weights = list(d.mixture.values())
    if any(not math.isfinite(w) or w < 0 for w in weights):
        problems.append(f"data.mixture weights must be finite and >= 0, got {d.mixture}")
    elif weights and sum(weights) <= 0:
        problems.append("data.mixture weights sum to zero; give at least one dataset a share")
    if d.exhausted not in ("repeat", "stop"):
        problems.append(f"data.exhausted={d.exhausted!r}: use 'repeat' or 'stop'")
    for key in ("lanes", "global_batch_size", "seq_len", "chunk_tokens", "flush_every"):
        if getattr(d, key) < 1:
            problems.append(f"data.{key} must be >= 1, got {getattr(d, key)}")
    if d.lanes >= 1 and d.global_batch_size % d.lanes:
        problems.append(
            f"data.global_batch_size ({d.global_batch_size}) must be a multiple of data.lanes "
            f"({d.lanes})"
        )
    if d.seed < 0 or d.shuffle_seed < 0 or d.shuffle_buffer < 0 or d.holdout_bytes < 0:
        problems.append("data.seed, shuffle_seed, shuffle_buffer and holdout_bytes must be >= 0")
    for key in ("steps", "microbatch_size", "checkpoint_interval"):
        if getattr(t, key) < 1:
            problems.append(f"train.{key} must be >= 1, got {getattr(t, key)}")
    if t.precision not in PRECISIONS:
        problems.append(f"train.precision={t.precision!r}: use one of {', '.join(PRECISIONS)}")
    precision_flags = ("--training.mixed-precision-param", "--training.mixed_precision_param")
    if any(a.split("=", 1)[0] in precision_flags for a in config.model.args):
        problems.append(
            "model.args sets --training.mixed-precision-param: set train.precision instead "
            "(float32 or bfloat16), so the run's records show the precision it trained in"
        )
    if config.eval.enable and d.holdout_bytes == 0:
        problems.append("eval.enable needs held-out data: set data.holdout_bytes > 0")
    if config.eval.interval < 1:
        problems.append(f"eval.interval must be >= 1, got {config.eval.interval}")
    if r.device not in ("auto", "cuda", "cpu"):
        problems.append(f"resources.device={r.device!r}: use auto, cuda or cpu")
    if r.launcher not in ("local", "multinode", "slurm"):
        problems.append(f"resources.launcher={r.launcher!r}: use local, multinode or slurm")
    if r.launcher == "multinode" and not r.rdzv_endpoint:
        problems.append("resources.launcher=multinode needs resources.rdzv_endpoint=HOST:PORT")
    if r.max_procs is not None and r.max_procs < 1:
        problems.append(f"resources.max_procs must be >= 1, got {r.max_procs}")
    if r.gpu_ids is not None and (not r.gpu_ids or min(r.gpu_ids) < 0):
        problems.append(f"resources.gpu_ids must list GPU indexes >= 0, got {r.gpu_ids}")
    if r.nodes < 1 or not 0 <= r.node_rank < max(r.nodes, 1):
        problems.append(f"resources.nodes ({r.nodes}) / node_rank ({r.node_rank}) out of range")
    dp = r.dp if dp is None else dp
    if dp is not None:
        problems += dp_problems(config, dp)
    if problems:
        raise ExperimentError(problems)


def dp_problems(config: ExperimentConfig, dp: int) -> list[str]:
    """Why ``dp`` data-parallel ranks cannot run ``config`` ([] if they can)."""
    d, t = config.data, config.train
    if dp < 1:
        return [f"dp must be >= 1, got {dp}"]
    if d.lanes % dp:
        return [f"dp={dp} does not divide data.lanes={d.lanes}; use one of {divisors(d.lanes)}"]
    local = d.global_batch_size // dp
    if t.microbatch_size >= 1 and local % t.microbatch_size:
        return [
            f"dp={dp} gives {local} sequences per rank per step, not a multiple of "
            f"train.microbatch_size={t.microbatch_size}"
        ]
    return []


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def canonical_mixture(config: ExperimentConfig) -> dict[str, str]:
    """Shares normalised and printed with fixed decimals, for every dataset (sorted)."""
    from pipeline.mixture import Mixture

    names = sorted(config.data.datasets)
    weights = config.data.mixture or dict.fromkeys(names, 1.0)
    return Mixture({n: weights.get(n, 0.0) for n in names}, names).canonical()


@dataclass
class Fingerprints:
    """The data contract without the mixture, the mixture, and their fingerprints."""

    contract: dict[str, Any]
    mixture: dict[str, str]
    contract_fingerprint: str
    variant: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fingerprints(config: ExperimentConfig, dp: int = 1) -> Fingerprints:
    """Index the datasets, calibrate, and fingerprint the data contract (seconds, not minutes)."""
    pipeline = build_pipeline(
        config.data, dp_size=dp, dp_rank=0, microbatch_size=config.train.microbatch_size
    )
    try:
        contract = pipeline.contract()
        contract.pop("mixture", None)
        measured = pipeline.source.calibrate(load_tokenizer(config.data.tokenizer))
        contract["tokens_per_byte"] = {k: round(v, 6) for k, v in measured.items()}
    finally:
        pipeline.close()
    mixture = canonical_mixture(config)
    contract_fp = fingerprint(contract)
    return Fingerprints(
        contract=contract,
        mixture=mixture,
        contract_fingerprint=contract_fp,
        variant=fingerprint({"contract": contract_fp, "mixture": mixture}),
    )


def build_pipeline(
    data: DataSection,
    *,
    dp_size: int,
    dp_rank: int,
    microbatch_size: int,
    tokenize_parallelism: int = 1,
    runner: str = "threads",
    prefetch_steps: int = 2,
) -> Pipeline:
    """One rank's validated ``Pipeline`` for the data contract ``data`` (no data is read yet;
    the last three arguments change speed only). The trainer builds its data the same way,
    so the fingerprints are those of the data it trains on. Raises ConfigError."""
    datasets = [
        Dataset(
            name,
            [absolute(p) for p in paths],
            field=data.text_field,
            exhausted=data.exhausted,
            cache_dir=data.cache_dir,
        )
        for name, paths in sorted(data.datasets.items())
    ]
    source = WorkSource(
        datasets,
        dict(data.mixture) or dict.fromkeys(data.datasets, 1.0),
        seed=data.seed,
        chunk_tokens=data.chunk_tokens,
        holdout_bytes=data.holdout_bytes,
    )
    pipeline = (
        Pipeline(source)
        .options(
            lanes=data.lanes,
            dp_rank=dp_rank,
            dp_size=dp_size,
            flush_every=data.flush_every,
            runner=runner,
            prefetch_steps=prefetch_steps,
        )
        .tokenize(data.tokenizer, data.text_field, tokenize_parallelism)
        .pack_flat(max_length=data.seq_len)
        .shuffle(data.shuffle_buffer, data.shuffle_seed)
        .batch(microbatch_size=microbatch_size, global_batch_size=data.global_batch_size)
    )
    pipeline.validate()
    return pipeline


def absolute(path: str) -> str:
    """A local path made absolute (a URL unchanged): runs start in other folders."""
    return path if "://" in path else str(Path(os.path.expanduser(path)).absolute())
