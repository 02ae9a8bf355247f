"""The comparison guard's data model: the runs it reads, its refusals and its verdict.

:class:`RunSummary` is one training run as the guard sees it, :class:`Refusal` one reason
(coded by :class:`RefusalCode`) to refuse comparing runs, and :class:`Comparison` the
verdict with one :class:`ComparisonRow` per variant. How the guard decides is in
``docs/design/guard.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from orchestrator.evaluation import MetricScores
from orchestrator.experiment.variant_axis import varied_label
from orchestrator.guard.decisions.looks import Design
from orchestrator.guard.signal_noise import YardstickNoise

SEED_SETTINGS = {
    "data.seed": "seed",
    "data.shuffle_seed": "shuffle.seed",
    "train.seed": "debug.seed",
}
"""What one seed of a seed replicate sets (data plan, shuffle, initial weights): each
experiment setting, and the recorded field it becomes (the contract's ``seed`` and
``shuffle.seed``, the recipe's ``debug.seed``)."""
SEED_FIELDS = tuple(SEED_SETTINGS.values())
"""The recorded fields a seed replicate sets (the values of :data:`SEED_SETTINGS`)."""

AGGREGATE = "aggregate"
"""Key of the aggregate score in :attr:`RunSummary.evals` entries."""
SHORT = 12
"""Hex digits shown of variants, fingerprints and digests."""


class RefusalCode(StrEnum):
    """Why the guard refuses a comparison; each value is the code's text in JSON and Markdown."""

    TOO_FEW_RUNS = "too_few_runs"
    """Fewer than two runs."""
    NO_DATA = "no_data"
    """A run lacks its batch digests, its data contract or its recipe."""
    DIVERGED_DATA = "diverged_data"
    """Two runs of one variant saw different data (or share no step to check)."""
    CONTRACT_MISMATCH = "contract_mismatch"
    """Two runs' data contracts differ in more than the mixture."""
    NO_COMMON_EVAL = "no_common_eval"
    """The runs were not scored at one common step, on the same domains and documents."""
    UNFINISHED = "unfinished"
    """A run did not finish its schedule."""
    RECIPE_MISMATCH = "recipe_mismatch"
    """Two runs were trained with different recipes."""
    INIT_MISMATCH = "init_mismatch"
    """Two runs of one recipe (and seed) started from different initial weights."""
    UNPAIRED_SEEDS = "unpaired_seeds"
    """Not every variant ran under every seed block."""
    SHARD_CHANGED = "shard_changed"
    """Two runs read different content for one shard of a dataset."""
    TRAINED_ON_SCORED = "trained_on_scored"
    """A run made before decontamination read copies of documents it scores."""


DECONTAMINATED = "decontaminate"
"""The removal step of scored documents (:class:`pipeline.processing.StepKind`)."""

HELD_OUT_SCORE = "held-out bits per byte (lower is better)"
""":attr:`Comparison.score` unless a task is decided on."""


@dataclass
class RunSummary:
    """What the guard needs to know about one training run."""

    run_id: str
    name: str
    variant: str
    contract_fingerprint: str
    contract: dict[str, Any]
    mixture: dict[str, float]
    digests: dict[int, str] = field(default_factory=dict)
    """Step -> global batch digest (hex)."""
    evals: dict[int, dict[str, float]] = field(default_factory=dict)
    """Step -> ``{"code": bpb, ..., "aggregate": bpb}`` (bits per byte, lower is better)."""
    dp_sizes: list[int] = field(default_factory=list)
    """Data-parallel size of each launch segment (``[2, 1]``: started on 2, resumed on 1)."""
    recipe_fingerprint: str = ""
    recipe: dict[str, Any] = field(default_factory=dict)
    """The recipe's fields, flattened (``optimizer.param_groups.0.optimizer_kwargs.lr``)."""
    init_sha256: str = ""
    """sha256 of the initial checkpoint the run started from."""
    parameters: int | None = None
    """The model's parameter count, as its plan recorded it (None: not recorded)."""
    status: str = ""
    """The orchestrator's status: ``succeeded``, ``failed``, ``interrupted``, ``running``."""
    planned_steps: int | None = None
    """``train.steps`` of the run's experiment."""
    folder: str = ""
    """The run folder (for the command that finishes an unfinished run)."""
    documents: dict[int, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    """Step -> dataset -> ``{"bits": [...], "bytes": [...]}`` per held-out document."""
    held_out: dict[int, dict[str, MetricScores]] = field(default_factory=dict)
    """Step -> held-out metric other than bits per byte -> its scores (``eval.jsonl``)."""
    task_items: dict[int, dict[str, dict[int, dict[str, float]]]] = field(default_factory=dict)
    """Step -> task -> item -> metric -> value (``zephon/tasks.jsonl``)."""
    task_higher_is_better: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Task -> metric -> whether higher is better (lm-eval's flags, from ``eval.jsonl``)."""
    shards_read: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    """Dataset -> shard index -> ``{"file", "sha256"}`` of every shard the run read."""
    varied: dict[str, Any] = field(default_factory=dict)
    """What its variant varies besides the mixture (``data.compared``): a dataset version or
    the processing chain (:mod:`orchestrator.experiment.variant_axis`); empty: the mixture."""
    records_read: dict[str, int] = field(default_factory=dict)
    """Dataset -> records the run read (trained on or removed; ``steps.jsonl``)."""
    removed: dict[str, dict[str, int]] = field(default_factory=dict)
    """Dataset -> step (``decontaminate``, a processing step) -> records it removed."""
    overlapping: dict[str, int] = field(default_factory=dict)
    """Dataset -> records trained on that share a word n-gram with a scored document
    (``data.overlap_ngram``; empty when not counted)."""
    repeated: dict[str, int] = field(default_factory=dict)
    """Dataset -> records read past its first epoch (read again; ``steps.jsonl``)."""
    ran_out: dict[str, int] = field(default_factory=dict)
    """Dataset -> lanes in which it ran out (``exhausted: stop``); absent: it never did."""
    data_config: dict[str, Any] = field(default_factory=dict)
    """The experiment's ``data`` section as recorded (``experiment.json``)."""
    device_seconds: float | None = None
    """Seconds the run took (MLflow's start to end) times its largest dp size; None: not
    recorded (what one more seed costs is estimated from it)."""

    @property
    def label(self) -> str:
        """Its variant as text: what it varies, then its mixture (:func:`mixture_label`)."""
        varied = varied_label(self.varied)
        return (
            f"{varied} · {mixture_label(self.mixture)}" if varied else mixture_label(self.mixture)
        )

    def data_read(self) -> dict[str, dict[str, Any]]:
        """Per dataset: records read, distinct records among them and the epochs they make
        (records read over distinct ones: 1.0, none read twice), the lanes it ran out in,
        removed by step and (when counted) trained on though overlapping a scored document
        (what ``compare --json`` shows)."""
        table = {}
        for d in sorted(set(self.records_read) | set(self.removed)):
            read = self.records_read.get(d, 0)
            unique = read - self.repeated.get(d, 0)
            table[d] = {
                "records_read": read,
                "unique_records": unique,
                "epochs": round(read / unique, 3) if unique > 0 else None,
                "ran_out_lanes": self.ran_out.get(d, 0),
                "removed": self.removed.get(d, {}),
                **({"overlapping": self.overlapping.get(d, 0)} if self.overlapping else {}),
            }
        return table

    def with_scores(
        self, step: int, scores: dict[str, tuple[list[float], list[float]]]
    ) -> RunSummary:
        """This run with more scores at ``step``: key -> (per-document values on a
        lower-is-better scale, their weights), each key's score their ratio (a task's items,
        another held-out metric's domains, decided on as held-out domains are)."""
        documents = {
            k: {"bits": values, "bytes": weights} for k, (values, weights) in scores.items()
        }
        evals = {k: sum(values) / sum(weights) for k, (values, weights) in scores.items()}
        return replace(
            self,
            documents={**self.documents, step: {**self.documents.get(step, {}), **documents}},
            evals={**self.evals, step: {**self.evals.get(step, {}), **evals}},
        )

    @property
    def seed(self) -> str:
        """The run's seed block: ``"data 0, shuffle 0, init 42"`` (runs of one block pair up)."""
        shuffle = (self.contract.get("shuffle") or {}).get("seed")
        return (
            f"data {self.contract.get('seed')}, shuffle {shuffle}, "
            f"init {self.recipe.get('debug.seed')}"
        )


def ordered_runs(runs: Iterable[RunSummary]) -> list[RunSummary]:
    """``runs`` by name, then run id: the deterministic order every rule and table uses."""
    return sorted(runs, key=lambda r: (r.name, r.run_id))


def mixture_label(mixture: dict[str, float]) -> str:
    """``"code=0.500 docs=0.300 i18n=0.200"``: shares by dataset name, three decimals."""
    return " ".join(f"{name}={float(share):.3f}" for name, share in sorted(mixture.items()))


@dataclass
class Refusal:
    """One reason the comparison is refused.

    ``runs`` holds the MLflow run ids concerned; ``message`` (names, not ids) says what
    is wrong and what to do; ``detail`` is machine-readable (e.g. ``{"step": 7,
    "digests": {name: digest}}`` or ``{"fields": {"seed": {name: value}}}``).
    """

    code: RefusalCode
    message: str
    runs: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The refusal as a JSON-serialisable dict, its code as plain text."""
        return {**asdict(self), "code": self.code.value}


@dataclass
class ComparisonRow:
    """One variant of an accepted comparison: its runs and scores at the eval step."""

    rank: int
    """1 for the lowest aggregate bits per byte, then 2, ..."""
    variant: str
    """The first :data:`SHORT` hex digits of ``variant_id``."""
    variant_id: str
    """The runs' variant under one seed block, else a hash of the variant across seeds."""
    mixture: str
    """The variant as text: what it varies (``data.compared``), then its mixture
    (:attr:`RunSummary.label`)."""
    shares: dict[str, float]
    """Dataset -> its share of the mixture, by dataset name."""
    replicates: int
    """How many runs the variant has."""
    seeds: int
    """How many seed blocks the variant ran under."""
    dp_sizes: str
    """The data-parallel sizes its runs ran on, ascending (``"1,2"``)."""
    bpb: dict[str, float]
    """Held-out domain -> mean bits per byte (over seed blocks of the blocks' means)."""
    aggregate_bpb: float
    """Mean over the decided-on domains, averaged like ``bpb``; what is ranked."""
    aggregate_se: float
    """The aggregate's standard error from the held-out sample of documents."""
    aggregate_range: float
    """Largest minus smallest aggregate over all replicates."""
    aggregate_std: float
    """Sample standard deviation of the aggregate over all replicates (0 for one)."""
    dp_range: float
    """The largest aggregate range among replicates of one seed block (same data: dp sizes)."""
    runs: list[str]
    """Its runs' names."""
    run_ids: list[str]
    """Its runs' MLflow run ids."""
    run_aggregates: list[float]
    """Each run's aggregate, in ``run_ids`` order."""
    vs_best: float
    """``aggregate_bpb`` minus the first row's."""
    tier: int
    """Variants of one tier cannot be told apart; tier 1 holds the first row."""
    best: bool
    """Decided better than every other variant."""
    initial_bpb: dict[str, float] = field(default_factory=dict)
    """Held-out domain -> mean bits per byte of its runs' initial models (step 0), averaged
    like ``bpb``, when every run scored one (``eval.initial``); empty otherwise."""

    def gain(self, domain: str) -> float | None:
        """The share of ``domain``'s initial bits per byte that training removed (None: no
        step-0 score). Bits per token fall by the same share: same tokens, same bytes."""
        start = self.initial_bpb.get(domain)
        return None if not start else 1.0 - self.bpb[domain] / start

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON-serialisable dict, keys in field order."""
        return asdict(self)


@dataclass
class Comparison:
    """The guard's verdict and, if accepted, one row per variant (best first) and the
    decision on every pair of variants (:mod:`orchestrator.guard.decisions`)."""

    accepted: bool
    refusals: list[Refusal]
    eval_step: int | None
    rows: list[ComparisonRow]
    """One per variant, lowest aggregate bits per byte first."""
    domains: list[str] = field(default_factory=list)
    """Held-out domains scored at ``eval_step``, in table order."""
    common_steps: int = 0
    """Fewest digest steps any two compared replicates shared (0 if no variant had two)."""
    contract_fingerprint: str | None = None
    """The contract fingerprint all runs share, when accepted."""
    recipe_fingerprint: str | None = None
    """The recipe fingerprint of the first run (all runs share it but for the seed)."""
    pairs: list[dict[str, Any]] = field(default_factory=list)
    """Every pair of rows ``(i, j)``, ``i < j``: :meth:`PairDecision.to_json` with ``a``/``b``
    the variants' 12-hex ids and ``a_mixture``/``b_mixture``."""
    seeds: list[str] = field(default_factory=list)
    """The seed blocks every variant ran under (one: training noise is not measured)."""
    threshold: float = 0.0
    """Smallest difference in aggregate bits per byte that counts as a decision."""
    confidence: float = 0.95
    """Confidence of the pairs' intervals."""
    family: str = "holm"
    """The correction of the pairs' decisions for their number (``holm``, ``bh``, ``none``:
    :class:`orchestrator.guard.decisions.Family`)."""
    decided_on: list[str] = field(default_factory=list)
    """The held-out domains whose mean is the aggregate ranked and decided on (all, unless
    the comparison was asked to decide on some), or one ``task:NAME:METRIC``."""
    score: str = HELD_OUT_SCORE
    """What the aggregate ranked and decided on is (:mod:`orchestrator.guard.tasks`)."""
    compared: str = "mixture"
    """What the variants may differ in (the runs' ``data.compared``)."""
    data_read: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Run name -> :meth:`RunSummary.data_read`: what each run read and removed, per dataset."""
    design: Design = Design.SEQUENTIAL
    """How the decisions are calibrated: one error budget for every look as seeds are added,
    or one pre-registered look (:mod:`~orchestrator.guard.decisions.looks`)."""
    max_seeds: int = 8
    """Sequential: the seed count by which the budget is spent."""
    look_level: float = 0.05
    """The error rate this look decided at (sequential: its share of ``1 - confidence``)."""
    sequence: str = ""
    """What every look of this comparison's sequence shares (contract, recipe, variants,
    score, threshold, design): looks differ only in their seeds."""
    look: int = 1
    """This look's number in its sequence (earlier looks: fewer seeds, found in MLflow)."""
    earlier_looks: list[dict[str, Any]] = field(default_factory=list)
    """``{"comparison_run_id", "seeds"}`` of each earlier look found, by seeds."""
    cost_per_seed: dict[str, Any] = field(default_factory=dict)
    """What one more seed costs: ``runs`` (one per variant) and ``device_hours``, estimated
    from the compared runs (None when their durations are not recorded)."""
    smooth_last: int = 1
    """Each run scored on the mean of its last this many held-out evals (1: the last eval
    alone; :mod:`orchestrator.guard.eval_smoothing`)."""
    smoothed_steps: list[int] = field(default_factory=list)
    """The eval steps whose scores were averaged (``[eval_step]`` when not smoothed; empty
    when refused)."""
    yardsticks: list[YardstickNoise] = field(default_factory=list)
    """Signal and noise of the decided-on score and of every other score all runs have
    (:mod:`orchestrator.guard.signal_noise`); empty when refused or for one variant."""

    @property
    def smallest_detectable(self) -> float | None:
        """The largest of the pairs' ``detectable``: a true difference this large would be
        decided (with 80% power) in every pair of this design (None: one seed, or one
        variant, decides nothing)."""
        detectable = [p["detectable"] for p in self.pairs]
        return None if None in detectable else max(detectable, default=None)

    @property
    def best_row(self) -> ComparisonRow | None:
        """The row decided better than every other, if there is one."""
        return next((row for row in self.rows if row.best), None)

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON-serialisable dict."""
        best_row = self.best_row
        decontaminated = {
            run: {d: counts["removed"].get(DECONTAMINATED, 0) for d, counts in read.items()}
            for run, read in self.data_read.items()
        }
        return {
            "accepted": self.accepted,
            "verdict": "accepted" if self.accepted else "refused",
            "eval_step": self.eval_step,
            "domains": list(self.domains),
            "contract_fingerprint": self.contract_fingerprint,
            "recipe_fingerprint": self.recipe_fingerprint,
            "common_steps": self.common_steps,
            "refusals": [refusal.to_json() for refusal in self.refusals],
            "rows": [row.to_json() for row in self.rows],
            "pairs": self.pairs,
            "seeds": self.seeds,
            "threshold": self.threshold,
            "confidence": self.confidence,
            "family": self.family,
            "smallest_detectable": self.smallest_detectable,
            "decided_on": self.decided_on,
            "score": self.score,
            "best": best_row.variant if best_row else None,
            "compared": self.compared,
            "data_read": self.data_read,
            "decontaminated": decontaminated,
            "design": str(self.design),
            "max_seeds": self.max_seeds,
            "look": {
                "number": self.look,
                "seeds": len(self.seeds),
                "level": self.look_level,
                "sequence": self.sequence,
                "earlier": self.earlier_looks,
            },
            "cost_per_seed": self.cost_per_seed,
            "smooth_last": self.smooth_last,
            "smoothed_steps": self.smoothed_steps,
            "signal_noise": [y.to_json() for y in self.yardsticks],
        }
