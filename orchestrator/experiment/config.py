"""The experiment's schema (its sections), loaded from YAML, a dict or Hydra with overrides.

Unknown keys and wrong types are refused by OmegaConf's structured schema, overrides that
give a section one value by :mod:`orchestrator.experiment.overrides`; everything else
:func:`orchestrator.experiment.validate` checks before any work starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf._utils import get_yaml_loader
from omegaconf.errors import OmegaConfBaseException

from orchestrator.errors import ExperimentError
from orchestrator.experiment.overrides import check_overrides, parse_overrides
from orchestrator.experiment.setting_enums import DeviceRequest, Launcher, Precision


@dataclass
class ModelSection:
    """The model: a TorchTitan config function, and extra TorchTitan flags."""

    module: str = "orchestrator.titan.configs"
    """Python module holding the TorchTitan config function."""
    config: str = "zephon_debug"
    """Function in ``module`` returning a ``ZephonTrainer.Config``."""
    args: list[str] = field(default_factory=list)
    """Extra TorchTitan flags, e.g. ``["--optimizer.lr", "1e-3"]``."""


@dataclass
class PhaseSection:
    """One phase of a staged mixture: its mixture, until a step or a token count (the last
    phase: to the end of the run)."""

    mixture: dict[str, float] = field(default_factory=dict)
    """Token share per dataset within this phase (normalised); empty: equal shares."""
    until_step: int | None = None
    """The phase ends once the run has drawn this many steps' tokens (steps x
    ``global_batch_size`` x ``seq_len``); None on the last phase."""
    until_tokens: int | None = None
    """The phase's end as a token count, instead of ``until_step``."""


@dataclass
class PretokenizedSection:
    """The tokenizer a pre-tokenized dataset's files were written with (Megatron ``.bin`` +
    ``.idx``, OLMo-core ``.npy``): it must be the run's ``data.tokenizer``."""

    tokenizer: str = "gpt2"
    """The files' tokenizer, as ``data.tokenizer`` names one (the same fingerprint)."""
    dtype: str | None = None
    """OLMo-core files: their ids' width (``uint8``, ``uint16``, ``uint32``, ``uint64``);
    None: OLMo-core's rule, the narrowest holding the vocabulary (gpt2: uint16). Megatron's
    ``.idx`` says."""


@dataclass
class DataSection:
    """The data contract and its layout: the one schema of a run's data, read by the plan
    and, as the run's ``data.json`` (:mod:`orchestrator.experiment.dataspec`), by the trainer."""

    datasets: dict[str, list[str]] = field(default_factory=dict)
    """Dataset name -> shard paths or globs (JSONL[.gz|.zst], Parquet, Arrow, MDS, text;
    pre-tokenized: Megatron .bin, OLMo-core .npy)."""
    pretokenized: dict[str, PretokenizedSection] = field(default_factory=dict)
    """Dataset (or eval set) name -> the tokenizer its token files were written with."""
    compared: str = "mixture"
    """What the variants differ in: ``mixture``, ``dataset:NAME`` (that dataset's version)
    or ``processing`` (``process``); everything else is the data contract (docs/curation.md)."""
    process: list[Any] = field(default_factory=list)
    """Per-record filters and transforms before tokenizing, in order: a step's name
    (``gopher_quality``), a user function (``mypkg.filters:keep``) or ``{step: length,
    min_chars: 200, datasets: [web]}`` (docs/curation.md); the token shares hold on what
    they keep."""
    overlap_ngram: int = 0
    """Count the training records sharing a word n-gram of this length with a scored document
    (13: as GPT-3 and DCLM report; 0: off); counted, not removed (docs/curation.md)."""
    eval_sets: dict[str, list[str]] = field(default_factory=dict)
    """Fixed evaluation corpora: name -> files or globs; every record scored like held-out
    documents and never trained on, in any dataset (part of the data contract)."""
    mixture: dict[str, float] = field(default_factory=dict)
    """Token share per dataset (normalised); empty: equal shares."""
    phases: list[PhaseSection] = field(default_factory=list)
    """A staged mixture instead of ``mixture``: phases in order, each with its own mixture
    (docs/anneals.md); empty: one mixture for the whole run."""
    compared_phase: int | None = None
    """With ``phases``: the phase whose mixture is the run's variant (compared, fitted and
    searched); the other phases' mixtures are part of the data contract. None: the last."""
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
    holdout_bytes: int = 16384
    """Held-out bytes scored per dataset, a budget never exceeded (0: no held-out data)."""
    holdout_docs: int = 64
    """Documents of each dataset held out from training (at most a quarter of its records)."""
    tokenizer: str = "gpt2"
    """``gpt2``, or a tokenizer file: ``PATH[;eos=TOKEN]...`` (docs/tokenizers.md)."""
    cache_dir: str | None = None
    """Shard index cache; None: $ZEPHON_HOME/cache."""
    token_cache: float = 20.0
    """GiB the token cache may hold: each record's tokens kept by content, read back by every
    later run (docs/design/pipeline_token_cache.md); 0: off. Performance only."""
    token_cache_dir: str | None = None
    """The token cache's folder (shared storage shares it with a team); None:
    $ZEPHON_HOME/token_cache."""
    io_options: dict[str, Any] = field(default_factory=dict)
    """How remote shards (``s3://``, ``https://``) are read and cached: a
    :class:`pipeline.Dataset`'s ``io_options``, e.g. ``{cache: {enabled: true}}`` to keep one
    copy of each shard for every run on the machine; empty: each process downloads its own."""
    order: str = "v2"
    """Record order: ``v2`` reads only the shards a run reaches; ``v1`` (one permutation of
    every record, indexing the whole corpus) is what runs recorded before orders had versions
    use (docs/design/pipeline_order.md)."""
    shard_window: int = 64
    """Order v2: shards whose records are mixed together (at least 64 distinct shards in
    every 1,000 records of a lane where there are that many)."""


@dataclass
class TrainSection:
    """How the model trains: steps, batch per forward pass, seed, precision, checkpoints."""

    steps: int = 20
    """Training steps."""
    microbatch_size: int = 2
    """Sequences per forward pass per rank (TorchTitan's local batch size)."""
    seed: int = 42
    """Model initialisation seed."""
    precision: str = Precision.AUTO
    """``auto``, ``float32`` or ``bfloat16`` (TorchTitan's ``training.mixed_precision_param``);
    ``auto``: bfloat16 on CUDA and on CPUs measured fast at it, else float32
    (:mod:`orchestrator.machine.precision`). A plan records the resolved value."""
    checkpoint_interval: int = 10
    """Steps between checkpoints (the last step is always saved)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (0: all)."""
    lr: float | None = None
    """Peak learning rate (TorchTitan's first parameter group's ``lr``; None: the model
    config's)."""
    lr_from_init: bool = False
    """With ``init_from`` a Zephon run's checkpoint step: the peak learning rate is that run's
    learning rate at that step (its recorded schedule), as Marin's anneals rescale it; the
    plan records the value in ``train.lr``."""
    warmup_steps: int | None = None
    """Learning-rate warmup steps (None: the model config's; TorchTitan's
    ``lr_scheduler.warmup_steps``)."""
    decay_ratio: float | None = None
    """The last fraction of the steps over which the learning rate decays, in (0, 1] (None:
    the model config's; ``lr_scheduler.decay_ratio``)."""
    decay_type: str | None = None
    """``linear``, ``sqrt`` or ``cosine`` (None: the model config's)."""
    min_lr_factor: float | None = None
    """The final learning rate as a fraction of the peak, in [0, 1] (None: the model
    config's). An anneal (``train=anneal``): 0 warmup steps, decay ratio 1, linear, 0."""
    init_from: str | None = None
    """Start from this checkpoint instead of the recipe's own initial weights: a TorchTitan
    DCP step folder or a Hugging Face safetensors folder of the same model (an anneal;
    docs/anneals.md). Its content digest is the run's initial-weights identity."""
    init_optimizer: bool = False
    """With ``init_from`` (DCP): restore its optimizer state too, not only the weights."""


@dataclass
class EvalSection:
    """Scoring held-out data, and downstream tasks, while training."""

    enable: bool = True
    """Held-out bits per byte per dataset (needs ``data.holdout_bytes > 0``)."""
    interval: int = 10
    """Steps between evaluations; the last step is always evaluated."""
    initial: bool = True
    """Score the initial model too (step 0), so the comparison shows what training gained."""
    tasks: list[str] = field(default_factory=list)
    """lm-evaluation-harness tasks (multiple-choice and perplexity kinds) scored at the last
    evaluation (docs/tasks.md)."""
    task_dir: str | None = None
    """Folder of local lm-eval task YAMLs and their data files (lm-eval's ``include_path``)."""
    tasks_at_every_eval: bool = False
    """Score the tasks at every evaluation, not only at the last step."""
    task_limit: int | None = None
    """Items scored per task at most; None: every item."""


@dataclass
class ResourcesSection:
    """Where the run trains: devices, processes, launcher, time limit."""

    dp: int | None = None
    """Data-parallel size; None: the largest divisor of lanes the free devices allow."""
    device: str = DeviceRequest.AUTO
    """``auto`` (CUDA if any GPU is free, else CPU), ``cuda`` or ``cpu``."""
    max_procs: int | None = None
    """Most processes on CPU, and the cores their threads share; None: the usable cores."""
    gpu_ids: list[int] | None = None
    """CUDA GPUs this run may use (indexes); None: every free one."""
    oversubscribe: bool = False
    """Allow a requested dp above ``max_procs`` on CPU (slower, for tests on small machines)."""
    launcher: str = Launcher.LOCAL
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
    """Where the run is logged: the MLflow store and experiment."""

    uri: str | None = None
    """MLflow tracking URI; None: the embedded SQLite store ``./mlflow.db``."""
    experiment: str = "zephon"
    """MLflow experiment name."""
    offline_ok: bool = False
    """Train even if the tracking server is unreachable now (sync later with ``zephon sync``)."""


@dataclass
class ExperimentConfig:
    """One experiment: a model trained on a data mix, evaluated, and logged to MLflow."""

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
    schema = _schema()
    with _schema_errors():
        if source is None:
            loaded: Any = {}
        elif isinstance(source, ExperimentConfig):
            loaded = OmegaConf.structured(source)
        elif isinstance(source, (str, os.PathLike)):
            loaded = read_yaml_file(source, "experiment file")
        else:
            loaded = source
        if isinstance(loaded, dict) and (problems := _shape_problems(schema, loaded)):
            raise ExperimentError(problems)
        merged = OmegaConf.merge(schema, loaded)
        if overrides:
            parsed = parse_overrides(list(overrides))
            check_overrides(merged, parsed)
            for override in parsed:  # as Hydra applies an override
                OmegaConf.update(merged, override.key, override.value, merge=True)
        config = OmegaConf.to_object(merged)
    assert isinstance(config, ExperimentConfig)
    return config


@functools.cache
def _schema() -> DictConfig:
    """The experiment's structured schema, built once per process (0.1-0.2 s of CPU each
    time on 2 cores, and a sweep loads each job's experiment several times); never changed:
    ``OmegaConf.merge`` copies it."""
    return OmegaConf.structured(ExperimentConfig)


def read_yaml_file(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The mapping in the YAML (or JSON) file ``path`` (empty: ``{}``); ``ExperimentError``
    naming ``what`` it is when it does not exist, is not UTF-8 text, is not valid YAML (with
    the line and column) or holds no mapping."""
    path = Path(path)
    if not path.is_file():
        raise ExperimentError([f"{what} {str(path)!r} does not exist"])
    try:
        # OmegaConf's loader (duplicate keys refused), without OmegaConf.load's OSError
        # for a file holding one number
        content = yaml.load(path.read_text(encoding="utf-8"), Loader=get_yaml_loader())
    except UnicodeDecodeError as e:
        raise ExperimentError(
            [
                f"{what} {str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start}); "
                "give a YAML or JSON file"
            ]
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ExperimentError(
            [f"{what} {str(path)!r} is not valid YAML{where}: {problem}; fix the file"]
        ) from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ExperimentError(
            [
                f"{what} {str(path)!r} holds {_kind(content)} {content!r}, not a mapping; write "
                "its keys as `key: value` lines"
            ]
        )
    return content


_KINDS = {list: "a list", dict: "a mapping", str: "a string", bool: "a boolean", int: "an integer"}


def _kind(value: Any) -> str:
    """What ``value`` is, in a message: ``a list``, ``a string``, ``a float``..."""
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def _shape_problems(schema: Any, value: Any, key: str = "") -> list[str]:
    """Where ``value`` (plain data) gives a section, a mapping or a list of ``schema`` (its
    node at ``key``; the experiment at ``""``) a value of another shape, each named by its
    key: OmegaConf's own message for these names none."""
    if value is None or not isinstance(schema, (DictConfig, ListConfig)):
        return []
    if isinstance(schema, ListConfig):
        if isinstance(value, list):
            return []
        return [f"{key} is a list, got {_kind(value)} {value!r}: write {key}: [...]"]
    section = dataclasses.is_dataclass(OmegaConf.get_type(schema))
    if not isinstance(value, dict):
        shape = "a section of the experiment" if section else "a mapping"
        return [f"{key} is {shape}, got {_kind(value)} {value!r}: write {key}: {{KEY: VALUE}}"]
    if not section:
        return []
    return [
        problem
        for name, item in value.items()
        if name in schema
        for problem in _shape_problems(schema[name], item, f"{key}.{name}".lstrip("."))
    ]


def load_data_section(source: dict[str, Any]) -> DataSection:
    """A ``DataSection`` from plain data (a data spec's content); schema errors become
    ``ExperimentError``."""
    with _schema_errors():
        data = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(DataSection), source))
    assert isinstance(data, DataSection)
    return data


@contextlib.contextmanager
def _schema_errors() -> Iterator[None]:
    """OmegaConf's errors (unknown keys, wrong types) as ``ExperimentError`` naming the key."""
    try:
        yield
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ExperimentError(
            [f"{key}: {e.msg.splitlines()[0]}" if key else str(e).splitlines()[0]]
        ) from None
