"""The comparison guard's rules: compare runs that differ only in their data mixture, or refuse to.

Researchers compare training runs whose data differs in the mixture and nothing
else. A table of scores is only meaningful if that is actually true, so before
any score is shown the guard checks the runs' records and refuses, with the
reason and what to do about it, when it is not. The rules:

1. **Enough runs with data.** Fewer than two runs: ``too_few_runs``. A run
   without per-step batch digests (or without its experiment record, so its
   contract is unknown, or without a recorded recipe): ``no_data``; such a run
   takes no part in rules 2, 3 and 6.
   **Finished runs.** A run that did not finish its schedule (status other than
   succeeded, or fewer finished steps than ``train.steps``: killed, failed,
   still running) is ``unfinished``, with its state and the command that
   finishes it: its scores are not those of its recipe.
2. **Replicates saw the same data.** Runs of the same *variant* (same contract
   and mixture) must have identical global batch digests on every step they
   both finished. Within a variant every run is compared with the variant's
   first run (runs are ordered by name, then run id, so the choice is
   deterministic). A mismatch is ``diverged_data`` and names the first
   divergent step and both digests: the infrastructure changed the data
   (dataset files, Zephon version), which the data contract forbids. Two runs
   without any common step cannot be checked and are refused the same way.
3. **Variants differ only in the mixture.** Runs of different variants must
   have equal data contracts apart from the mixture: ``flatten(contract)`` is
   compared field by field (a ``mixture`` key inside the contract, if there is
   one, is ignored). Each variant's first run is compared with the first run of
   the first variant; each further run of a variant with its variant's first
   run. Any differing dotted field is ``contract_mismatch`` and names each
   field and both values; equal contracts with different contract fingerprints
   are refused too (naming ``contract_fingerprint``), since the fingerprint
   definition itself then differs.
4. **Scores come from one common step.** Scores are read at the last held-out
   eval step that every run evaluated, and only if every run evaluated the same
   domains there; otherwise ``no_common_eval``.
5. **Same recipe, same initial weights.** Every run must have the recipe of
   the first run (:mod:`orchestrator.run.recipe`: model, optimizer, learning
   rate schedule, steps, init seed, precision, any TorchTitan flag, versions),
   compared field by field: ``recipe_mismatch`` names each differing field and
   both values. Equal recipes must have started from the same initial
   checkpoint (its sha256): ``init_mismatch``. A run resumed with more steps
   records the step it was extended at, which counts as a recipe field.
6. **Seeds pair up.** Runs may differ in their seeds (``data.seed``,
   ``data.shuffle_seed``, ``train.seed``: :data:`SEED_FIELDS`) only in a paired
   design: two or more variants, each run under every seed block, so that
   variant A under seed s has a partner B under seed s (same initial weights,
   same data order). Otherwise the seeds are compared like any other field
   (rules 3 and 5), and incomplete blocks are ``unpaired_seeds``. Rule 5's
   initial checkpoint is then checked within each seed block.
7. **All reasons at once.** Every refusal is collected (not only the first);
   the verdict is "refused" if there is any, and a refused comparison shows no
   scores.

An accepted comparison has one row per variant, best (lowest aggregate bits
per byte) first: the mixture, the number of replicates and seed blocks, the dp
sizes they ran on, the mean score per domain and in aggregate (mean over seed
blocks of the mean over a block's replicates), and the replicate spread of the
aggregate (range and sample standard deviation, 0 for one replicate), and the
difference of each aggregate to the best one (``vs best``). Every pair of
variants is decided (:mod:`orchestrator.guard.decisions`): the difference, its
interval from the per-document scores paired by seed, and ``a_better``,
``b_better`` or ``cannot_tell``; variants that cannot be told apart share a
tier, and the first row is ``best`` only if it is decided better than every
other. Rule 4 therefore also needs every run's per-document scores, on the same
documents.

Runs are read from MLflow with the names in :mod:`orchestrator.tracking.names`
(:func:`load_runs`, :func:`find_run_ids`), and a verdict is logged back as a
run of its own (:func:`log_comparison`) with ``comparison.json``,
``comparison.md`` and, when accepted, ``comparison.png`` (:func:`plot`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from orchestrator.guard import decisions
from orchestrator.tracking.names import flatten

TOO_FEW_RUNS = "too_few_runs"
NO_DATA = "no_data"
DIVERGED_DATA = "diverged_data"
CONTRACT_MISMATCH = "contract_mismatch"
NO_COMMON_EVAL = "no_common_eval"
UNFINISHED = "unfinished"
RECIPE_MISMATCH = "recipe_mismatch"
INIT_MISMATCH = "init_mismatch"
UNPAIRED_SEEDS = "unpaired_seeds"

SEED_FIELDS = ("seed", "shuffle.seed", "debug.seed")
"""The fields a seed replicate sets (data plan, shuffle, initial weights): the contract's
``seed`` and ``shuffle.seed``, the recipe's ``debug.seed``."""

AGGREGATE = "aggregate"
"""Key of the aggregate score in :attr:`RunSummary.evals` entries."""
SHORT = 12
"""Hex digits shown of variants, fingerprints and digests."""
ABSENT = "<absent>"
"""Value shown for a contract field one of two runs does not have."""


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
    status: str = ""
    """The orchestrator's status: ``succeeded``, ``failed``, ``interrupted``, ``running``."""
    planned_steps: int | None = None
    """``train.steps`` of the run's experiment."""
    folder: str = ""
    """The run folder (for the command that finishes an unfinished run)."""
    documents: dict[int, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    """Step -> dataset -> ``{"bits": [...], "bytes": [...]}`` per held-out document."""

    @property
    def seed(self) -> str:
        """The run's seed block: ``"data 0, shuffle 0, init 42"`` (runs of one block pair up)."""
        shuffle = (self.contract.get("shuffle") or {}).get("seed")
        return (
            f"data {self.contract.get('seed')}, shuffle {shuffle}, "
            f"init {self.recipe.get('debug.seed')}"
        )


@dataclass
class Refusal:
    """One reason the comparison is refused.

    ``runs`` holds the MLflow run ids concerned; ``message`` (names, not ids) says what
    is wrong and what to do; ``detail`` is machine-readable (e.g. ``{"step": 7,
    "digests": {name: digest}}`` or ``{"fields": {"seed": {name: value}}}``).
    """

    code: str
    """``diverged_data``, ``contract_mismatch``, ``recipe_mismatch``, ``init_mismatch``,
    ``unpaired_seeds``, ``unfinished``, ``no_data``, ``no_common_eval`` or ``too_few_runs``."""
    message: str
    runs: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """The guard's verdict and, if accepted, one row per variant (best first) and the
    decision on every pair of variants (:mod:`orchestrator.guard.decisions`)."""

    accepted: bool
    refusals: list[Refusal]
    eval_step: int | None
    rows: list[dict[str, Any]]
    """Per variant: ``rank``, ``variant`` (12 hex), ``variant_id``, ``mixture`` (canonical
    text), ``shares``, ``replicates``, ``seeds`` (seed blocks), ``dp_sizes`` ("1,2"), ``bpb``
    (domain -> mean), ``aggregate_bpb``, ``vs_best`` (its difference to the first row's),
    ``aggregate_se`` (the aggregate's standard error from the held-out sample of documents),
    ``aggregate_range``, ``aggregate_std`` (over all replicates), ``dp_range`` (the largest
    range among replicates of one seed, which saw the same data: dp sizes), ``tier`` (variants of one tier cannot be told
    apart), ``best`` (decided better than every other variant), ``runs`` (names),
    ``run_ids``."""
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
    decided_on: list[str] = field(default_factory=list)
    """The held-out domains whose mean is the aggregate ranked and decided on (all, unless
    the comparison was asked to decide on some)."""

    @property
    def smallest_detectable(self) -> float | None:
        """The largest of the pairs' ``detectable``: a true difference this large would be
        decided (with 80% power) in every pair of this design (None: one seed, or one
        variant, decides nothing)."""
        detectable = [p["detectable"] for p in self.pairs]
        return None if None in detectable else max(detectable, default=None)

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON-serialisable dict."""
        return {
            "accepted": self.accepted,
            "verdict": "accepted" if self.accepted else "refused",
            "eval_step": self.eval_step,
            "domains": list(self.domains),
            "contract_fingerprint": self.contract_fingerprint,
            "recipe_fingerprint": self.recipe_fingerprint,
            "common_steps": self.common_steps,
            "refusals": [asdict(r) for r in self.refusals],
            "rows": self.rows,
            "pairs": self.pairs,
            "seeds": self.seeds,
            "threshold": self.threshold,
            "confidence": self.confidence,
            "smallest_detectable": self.smallest_detectable,
            "decided_on": self.decided_on,
            "best": next((row["variant"] for row in self.rows if row["best"]), None),
        }

    def to_markdown(self) -> str:
        """A readable report: the table and decisions if accepted, the reasons if refused."""
        if not self.accepted:
            lines = [
                f"## Comparison refused ({len(self.refusals)} reason{'s' if len(self.refusals) != 1 else ''})",
                "",
            ]
            lines += [f"- **{r.code}**: {r.message}" for r in self.refusals]
            return "\n".join(lines) + "\n"
        header = ["rank", "tier", "variant", "mixture", "n", "seeds", "dp sizes"]
        header += [f"{d} bpb" for d in self.domains]
        header += ["aggregate bpb", "± docs", "vs best", "dp range", "std", "runs"]
        lines = [
            "## Comparison accepted",
            "",
            f"Held-out bits per byte (lower is better) at eval step {self.eval_step}, the last step "
            "every run evaluated; means over replicates, the aggregate's standard error from the "
            "held-out documents (± docs), the largest range of the aggregate among replicates of "
            "one seed (dp range: they saw the same data) and its standard deviation over all "
            "replicates (std)"
            f"{self._aggregate_of()}. "
            "Variants of one tier cannot be told apart; **best** only if decided better than "
            "every other variant.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(_align(h) for h in header) + "|",
        ]
        for row in self.rows:
            cells = [
                str(row["rank"]),
                f"{row['tier']}{' **best**' if row['best'] else ''}",
                f"`{row['variant']}`",
                row["mixture"],
                str(row["replicates"]),
                str(row["seeds"]),
                row["dp_sizes"],
            ]
            cells += [f"{row['bpb'][d]:.4f}" for d in self.domains]
            cells += [
                f"**{row['aggregate_bpb']:.4f}**",
                _small(row["aggregate_se"]),
                f"{row['vs_best']:+.4f}",
                _small(row["dp_range"]),
                _small(row["aggregate_std"]),
                ", ".join(row["runs"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", *self._decisions_markdown(), "", self._checked()]
        return "\n".join(lines) + "\n"

    def _aggregate_of(self) -> str:
        if self.decided_on == self.domains:
            return ""
        return f"; the aggregate (ranked and decided on) is the mean over {', '.join(self.decided_on)} only"

    def _decisions_markdown(self) -> list[str]:
        if not self.pairs:
            return ["One variant (its replicates only): nothing to decide."]
        confidence = f"{self.confidence:.0%}"
        lines = [
            f"### Decisions (threshold {self.threshold:g} bits/byte, {confidence} intervals)",
            "",
            f"| a | b | a - b | {confidence} interval | decision |",
            "|---|---|---:|---|---|",
        ]
        for pair in self.pairs:
            lo, hi = pair["interval"]
            lines.append(
                f"| `{pair['a']}` {pair['a_mixture']} | `{pair['b']}` {pair['b_mixture']} | "
                f"{pair['difference']:+.4f} | [{lo:+.4f}, {hi:+.4f}] | **{pair['decision']}** |"
            )
        methods = sorted({pair["method"] for pair in self.pairs})
        detectable = (
            f"Smallest difference this design detects (80% power, every pair): "
            f"{self.smallest_detectable:.4f} bits/byte."
            if self.smallest_detectable is not None
            else "One seed decides nothing: rerun with hydra.sweeper.replicate_seeds=[0,1,2]."
        )
        lines += ["", f"Method: {'; '.join(methods)}. {detectable}"]
        return lines

    def _checked(self) -> str:
        agreed = (
            f"every replicate of a variant had the same global batch digests over its "
            f"{self.common_steps} common steps or more"
            if self.common_steps
            else "no variant had two replicates to cross-check"
        )
        seeds = (
            f"the seed ({len(self.seeds)} seed blocks, each run by every variant: {'; '.join(self.seeds)})"
            if len(self.seeds) > 1
            else "nothing else"
        )
        return (
            f"Checked: every run finished its schedule; all data fingerprints agreed ({agreed}); "
            f"all runs share data contract `{(self.contract_fingerprint or '')[:SHORT]}` (data "
            f"files, tokenizer, batch layout, seeds) and recipe "
            f"`{(self.recipe_fingerprint or '')[:SHORT]}` (model, optimizer, schedule, steps, "
            "init seed, precision, TorchTitan flags, versions) but for "
            f"{seeds}, and runs of one seed started from one initial checkpoint. What differs "
            "between variants is the mixture; within a variant, the dp size and micro-batch size "
            "at most."
        )


def _align(header: str) -> str:
    numeric = ("rank", "n", "seeds", "± docs", "vs best", "dp range", "std")
    return "---:" if header in numeric or header.endswith("bpb") else "---"


def _small(value: float) -> str:
    """A spread: 4 decimals, or two significant digits below 1e-4 (replicates agree closely)."""
    return f"{value:.4f}" if value == 0 or value >= 1e-4 else f"{value:.1e}"


# -- the guard ---------------------------------------------------------------------------------


def mixture_label(mixture: dict[str, float]) -> str:
    """``"code=0.500 docs=0.300 i18n=0.200"``: shares by dataset name, three decimals."""
    return " ".join(f"{name}={float(share):.3f}" for name, share in sorted(mixture.items()))


def ordered_runs(runs: Iterable[RunSummary]) -> list[RunSummary]:
    return sorted(runs, key=lambda r: (r.name, r.run_id))


def _labels(runs: list[RunSummary]) -> dict[str, str]:
    """Run id -> a readable, unique label: the name, with a short id where names repeat."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.name] = counts.get(run.name, 0) + 1
    return {
        r.run_id: r.name
        if counts[r.name] == 1 and r.name
        else f"{r.name or 'run'} ({r.run_id[:8]})"
        for r in runs
    }


def _contract_fields(contract: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    flat = flatten({k: v for k, v in contract.items() if k != "mixture"})
    return {
        k: v
        for k, v in flat.items()
        if k != "mixture" and not k.startswith("mixture.") and k not in ignore
    }


def _arm(run: RunSummary) -> str:
    """What a variant is across seeds: its contract but for the seeds, and its mixture."""
    return json.dumps(
        [_contract_fields(run.contract, SEED_FIELDS), mixture_label(run.mixture)], sort_keys=True
    )


def _by_arm(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(_arm(run), []).append(run)
    return groups


def _seed_design(runs: list[RunSummary]) -> tuple[bool, Refusal | None]:
    """Whether the runs form a paired seed design (seeds may then differ), or why not.

    Paired: two or more variants, one of them run under two or more seed blocks, and
    every variant under every block, so each variant has a partner of the same seed.
    Blocks that are not complete are ``unpaired_seeds``. Without a variant replicated
    over seeds, or with a single variant, the seed fields are compared like any other.
    """
    arms = _by_arm(runs)
    blocks = {arm: sorted({r.seed for r in group}) for arm, group in arms.items()}
    every = sorted({b for bs in blocks.values() for b in bs})
    if len(arms) < 2 or max((len(bs) for bs in blocks.values()), default=0) < 2:
        return False, None  # no variant replicated over seeds: seeds are ordinary fields
    incomplete = {arm: bs for arm, bs in blocks.items() if bs != every}
    if not incomplete:
        return True, None
    missing = {
        mixture_label(arms[arm][0].mixture): sorted(set(every) - set(bs))
        for arm, bs in incomplete.items()
    }
    listed = "; ".join(f"{mix} lacks {', '.join(seeds)}" for mix, seeds in missing.items())
    return True, Refusal(
        UNPAIRED_SEEDS,
        f"the runs use {len(every)} seed blocks but not every variant ran under each ({listed}): "
        "a variant's score under one seed would be compared with another's under another seed. "
        "Run the missing seeds (hydra.sweeper.replicate_seeds) or leave those runs out.",
        [r.run_id for arm in incomplete for r in arms[arm]],
        {"seeds": every, "missing": missing},
    )


def _by_variant(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(run.variant, []).append(run)
    return groups


def _no_data(
    runs: list[RunSummary], label: dict[str, str]
) -> tuple[list[Refusal], list[RunSummary]]:
    refusals: list[Refusal] = []
    usable: list[RunSummary] = []
    for run in runs:
        missing = []
        if not run.digests:
            missing.append("no per-step batch digests (zephon/steps.jsonl)")
        if not run.contract or not run.variant:
            missing.append("no data contract / variant (zephon/experiment.json)")
        elif not run.recipe_fingerprint:
            missing.append("no recipe (recorded before Zephon compared recipes)")
        if missing:
            refusals.append(
                Refusal(
                    NO_DATA,
                    f"{label[run.run_id]} has {' and '.join(missing)}, so its data cannot be "
                    "checked; let it finish at least one step and sync its tracking, or leave it "
                    "out of the comparison.",
                    [run.run_id],
                    {"run": label[run.run_id], "missing": missing},
                )
            )
        else:
            usable.append(run)
    return refusals, usable


def _diverged(ref: RunSummary, run: RunSummary, label: dict[str, str]) -> Refusal | None:
    """``diverged_data`` if two runs of one variant saw different data, else None."""
    a, b = label[ref.run_id], label[run.run_id]
    common = sorted(set(ref.digests) & set(run.digests))
    if not common:
        return Refusal(
            DIVERGED_DATA,
            f"{a} and {b} are the same variant but have no common steps "
            f"({a}: steps {_span(ref.digests)}, {b}: steps {_span(run.digests)}), so their data "
            "cannot be cross-checked; let both run past a common step, or leave one out.",
            [ref.run_id, run.run_id],
            {"step": None, "reason": "no common steps"},
        )
    for step in common:
        if ref.digests[step] != run.digests[step]:
            da, db = ref.digests[step][:SHORT], run.digests[step][:SHORT]
            return Refusal(
                DIVERGED_DATA,
                f"{a} and {b} are the same variant but their data differs from step {step} on "
                f"(global batch digest {da} vs {db}): the infrastructure changed the data, which "
                "the contract forbids — check the dataset files and the zephon version of both "
                "runs, then re-run one of them.",
                [ref.run_id, run.run_id],
                {"step": step, "digests": {a: ref.digests[step], b: run.digests[step]}},
            )
    return None


def _span(digests: dict[int, str]) -> str:
    return f"{min(digests)}-{max(digests)}" if digests else "none"


def _mismatch(
    ref: RunSummary, run: RunSummary, label: dict[str, str], ignore: tuple[str, ...]
) -> Refusal | None:
    """``contract_mismatch`` if two runs' contracts differ in more than the mixture (and the
    ``ignore`` fields), else None."""
    a, b = label[ref.run_id], label[run.run_id]
    fields = _differing(
        _contract_fields(ref.contract, ignore), _contract_fields(run.contract, ignore), a, b
    )
    if fields:
        parts = "; ".join(
            f"{k}: {_show(v[a])} ({a}) vs {_show(v[b])} ({b})" for k, v in fields.items()
        )
        fixes = ", ".join(f"{k}={_show(v[a])}" for k, v in list(fields.items())[:3])
        more = f" (and {len(fields) - 3} more fields)" if len(fields) > 3 else ""
        same = "variant" if ref.variant == run.variant else "comparison"
        return Refusal(
            CONTRACT_MISMATCH,
            f"{a} and {b} differ in more than the mixture — {parts}. Scores of this {same} would "
            "mix up the mixture's effect with these changes; compare runs with the same contract "
            f"fingerprint, or re-run {b} with {fixes}{more}.",
            [ref.run_id, run.run_id],
            {"fields": fields},
        )
    if ref.contract_fingerprint != run.contract_fingerprint and ref.seed == run.seed:
        ca, cb = ref.contract_fingerprint[:SHORT], run.contract_fingerprint[:SHORT]
        return Refusal(
            CONTRACT_MISMATCH,
            f"{a} and {b} record equal contracts but different contract_fingerprint ({ca} ({a}) vs "
            f"{cb} ({b})): the fingerprint was computed differently (another zephon version?) or a "
            "record was edited; re-run one of them with the other's zephon version.",
            [ref.run_id, run.run_id],
            {
                "fields": {
                    "contract_fingerprint": {
                        a: ref.contract_fingerprint,
                        b: run.contract_fingerprint,
                    }
                }
            },
        )
    return None


def _unfinished(run: RunSummary, label: dict[str, str]) -> Refusal | None:
    """``unfinished`` if ``run`` did not complete its schedule, else None."""
    done = max(run.digests, default=0)
    planned = run.planned_steps
    if run.status == "succeeded" and (planned is None or done >= planned):
        return None
    name = label[run.run_id]
    state = run.status or "unknown"
    finish = f"zephon resume {run.folder}" if run.folder else "zephon resume <its run folder>"
    return Refusal(
        UNFINISHED,
        f"{name} did not finish its schedule ({state}, {done} of "
        f"{planned if planned is not None else '?'} steps): its scores are not those of its "
        f"recipe. Finish it ({finish}), or leave it out of the comparison.",
        [run.run_id],
        {"run": name, "status": state, "steps": done, "planned_steps": planned, "command": finish},
    )


def _recipe_mismatch(
    ref: RunSummary, run: RunSummary, label: dict[str, str], ignore: tuple[str, ...]
) -> Refusal | None:
    """``recipe_mismatch`` if two runs did not train alike (but for the ``ignore`` fields)."""
    a, b = label[ref.run_id], label[run.run_id]
    fields = _differing(
        {k: v for k, v in ref.recipe.items() if k not in ignore},
        {k: v for k, v in run.recipe.items() if k not in ignore},
        a,
        b,
    )
    if fields:
        parts = "; ".join(
            f"{k}: {_show(v[a])} ({a}) vs {_show(v[b])} ({b})" for k, v in list(fields.items())[:6]
        )
        more = f" (and {len(fields) - 6} more fields)" if len(fields) > 6 else ""
        return Refusal(
            RECIPE_MISMATCH,
            f"{a} and {b} were trained with different recipes — {parts}{more}. Their scores "
            "would mix the mixture's effect with these changes; compare runs of one recipe "
            "(same model, optimizer, schedule, steps, seed and versions), or re-run one of them "
            "with the other's settings.",
            [ref.run_id, run.run_id],
            {"fields": fields},
        )
    return None


def _init_mismatch(ref: RunSummary, run: RunSummary, label: dict[str, str]) -> Refusal | None:
    """``init_mismatch`` if two runs of one recipe (and seed) started from different weights."""
    if ref.recipe_fingerprint != run.recipe_fingerprint or ref.init_sha256 == run.init_sha256:
        return None
    a, b = label[ref.run_id], label[run.run_id]
    ia, ib = ref.init_sha256[:SHORT] or ABSENT, run.init_sha256[:SHORT] or ABSENT
    return Refusal(
        INIT_MISMATCH,
        f"{a} and {b} have one recipe but started from different initial weights (initial "
        f"checkpoint {ia} ({a}) vs {ib} ({b})): made on machines with different torch "
        "builds, or one was made before Zephon shared initial checkpoints; re-run one of "
        "them where the other's initial checkpoint is.",
        [ref.run_id, run.run_id],
        {"fields": {"init_sha256": {a: ref.init_sha256, b: run.init_sha256}}},
    )


def _differing(fa: dict[str, Any], fb: dict[str, Any], a: str, b: str) -> dict[str, dict[str, Any]]:
    """Dotted field -> ``{a: value, b: value}`` for every field where two flat dicts differ."""
    return {
        key: {a: fa.get(key, ABSENT), b: fb.get(key, ABSENT)}
        for key in sorted(set(fa) | set(fb))
        if fa.get(key, ABSENT) != fb.get(key, ABSENT)
    }


def _show(value: Any) -> str:
    return value if value == ABSENT else json.dumps(value)


def _eval_step(
    runs: list[RunSummary], label: dict[str, str]
) -> tuple[int | None, list[str], Refusal | None]:
    """The last eval step common to all runs, its domains, or the refusal saying why none."""
    ids = [r.run_id for r in runs]
    without = [label[r.run_id] for r in runs if not r.evals]
    if without:
        return (
            None,
            [],
            Refusal(
                NO_COMMON_EVAL,
                f"no eval step is common to all runs: {', '.join(without)} "
                f"{'has' if len(without) == 1 else 'have'} no held-out eval scores "
                "(zephon/eval.jsonl); run the eval on them or leave them out.",
                ids,
                {"runs_without_eval": without},
            ),
        )
    common = set.intersection(*(set(r.evals) for r in runs))
    if not common:
        steps = {label[r.run_id]: sorted(r.evals) for r in runs}
        listed = "; ".join(f"{k}: {v}" for k, v in steps.items())
        return (
            None,
            [],
            Refusal(
                NO_COMMON_EVAL,
                f"no eval step is common to all runs ({listed}); evaluate every run at the same "
                "step (same eval interval and training length), then compare again.",
                ids,
                {"eval_steps": steps},
            ),
        )
    step = max(common)
    domains = {label[r.run_id]: sorted(k for k in r.evals[step] if k != AGGREGATE) for r in runs}
    first = next(iter(domains.values()))
    missing_aggregate = [label[r.run_id] for r in runs if AGGREGATE not in r.evals[step]]
    if any(d != first for d in domains.values()) or missing_aggregate:
        return (
            step,
            [],
            Refusal(
                NO_COMMON_EVAL,
                f"at eval step {step} the runs were scored on different held-out domains "
                f"({'; '.join(f'{k}: {v}' for k, v in domains.items())}"
                f"{'; no aggregate: ' + ', '.join(missing_aggregate) if missing_aggregate else ''}), "
                "so their aggregates are not comparable; evaluate all runs with the same eval spec.",
                ids,
                {"step": step, "domains": domains},
            ),
        )
    return step, first, None


def _documents(runs: list[RunSummary], step: int, label: dict[str, str]) -> Refusal | None:
    """``no_common_eval`` unless every run scored the same held-out documents at ``step``."""
    without = [label[r.run_id] for r in runs if step not in r.documents]
    ref = runs[0]
    sizes = {d: v["bytes"] for d, v in ref.documents.get(step, {}).items()}
    other = [
        label[r.run_id]
        for r in runs
        if not without and {d: v["bytes"] for d, v in r.documents[step].items()} != sizes
    ]
    if not without and not other:
        return None
    if without:
        message = (
            f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} no per-document "
            f"held-out scores at eval step {step} (recorded since Zephon decides between "
            "variants), so no difference between variants can be tested; re-run them."
        )
    else:
        message = (
            f"{', '.join(other)} scored other held-out text than {label[ref.run_id]} at eval "
            f"step {step} (document sizes differ), so their scores cannot be paired document "
            "by document; evaluate all runs with the same held-out documents."
        )
    detail = (
        {"runs_without_documents": without} if without else {"runs_with_other_documents": other}
    )
    return Refusal(NO_COMMON_EVAL, message, [r.run_id for r in runs], {"step": step, **detail})


def _checks(runs: list[RunSummary]) -> tuple[list[Refusal], int | None, list[str], int]:
    label = _labels(runs)
    refusals: list[Refusal] = []
    if len(runs) < 2:
        refusals.append(
            Refusal(
                TOO_FEW_RUNS,
                f"a comparison needs at least two runs, got {len(runs)}"
                f"{' (' + ', '.join(label.values()) + ')' if runs else ''}; add runs of other "
                "mixtures (or replicates) to compare against.",
                [r.run_id for r in runs],
                {"count": len(runs)},
            )
        )
    no_data, usable = _no_data(ordered_runs(runs), label)
    refusals += no_data
    refusals += [r for r in (_unfinished(run, label) for run in usable) if r]
    paired, unpaired = _seed_design(usable)
    refusals += [unpaired] if unpaired else []
    ignore = SEED_FIELDS if paired else ()
    groups = _by_variant(usable)
    common_steps: list[int] = []
    for group in groups.values():
        for run in group[1:]:
            refusal = _diverged(group[0], run, label)
            if refusal:
                refusals.append(refusal)
            else:
                common_steps.append(len(set(group[0].digests) & set(run.digests)))
    heads = [group[0] for group in groups.values()]
    pairs = [(heads[0], head) for head in heads[1:]] if heads else []
    pairs += [(group[0], run) for group in groups.values() for run in group[1:]]
    refusals += [r for r in (_mismatch(ref, run, label, ignore) for ref, run in pairs) if r]
    refusals += [
        r for r in (_recipe_mismatch(usable[0], run, label, ignore) for run in usable[1:]) if r
    ]
    by_seed: dict[str, list[RunSummary]] = {}
    for run in usable:
        by_seed.setdefault(run.seed, []).append(run)
    for block in by_seed.values():
        refusals += [r for r in (_init_mismatch(block[0], run, label) for run in block[1:]) if r]
    scored = usable or ordered_runs(runs)  # runs refused for no_data need no second reason
    step, domains, refusal = _eval_step(scored, label) if scored else (None, [], None)
    if refusal is None and step is not None:
        refusal = _documents(scored, step, label)
    if refusal:
        refusals.append(refusal)
    return refusals, step, domains, min(common_steps, default=0)


def check(runs: list[RunSummary]) -> list[Refusal]:
    """Every reason to refuse comparing ``runs`` (empty: the comparison is sound)."""
    return _checks(runs)[0]


def compare(
    runs: list[RunSummary],
    *,
    threshold: float = 0.0,
    confidence: float = 0.95,
    decide_on: list[str] | None = None,
) -> Comparison:
    """Check ``runs`` and, if nothing is refused, score each variant at the common eval step
    and decide every pair of variants (:mod:`orchestrator.guard.decisions`): a difference
    counts only if its whole ``confidence`` interval is beyond ``threshold`` bits per byte.
    The aggregate (ranking and decisions) is the mean over the held-out domains
    ``decide_on`` (default: all of them)."""
    decisions.check_options(threshold, confidence)
    refusals, step, domains, common_steps = _checks(runs)
    if refusals or step is None:
        return Comparison(False, refusals, step, [], domains, common_steps)
    unknown = sorted(set(decide_on or []) - set(domains))
    if unknown:
        raise ValueError(
            f"cannot decide on held-out domain(s) {unknown}: the runs were scored on "
            f"{', '.join(domains)}"
        )
    chosen = [d for d in domains if d in (decide_on or domains)]
    arms = _by_arm(runs)
    seeds = sorted({r.seed for r in runs})
    first_run = ordered_runs(runs)[0]
    doc_bytes = {
        d: np.asarray(first_run.documents[step][d]["bytes"], dtype=np.float64) for d in chosen
    }
    scores: dict[str, decisions.Scores] = {}
    rows = []
    for arm, group in arms.items():
        blocks: dict[str, list[RunSummary]] = {}
        for run in group:
            blocks.setdefault(run.seed, []).append(run)
        scores[arm] = {
            seed: {
                d: np.mean([r.documents[step][d]["bits"] for r in block], axis=0) for d in chosen
            }
            for seed, block in blocks.items()
        }
        aggregate = {r.run_id: _mean_over(r, step, chosen) for r in group}
        aggregates = list(aggregate.values())
        variant = group[0].variant if len(blocks) == 1 else _arm_id(arm)
        rows.append(
            {
                "arm": arm,
                "variant": variant[:SHORT],
                "variant_id": variant,
                "mixture": mixture_label(group[0].mixture),
                "shares": {k: float(v) for k, v in sorted(group[0].mixture.items())},
                "replicates": len(group),
                "seeds": len(blocks),
                "dp_sizes": ",".join(
                    str(n) for n in sorted({n for r in group for n in r.dp_sizes})
                ),
                "bpb": {
                    d: statistics.fmean(
                        statistics.fmean(float(r.evals[step][d]) for r in block)
                        for block in blocks.values()
                    )
                    for d in domains
                },
                "aggregate_bpb": statistics.fmean(
                    statistics.fmean(aggregate[r.run_id] for r in block)
                    for block in blocks.values()
                ),
                "aggregate_se": decisions.sampling_error(scores[arm], doc_bytes),
                "aggregate_range": _spread(aggregates),
                "aggregate_std": statistics.stdev(aggregates) if len(aggregates) > 1 else 0.0,
                "dp_range": max(
                    _spread([aggregate[r.run_id] for r in block]) for block in blocks.values()
                ),
                "runs": [r.name for r in group],
                "run_ids": [r.run_id for r in group],
            }
        )
    rows.sort(key=lambda row: (row["aggregate_bpb"], row["mixture"], row["variant_id"]))
    order = [row["arm"] for row in rows]
    decided = decisions.decide_all(
        order, scores, doc_bytes, threshold=threshold, confidence=confidence
    )
    tier, best = decisions.tiers(order, decided), decisions.best(order, decided)
    by_arm = {row["arm"]: row for row in rows}
    pairs = [
        {
            **pair.to_json(),
            "a": by_arm[pair.a]["variant"],
            "b": by_arm[pair.b]["variant"],
            "a_mixture": by_arm[pair.a]["mixture"],
            "b_mixture": by_arm[pair.b]["mixture"],
        }
        for pair in decided
    ]
    top = rows[0]["aggregate_bpb"]
    rows = [
        {
            "rank": rank,
            **{k: v for k, v in row.items() if k != "arm"},
            "vs_best": row["aggregate_bpb"] - top,
            "tier": tier[row["arm"]],
            "best": best[row["arm"]],
        }
        for rank, row in enumerate(rows, 1)
    ]
    return Comparison(
        True,
        [],
        step,
        rows,
        domains,
        common_steps,
        first_run.contract_fingerprint,
        first_run.recipe_fingerprint,
        pairs,
        seeds,
        threshold,
        confidence,
        chosen,
    )


def _mean_over(run: RunSummary, step: int, domains: list[str]) -> float:
    """``run``'s aggregate at ``step`` over ``domains``: the mean of their bits per byte."""
    return statistics.fmean(float(run.evals[step][d]) for d in domains)


def _spread(values: list[float]) -> float:
    return max(values) - min(values)


def _arm_id(arm: str) -> str:
    """sha256 hex of :func:`_arm` (the id of a variant across its seeds)."""
    return hashlib.sha256(arm.encode()).hexdigest()
