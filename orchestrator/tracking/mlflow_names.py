"""Names Zephon gives things in MLflow: its training runs, and their tags, params, metrics
and artifacts.

Tracking (:mod:`orchestrator.tracking.tracker`) writes them; the comparison guard
(:mod:`orchestrator.guard`), sweeps and agents read them. Changing one is a
format change for every stored run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from orchestrator.evaluation.metrics import DEFAULT_METRIC
from orchestrator.experiment.run_record import ExperimentRecord

# -- tags --------------------------------------------------------------------------------------
TAG_KIND = "zephon.kind"
"""``run`` (one training run), ``comparison`` (a guard verdict), ``sweep`` (a sweep's parent)
or ``answer`` (a sweep's job answered from an earlier run: a link, no metrics)."""
TAG_IDENTITY = "zephon.identity"
"""The run's identity: variant, recipe, initial checkpoint and eval settings
(:mod:`orchestrator.run.identity_index`); an experiment of the same identity is answered from it."""
TAG_ANSWERED_FROM = "zephon.answered_from"
"""On ``answer`` links: the MLflow run id of the earlier run that answered the job."""
TAG_CONTRACT = "zephon.contract_fingerprint"
"""SHA-256 of the data contract without the mixture."""
TAG_VARIANT = "zephon.variant"
"""SHA-256 of the contract fingerprint and the canonical mixture."""
TAG_RECIPE = "zephon.recipe_fingerprint"
"""SHA-256 of the recipe: what decides the training arithmetic apart from the data
(:mod:`orchestrator.run.recipe`)."""
TAG_INIT = "zephon.init_sha256"
"""SHA-256 of the initial checkpoint the run started from (:mod:`orchestrator.run.initial_weights`)."""
TAG_DATA_FINGERPRINT = "zephon.data_fingerprint"
"""The digest chain after the last finished step."""
TAG_STEPS = "zephon.steps"
"""Number of finished steps the data fingerprint covers."""
TAG_DP_SIZE = "zephon.dp_size"
"""Data-parallel size of the latest launch segment."""
TAG_DP_HISTORY = "zephon.dp_sizes"
"""Data-parallel sizes of all segments, comma-separated (``2,1`` = started on 2, resumed on 1)."""
TAG_DEVICE = "zephon.device"
"""``cpu`` or ``cuda:<model name>``."""
TAG_PRECISION = "zephon.precision"
"""``float32`` or ``bfloat16``: the precision the run trained in (runs in different ones are
not replicates)."""
TAG_VERSIONS = "zephon.versions"
"""JSON object of package versions (zephon, torch, torchtitan, mlflow, tiktoken)."""
TAG_GIT = "zephon.git_revision"
"""``git describe --always --dirty`` of the working tree, or ``unknown``."""
TAG_RUN_FOLDER = "zephon.run_folder"
"""Absolute path of the run folder."""
TAG_SWEEP = "zephon.sweep"
"""Name of the sweep a run belongs to (absent for single runs)."""
TAG_STATUS = "zephon.status"
"""Run status as the orchestrator saw it: running, succeeded, failed, interrupted."""
TAG_VERDICT = "zephon.verdict"
"""On comparison runs: ``accepted`` or ``refused``."""
TAG_BEST = "zephon.best"
"""On accepted comparison runs: the best variant's mixture, or ``none`` when no variant is
decided better than every other."""
TAG_DECISIONS = "zephon.decisions"
"""On accepted comparison runs: one line per pair of variants, ``<a> vs <b>: <decision>
<difference> [<lo>, <hi>]`` (the full record: ``comparison.json``)."""
TAG_COMPARED = "zephon.compared_runs"
"""On comparison runs: the compared MLflow run ids, comma-separated."""
TAG_SEQUENCE = "zephon.sequence"
"""On accepted comparison runs: what the looks of one sequence share (contract, recipe,
variants, score, design); a later look, with more seeds, finds the earlier ones by it."""
TAG_LOOK = "zephon.look"
"""On accepted comparison runs: the look's number in its sequence."""
TAG_LOOK_SEEDS = "zephon.look_seeds"
"""On accepted comparison runs: the seeds the look compared."""
TAG_JOB_ID = "zephon.job_id"
"""On runs of the job service: the job's id."""
TAG_SUBMITTER = "zephon.submitter"
"""On runs of the job service: who submitted the job."""
TAG_PARENT_RUN = "mlflow.parentRunId"
"""MLflow's own tag: the parent run (a sweep's, for its jobs and comparison)."""
TAG_NOTE = "mlflow.note.content"
"""MLflow's own tag: the run's description, shown on its page (markdown)."""

# -- params ------------------------------------------------------------------------------------
PARAM_MIX_PREFIX = "mix."
"""``mix.<dataset>``: the canonical token share of each dataset."""
PARAM_PRECISION = "train.precision"
"""The resolved ``train.precision`` (the same value as the tag ``zephon.precision``)."""
PARAM_CONTRACT_PREFIX = "data."
"""``data.<dotted contract field>``: every contract field, flattened (see ``flatten``)."""

# -- metrics -----------------------------------------------------------------------------------
METRIC_LOSS = "loss"
METRIC_TOKENS_PER_S = "tokens_per_s"
METRIC_DATA_WAIT = "data_wait_s"
METRIC_EVAL_PREFIX = "eval/"
"""``eval/<domain>_<metric>`` per held-out domain and metric (``eval/code_bpb``), and
``eval/aggregate_<metric>`` (the mean over the domains)."""
METRIC_EVAL_AGGREGATE = f"{METRIC_EVAL_PREFIX}aggregate_{DEFAULT_METRIC}"
METRIC_EVAL_SECONDS = f"{METRIC_EVAL_PREFIX}seconds"
"""How long the held-out eval of a step took."""
METRIC_TASK_PREFIX = "task/"
"""``task/<task>/<metric>`` per downstream task metric (``eval.tasks``)."""

# -- artifacts ---------------------------------------------------------------------------------
ARTIFACT_DIR = "zephon"
"""Artifacts of a run: ``zephon/experiment.json``, ``zephon/steps.jsonl``, ``zephon/eval.jsonl``."""
ARTIFACT_EXPERIMENT = "zephon/experiment.json"
ARTIFACT_STEPS = "zephon/steps.jsonl"
ARTIFACT_EVAL = "zephon/eval.jsonl"
ARTIFACT_TASKS = "zephon/tasks.jsonl"


# -- run names ---------------------------------------------------------------------------------
MAX_RUN_NAME = 250
"""MLflow's run name column holds 250 characters (PostgreSQL enforces it; SQLite does not)."""


def run_display_name(experiment: ExperimentRecord, *, dp: int | None = None) -> str:
    """The MLflow run name of a training run: what it varies, not when it started.

    ``<experiment name>-<variant>-s<seed>-dp<dp>`` from its ``experiment.json`` record, e.g.
    ``main-code0.50-docs0.30-unicode0.20-s0-dp2``: the variant is :func:`variant_label` (the
    mixture and any compared dataset version); the seed is the
    one seed a replicate sets (``data.seed``, ``data.shuffle_seed``, ``train.seed``), or all
    three as ``s<data>.<shuffle>.<train>`` where they differ; ``dp`` is the data-parallel
    size the run started on. Parts the record lacks are left out; a name longer than
    MLflow's :data:`MAX_RUN_NAME` has its variant cut and a hash of it appended.

    Display only: the run folder keeps its own (unique) name, in the tag
    ``zephon.run_folder``; replicates of one variant, seed and dp share a run name.
    """
    variant = variant_label(experiment)
    tail = []
    seeds = experiment.seeds
    if all(seed is not None for seed in seeds):
        tail.append(f"s{seeds[0]}" if len(set(seeds)) == 1 else "s" + ".".join(map(str, seeds)))
    if dp is not None:
        tail.append(f"dp{dp}")
    head = str(experiment.name or "run")
    room = MAX_RUN_NAME - len("-".join([head, "", *tail]))
    if len(variant) > room:  # many datasets: cut, and a hash of the whole keeps it apart
        digest = hashlib.sha256(variant.encode()).hexdigest()[:8]
        variant = f"{variant[: max(room - 9, 0)]}~{digest}"
    return "-".join([head, *([variant] if variant else []), *tail])[:MAX_RUN_NAME]


def variant_label(experiment: ExperimentRecord) -> str:
    """What a run's variant is, short: :func:`short_mixture` of its mixture, then what else
    it varies (``data.compared``, recorded in ``varied``): a dataset's version as
    ``NAME@<fingerprint[:8]>``, a processing chain as ``process-<step>+<step>`` (or
    ``process-none``): ``code0.50-docs0.50-web@3f2a9c1b``."""
    parts = [short_mixture(experiment.mixture)]
    for key, value in sorted(experiment.varied.items()):
        if key.startswith("data.datasets.") and isinstance(value, dict):
            name = key.removeprefix("data.datasets.")
            parts.append(f"{name}@{str(value.get('fingerprint') or '')[:8]}")
        elif key == "data.process" and isinstance(value, list):
            steps = [str(step.get("step")) for step in value if isinstance(step, dict)]
            parts.append("process-" + ("+".join(steps) or "none"))
    return "-".join(p for p in parts if p)


def short_mixture(mixture: Mapping[str, object]) -> str:
    """``code0.50-docs0.30-unicode0.20``: each dataset's share by name, 2 to 4 decimals."""
    return "-".join(f"{name}{_short_share(share)}" for name, share in sorted(mixture.items()))


def _short_share(share: object) -> str:
    whole, _, decimals = f"{float(str(share)):.4f}".partition(".")
    return f"{whole}.{decimals.rstrip('0').ljust(2, '0')}"


def eval_metric(domain: str, metric: str = DEFAULT_METRIC) -> str:
    """MLflow metric name of a domain's held-out ``metric`` (default: bits per byte)."""
    return f"{METRIC_EVAL_PREFIX}{domain}_{metric}"


def eval_aggregate_metric(metric: str = DEFAULT_METRIC) -> str:
    """MLflow metric name of a held-out ``metric``'s mean over the domains."""
    return f"{METRIC_EVAL_PREFIX}aggregate_{metric}"


def task_metric(task: str, metric: str) -> str:
    """MLflow metric name of a downstream task's metric."""
    return f"{METRIC_TASK_PREFIX}{task}/{metric}"


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """Nested dicts and lists as ``{"a.b": leaf, "datasets.code.fingerprint": ...}``.

    Lists of dicts with a ``name`` key are keyed by that name (dataset entries), other
    lists by index, so a field's key does not depend on list order where names exist.
    """
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        items = [(str(v["name"]), {k: x for k, x in v.items() if k != "name"}) for v in value]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix: value}
    flat: dict[str, object] = {}
    for key, inner in items:
        flat.update(flatten(inner, f"{prefix}.{key}" if prefix else key))
    return flat


def metric_key(name: str) -> str:
    """``name`` restricted to the characters MLflow accepts in keys."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]+", "_", name).strip("_")
