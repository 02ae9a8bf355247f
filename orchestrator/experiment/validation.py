"""Every check of an experiment that can be made before any work starts, reported at once."""

from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator.errors import ExperimentError
from orchestrator.experiment.config import (
    DataSection,
    EvalSection,
    ExperimentConfig,
    TrainSection,
)
from orchestrator.experiment.phases import phase_problems
from orchestrator.experiment.setting_enums import (
    DecayType,
    DeviceRequest,
    Launcher,
    Precision,
    choice_problem,
)
from orchestrator.experiment.variant_axis import AxisKind, parse_axis
from pipeline import ConfigError, ExhaustedPolicy, OrderVersion, ZephonError, load_tokenizer
from pipeline.dataset import TokenDtype
from pipeline.io import credentials_problem
from pipeline.processing import parse_chain

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


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
        problems += _files_problems(f"data.datasets.{name}", paths)
    problems += _curation_problems(config)
    problems += _pretokenized_problems(d)
    problems += _mixture_problems(d.mixture, sorted(d.datasets), "data.mixture")
    for k, phase in enumerate(d.phases):
        problems += _mixture_problems(phase.mixture, sorted(d.datasets), f"data.phases.{k}.mixture")
    problems += phase_problems(d)
    problems += choice_problem("data.exhausted", d.exhausted, ExhaustedPolicy)
    if d.order not in tuple(OrderVersion):
        problems.append(
            f"data.order={d.order!r}: use one of {[v.value for v in OrderVersion]} "
            "(v2 for new runs)"
        )
    for key in (
        "lanes",
        "global_batch_size",
        "seq_len",
        "chunk_tokens",
        "flush_every",
        "shard_window",
    ):
        if getattr(d, key) < 1:
            problems.append(f"data.{key} must be >= 1, got {getattr(d, key)}")
    if d.lanes >= 1 and d.global_batch_size % d.lanes:
        problems.append(
            f"data.global_batch_size ({d.global_batch_size}) must be a multiple of data.lanes "
            f"({d.lanes})"
        )
    if d.seed < 0 or d.shuffle_seed < 0 or d.shuffle_buffer < 0 or d.holdout_bytes < 0:
        problems.append("data.seed, shuffle_seed, shuffle_buffer and holdout_bytes must be >= 0")
    if d.holdout_docs < 2:
        problems.append(
            f"data.holdout_docs must be >= 2 (a held-out score's sampling error needs two "
            f"documents), got {d.holdout_docs}"
        )
    for key in ("steps", "microbatch_size", "checkpoint_interval"):
        if getattr(t, key) < 1:
            problems.append(f"train.{key} must be >= 1, got {getattr(t, key)}")
    if t.keep_checkpoints < 0 or t.keep_checkpoints == 1:  # TorchTitan refuses 1 at launch
        problems.append(
            f"train.keep_checkpoints must be 0 (keep all) or >= 2 (the newest may be half "
            f"written when a run stops), got {t.keep_checkpoints}"
        )
    problems += _schedule_problems(t)
    if t.init_optimizer and t.init_from is None:
        problems.append("train.init_optimizer needs train.init_from (a checkpoint to restore)")
    problems += choice_problem("train.precision", t.precision, Precision)
    problems += _owned_flags(config.model.args)
    if config.eval.enable and d.holdout_bytes == 0:
        problems.append("eval.enable needs held-out data: set data.holdout_bytes > 0")
    if config.eval.interval < 1:
        problems.append(f"eval.interval must be >= 1, got {config.eval.interval}")
    problems += _task_problems(config.eval)
    if config.tracking.uri and (uri_problem := tracking_uri_problem(config.tracking.uri)):
        problems.append(f"tracking.uri: {uri_problem}")
    problems += choice_problem("resources.device", r.device, DeviceRequest)
    problems += choice_problem("resources.launcher", r.launcher, Launcher)
    if r.launcher == Launcher.MULTINODE and not r.rdzv_endpoint:
        problems.append("resources.launcher=multinode needs resources.rdzv_endpoint=HOST:PORT")
    if r.max_procs is not None and r.max_procs < 1:
        problems.append(f"resources.max_procs must be >= 1, got {r.max_procs}")
    if r.gpu_ids is not None and (not r.gpu_ids or min(r.gpu_ids) < 0):
        problems.append(f"resources.gpu_ids must list GPU indexes >= 0, got {r.gpu_ids}")
    if r.timeout_s is not None and r.timeout_s < 1:
        problems.append(
            f"resources.timeout_s must be >= 1 (seconds) or null (no limit), got {r.timeout_s}"
        )
    if r.nodes < 1 or not 0 <= r.node_rank < max(r.nodes, 1):
        problems.append(f"resources.nodes ({r.nodes}) / node_rank ({r.node_rank}) out of range")
    dp = r.dp if dp is None else dp
    if dp is not None:
        problems += dp_problems(config, dp)
    if problems:
        raise ExperimentError(problems)


TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
"""The schemes of the MLflow stores a run may be tracked in: the embedded SQLite store, a
tracking server, or a database (``postgresql+psycopg2://...``: a scheme and its driver)."""


def tracking_uri_problem(uri: str) -> str | None:
    """Why ``uri`` names no MLflow store a run may be tracked in (None if it does): not a
    URL, or a scheme MLflow would refuse or would read as a folder of files (a bare path,
    ``file:``, which MLflow no longer develops)."""
    try:
        scheme = urlparse(uri).scheme
    except ValueError as e:
        return f"{uri!r} is not a URL ({e})"
    if scheme.partition("+")[0] in TRACKING_SCHEMES:
        return None
    return (
        f"{uri!r} names no tracking store; use sqlite:///PATH (a database file), "
        "http(s)://HOST:PORT (a tracking server) or a database URL (postgresql://...)"
    )


def _files_problems(key: str, patterns: list[str]) -> list[str]:
    """Why the files or globs at ``key`` name no data ([] if each matches a file or is a URL)."""
    problems = [] if patterns else [f"{key} lists no files"]
    for pattern in patterns:
        if "://" in pattern:
            url_problem = credentials_problem(pattern)
            problems += [f"{key}: {url_problem}"] if url_problem else []
        elif not glob.glob(os.path.expanduser(pattern), recursive=True):
            problems.append(f"{key}: {pattern!r} matches no file")
    return problems


def _curation_problems(config: ExperimentConfig) -> list[str]:
    """What is wrong with ``data.compared``, ``data.process`` and ``data.eval_sets``; a
    comparison of dataset versions needs a yardstick that does not move with them."""
    d, problems = config.data, []
    for name, paths in d.eval_sets.items():
        if not _NAME.fullmatch(name):
            problems.append(f"eval set name {name!r}: use letters, digits and _ . - only")
        if name in d.datasets:
            problems.append(f"data.eval_sets.{name} has a training dataset's name: name it apart")
        problems += _files_problems(f"data.eval_sets.{name}", paths)
    if d.overlap_ngram < 0:
        problems.append(f"data.overlap_ngram must be >= 0 (0: off), got {d.overlap_ngram}")
    if not isinstance(d.token_cache, int | float) or d.token_cache < 0:
        problems.append(
            f"data.token_cache must be a size in GiB >= 0 (0: off), got {d.token_cache!r}"
        )
    if d.eval_sets and d.holdout_bytes == 0:
        problems.append("data.eval_sets are scored within data.holdout_bytes: set it > 0")
    try:
        parse_chain(d.process, sorted(d.datasets))
    except ConfigError as e:
        problems.append(f"data.process: {e}")
    try:
        axis = parse_axis(d.compared)
    except ValueError as e:
        return [*problems, str(e)]
    if axis.kind is AxisKind.DATASET:
        if axis.dataset not in d.datasets:
            problems.append(
                f"data.compared={d.compared!r}: no dataset {axis.dataset!r}; use one of "
                f"{sorted(d.datasets)}"
            )
        others = [n for n in d.datasets if n != axis.dataset]
        fixed = d.eval_sets or config.eval.tasks or (others and d.holdout_bytes > 0)
        if not fixed:
            problems.append(
                f"data.compared={d.compared!r}: the variants would be scored only on "
                f"{axis.dataset!r}'s own held-out documents, which move with its version; give "
                "a yardstick that does not: data.eval_sets, eval.tasks, or another dataset "
                "(its held-out documents)"
            )
    return problems


def _pretokenized_problems(d: DataSection) -> list[str]:
    """``data.pretokenized``: each entry names a dataset or eval set, a known id width, and
    the run's tokenizer (token files' ids mean nothing to another one)."""
    problems: list[str] = []
    for name, section in sorted(d.pretokenized.items()):
        key = f"data.pretokenized.{name}"
        if name not in d.datasets and name not in d.eval_sets:
            problems.append(f"{key}: no dataset or eval set is named {name!r}; remove it")
        if section.dtype is not None:
            problems += choice_problem(f"{key}.dtype", section.dtype, TokenDtype)
        try:
            declared, run = load_tokenizer(section.tokenizer), load_tokenizer(d.tokenizer)
        except ZephonError as e:
            problems.append(f"{key}.tokenizer: {e}")
            continue
        if declared.fingerprint != run.fingerprint:
            problems.append(
                f"{key}.tokenizer={section.tokenizer!r} is not data.tokenizer={d.tokenizer!r} "
                "(their fingerprints differ): a run trains on one tokenizer's ids; set "
                "data.tokenizer to the files' tokenizer, or tokenize the text again"
            )
    return problems


def _task_problems(eval_section: EvalSection) -> list[str]:
    """What is wrong with the downstream task settings (the task names are looked up
    when the run is planned, :mod:`orchestrator.evaluation.task_lookup`)."""
    problems = []
    if eval_section.tasks and not eval_section.enable:
        problems.append("eval.tasks are scored by the evaluator: set eval.enable=true")
    if eval_section.task_dir is not None and not Path(eval_section.task_dir).is_dir():
        problems.append(
            f"eval.task_dir={eval_section.task_dir!r} is not a folder: give the folder of "
            "your task YAMLs"
        )
    if eval_section.task_limit is not None and eval_section.task_limit < 1:
        problems.append(f"eval.task_limit must be >= 1 or null, got {eval_section.task_limit}")
    return problems


def _mixture_problems(mixture: dict[str, float], datasets: list[str], key: str) -> list[str]:
    """Why the mixture at ``key`` does not weigh exactly ``datasets`` with valid weights ([]
    if it does, or if it is empty: equal shares). The pipeline refuses such a mixture too,
    but only once it has indexed the data; presets (``conf/mix/``) written for other
    datasets are caught here."""
    if not mixture:
        return []
    problems = []
    unknown = sorted(set(mixture) - set(datasets))
    if unknown:
        problems.append(
            f"{key} names unknown datasets {unknown}; known: {datasets}: remove their "
            "weights or add the datasets to data.datasets"
        )
    missing = [name for name in datasets if name not in mixture]
    if missing:
        problems.append(
            f"{key} gives no weight to datasets {missing}: give every dataset a weight "
            f"(0 leaves it out, e.g. {key}.{missing[0]}=0) or leave {key} empty "
            "for equal shares"
        )
    weights = list(mixture.values())
    if any(not math.isfinite(w) or w < 0 for w in weights):
        problems.append(f"{key} weights must be finite and >= 0, got {mixture}")
    elif sum(weights) <= 0:
        problems.append(f"{key} weights sum to zero; give at least one dataset a share")
    return problems


OWNED_FLAGS = {
    "module": "model.module",
    "config": "model.config",
    "dump-folder": "runs_root (and the run name)",
    "dataloader.spec": "data.* (the data section, which the data contract covers)",
    "tokenizer.": "data.tokenizer",
    "training.seq-len": "data.seq_len",
    "training.global-batch-size": "data.global_batch_size",
    "training.local-batch-size": "train.microbatch_size",
    "training.steps": "train.steps",
    "training.mixed-precision-param": "train.precision (float32 or bfloat16)",
    "debug.seed": "train.seed",
    "checkpoint.": "train.checkpoint_interval and train.keep_checkpoints",
    "validator.": "eval.enable and eval.interval",
    "optimizer.param-groups.0.optimizer-kwargs.lr": "train.lr",
    "lr-scheduler.warmup-steps": "train.warmup_steps",
    "lr-scheduler.decay-ratio": "train.decay_ratio",
    "lr-scheduler.decay-type": "train.decay_type",
    "lr-scheduler.min-lr-factor": "train.min_lr_factor",
}
"""TorchTitan flags Zephon sets from the experiment (a name ending in ``.``: the whole
section), and the key to set instead: in ``model.args`` they would change the run
behind its records' back."""


def _schedule_problems(t: TrainSection) -> list[str]:
    """The learning rate's and schedule fields' ranges (None keeps the model config's)."""
    problems = []
    if t.lr is not None and not (math.isfinite(t.lr) and t.lr > 0):
        problems.append(f"train.lr must be a number > 0, got {t.lr}")
    if t.lr_from_init and t.init_from is None:
        problems.append("train.lr_from_init needs train.init_from (the base run's checkpoint)")
    if t.lr_from_init and t.lr is not None:
        problems.append("train.lr_from_init and train.lr both set the peak learning rate: set one")
    if t.warmup_steps is not None and not 0 <= t.warmup_steps <= t.steps:
        problems.append(f"train.warmup_steps must be in [0, train.steps], got {t.warmup_steps}")
    if t.decay_ratio is not None and not 0 < t.decay_ratio <= 1:
        problems.append(f"train.decay_ratio must be in (0, 1], got {t.decay_ratio}")
    if t.decay_type is not None:
        problems += choice_problem("train.decay_type", t.decay_type, DecayType)
    if t.min_lr_factor is not None and not 0 <= t.min_lr_factor <= 1:
        problems.append(f"train.min_lr_factor must be in [0, 1], got {t.min_lr_factor}")
    return problems


def _owned_flags(args: list[str]) -> list[str]:
    problems = []
    for arg in args:
        if not arg.startswith("--"):
            continue
        flag = arg[2:].split("=", 1)[0].replace("_", "-")
        for owned, instead in OWNED_FLAGS.items():
            if flag == owned or (owned.endswith(".") and flag.startswith(owned)):
                problems.append(
                    f"model.args sets --{flag}, which Zephon sets from the experiment: "
                    f"set {instead} instead"
                )
    return problems


def dp_problems(config: ExperimentConfig, dp: int) -> list[str]:
    """Why ``dp`` data-parallel ranks cannot run ``config`` ([] if they can)."""
    d, t = config.data, config.train
    if dp < 1:
        return [f"dp must be >= 1, got {dp}"]
    nodes = max(config.resources.nodes, 1)
    if dp % nodes:  # every node runs dp / nodes ranks
        sizes = [k for k in divisors(d.lanes) if k % nodes == 0]
        instead = f"use one of {sizes}" if sizes else f"use a number of nodes dividing {d.lanes}"
        return [
            f"dp={dp} does not split into resources.nodes={nodes} equal nodes "
            f"(data.lanes={d.lanes}); {instead}"
        ]
    if d.lanes % dp:
        return [f"dp={dp} does not divide data.lanes={d.lanes}; use one of {divisors(d.lanes)}"]
    local = d.global_batch_size // dp
    if t.microbatch_size >= 1 and local % t.microbatch_size:
        return [
            f"dp={dp} gives {local} sequences per rank per step, not a multiple of "
            f"train.microbatch_size={t.microbatch_size}"
        ]
    return []


def split_step_problems(steps: int, split_step: Any) -> list[str]:
    """Why ``split_step`` cannot split a ``steps``-step schedule for an elasticity check
    (train to it, resume on another dp size; None: half-way); [] if it can."""
    if split_step is None:
        if steps >= 2:
            return []
        return ["an elasticity check needs train.steps >= 2 (it checkpoints half-way)"]
    if isinstance(split_step, bool) or not isinstance(split_step, int):
        return [f"split_step must be an integer or null, got {split_step!r}"]
    if not 1 <= split_step < steps:
        return [f"split_step must be in [1, {steps}) (train.steps), got {split_step}"]
    return []


def dp_sizes(config: ExperimentConfig) -> list[int]:
    """Every dp size that can run ``config``, smallest first: the divisors of its lanes that
    :func:`dp_problems` finds nothing wrong with."""
    return [k for k in divisors(config.data.lanes) if not dp_problems(config, k)]


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
