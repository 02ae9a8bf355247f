"""The comparison guard: compare runs that differ only in their data mixture, or refuse to.

Researchers compare training runs whose data differs in the mixture and nothing
else. A table of scores is only meaningful if that is actually true, so before
any score is shown the guard checks the runs' records and refuses, with the
reason and what to do about it, when it is not. The rules:

1. **Enough runs with data.** Fewer than two runs: ``too_few_runs``. A run
   without per-step batch digests (or without its experiment record, so its
   contract is unknown): ``no_data``; such a run takes no part in rules 2 and 3.
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
5. **All reasons at once.** Every refusal is collected (not only the first);
   the verdict is "refused" if there is any, and a refused comparison shows no
   scores.

An accepted comparison has one row per variant, best (lowest aggregate bits
per byte) first: the mixture, the number of replicates, the dp sizes they ran
on, the mean score per domain and in aggregate, and the replicate spread of
the aggregate (range and sample standard deviation, 0 for one replicate).

Runs are read from MLflow with the names in :mod:`orchestrator.tracking_names`
(:func:`load_runs`, :func:`find_run_ids`), and a verdict is logged back as a
run of its own (:func:`log_comparison`) with ``comparison.json``,
``comparison.md`` and, when accepted, ``comparison.png`` (:func:`plot`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import statistics
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.runfolder import read_jsonl
from orchestrator.tracking_names import (
    ARTIFACT_DIR,
    ARTIFACT_EVAL,
    ARTIFACT_EXPERIMENT,
    ARTIFACT_STEPS,
    TAG_COMPARED,
    TAG_CONTRACT,
    TAG_DP_HISTORY,
    TAG_DP_SIZE,
    TAG_KIND,
    TAG_NOTE,
    TAG_SWEEP,
    TAG_VARIANT,
    TAG_VERDICT,
    flatten,
)

if TYPE_CHECKING:
    import mlflow

    from orchestrator.tracking import Tracker

TOO_FEW_RUNS = "too_few_runs"
NO_DATA = "no_data"
DIVERGED_DATA = "diverged_data"
CONTRACT_MISMATCH = "contract_mismatch"
NO_COMMON_EVAL = "no_common_eval"

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


@dataclass
class Refusal:
    """One reason the comparison is refused.

    ``runs`` holds the MLflow run ids concerned; ``message`` (names, not ids) says what
    is wrong and what to do; ``detail`` is machine-readable (e.g. ``{"step": 7,
    "digests": {name: digest}}`` or ``{"fields": {"seed": {name: value}}}``).
    """

    code: str
    """``diverged_data``, ``contract_mismatch``, ``no_data``, ``no_common_eval`` or ``too_few_runs``."""
    message: str
    runs: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """The guard's verdict and, if accepted, one row per variant (best first)."""

    accepted: bool
    refusals: list[Refusal]
    eval_step: int | None
    rows: list[dict[str, Any]]
    """Per variant: ``rank``, ``variant`` (12 hex), ``variant_id``, ``mixture`` (canonical
    text), ``shares``, ``replicates``, ``dp_sizes`` ("1,2"), ``bpb`` (domain -> mean),
    ``aggregate_bpb``, ``aggregate_range``, ``aggregate_std``, ``runs`` (names), ``run_ids``."""
    domains: list[str] = field(default_factory=list)
    """Held-out domains scored at ``eval_step``, in table order."""
    common_steps: int = 0
    """Fewest digest steps any two compared replicates shared (0 if no variant had two)."""
    contract_fingerprint: str | None = None
    """The contract fingerprint all runs share, when accepted."""

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON-serialisable dict."""
        return {
            "accepted": self.accepted,
            "verdict": "accepted" if self.accepted else "refused",
            "eval_step": self.eval_step,
            "domains": list(self.domains),
            "contract_fingerprint": self.contract_fingerprint,
            "common_steps": self.common_steps,
            "refusals": [asdict(r) for r in self.refusals],
            "rows": self.rows,
        }

    def to_markdown(self) -> str:
        """A readable report: the table if accepted, the reasons if refused."""
        if not self.accepted:
            lines = [
                f"## Comparison refused ({len(self.refusals)} reason{'s' if len(self.refusals) != 1 else ''})",
                "",
            ]
            lines += [f"- **{r.code}**: {r.message}" for r in self.refusals]
            return "\n".join(lines) + "\n"
        header = ["rank", "variant", "mixture", "n", "dp sizes"]
        header += [f"{d} bpb" for d in self.domains]
        header += ["aggregate bpb", "range", "std", "runs"]
        lines = [
            "## Comparison accepted",
            "",
            f"Held-out bits per byte (lower is better) at eval step {self.eval_step}, the last step "
            "every run evaluated; means over replicates, spread of the aggregate across replicates.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(_align(h) for h in header) + "|",
        ]
        for row in self.rows:
            cells = [
                str(row["rank"]),
                f"`{row['variant']}`",
                row["mixture"],
                str(row["replicates"]),
                row["dp_sizes"],
            ]
            cells += [f"{row['bpb'][d]:.4f}" for d in self.domains]
            cells += [
                f"**{row['aggregate_bpb']:.4f}**",
                f"{row['aggregate_range']:.4f}",
                f"{row['aggregate_std']:.4f}",
                ", ".join(row["runs"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        agreed = (
            f"every replicate of a variant had the same global batch digests over its "
            f"{self.common_steps} common steps or more"
            if self.common_steps
            else "no variant had two replicates to cross-check"
        )
        lines += [
            "",
            f"All data fingerprints agreed ({agreed}), and all variants share data contract "
            f"`{(self.contract_fingerprint or '')[:SHORT]}`: they differ only in the mixture.",
        ]
        return "\n".join(lines) + "\n"


def _align(header: str) -> str:
    return "---:" if header in ("rank", "n", "range", "std") or header.endswith("bpb") else "---"


# -- the guard ---------------------------------------------------------------------------------


def mixture_label(mixture: dict[str, float]) -> str:
    """``"code=0.500 docs=0.300 i18n=0.200"``: shares by dataset name, three decimals."""
    return " ".join(f"{name}={float(share):.3f}" for name, share in sorted(mixture.items()))


def _ordered(runs: Iterable[RunSummary]) -> list[RunSummary]:
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


def _contract_fields(contract: dict[str, Any]) -> dict[str, Any]:
    flat = flatten({k: v for k, v in contract.items() if k != "mixture"})
    return {k: v for k, v in flat.items() if k != "mixture" and not k.startswith("mixture.")}


def _by_variant(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = {}
    for run in _ordered(runs):
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


def _mismatch(ref: RunSummary, run: RunSummary, label: dict[str, str]) -> Refusal | None:
    """``contract_mismatch`` if two runs' contracts differ in more than the mixture, else None."""
    a, b = label[ref.run_id], label[run.run_id]
    fa, fb = _contract_fields(ref.contract), _contract_fields(run.contract)
    fields = {
        key: {a: fa.get(key, ABSENT), b: fb.get(key, ABSENT)}
        for key in sorted(set(fa) | set(fb))
        if fa.get(key, ABSENT) != fb.get(key, ABSENT)
    }
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
    if ref.contract_fingerprint != run.contract_fingerprint:
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
    no_data, usable = _no_data(_ordered(runs), label)
    refusals += no_data
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
    for ref, run in pairs:
        refusal = _mismatch(ref, run, label)
        if refusal:
            refusals.append(refusal)
    scored = usable or _ordered(runs)  # runs refused for no_data need no second reason
    step, domains, refusal = _eval_step(scored, label) if scored else (None, [], None)
    if refusal:
        refusals.append(refusal)
    return refusals, step, domains, min(common_steps, default=0)


def check(runs: list[RunSummary]) -> list[Refusal]:
    """Every reason to refuse comparing ``runs`` (empty: the comparison is sound)."""
    return _checks(runs)[0]


def compare(runs: list[RunSummary]) -> Comparison:
    """Check ``runs`` and, if nothing is refused, score each variant at the common eval step."""
    refusals, step, domains, common_steps = _checks(runs)
    if refusals or step is None:
        return Comparison(False, refusals, step, [], domains, common_steps)
    rows = []
    for variant, group in _by_variant(runs).items():
        scores = [r.evals[step] for r in group]
        aggregates = [float(s[AGGREGATE]) for s in scores]
        rows.append(
            {
                "variant": variant[:SHORT],
                "variant_id": variant,
                "mixture": mixture_label(group[0].mixture),
                "shares": {k: float(v) for k, v in sorted(group[0].mixture.items())},
                "replicates": len(group),
                "dp_sizes": ",".join(
                    str(n) for n in sorted({n for r in group for n in r.dp_sizes})
                ),
                "bpb": {d: statistics.fmean(float(s[d]) for s in scores) for d in domains},
                "aggregate_bpb": statistics.fmean(aggregates),
                "aggregate_range": max(aggregates) - min(aggregates),
                "aggregate_std": statistics.stdev(aggregates) if len(aggregates) > 1 else 0.0,
                "runs": [r.name for r in group],
                "run_ids": [r.run_id for r in group],
            }
        )
    rows.sort(key=lambda row: (row["aggregate_bpb"], row["mixture"], row["variant_id"]))
    rows = [{"rank": rank, **row} for rank, row in enumerate(rows, 1)]
    fingerprint = _ordered(runs)[0].contract_fingerprint
    return Comparison(True, [], step, rows, domains, common_steps, fingerprint)


# -- plot --------------------------------------------------------------------------------------


def _dp_label(dp_sizes: list[int]) -> str:
    return "dp " + ("→".join(str(n) for n in dp_sizes) if dp_sizes else "?")


def plot(comparison: Comparison, runs: list[RunSummary], path: Path) -> Path:
    """Draw an accepted comparison as a PNG at ``path`` and return the path.

    Top: per variant (best first), the mean aggregate bits per byte as a diamond with a
    bar over the replicates' range, each replicate a dot coloured by its dp size(s).
    Below: one small panel per held-out domain, the same way. Raises ``ValueError`` for
    a refused comparison (there is nothing sound to draw).
    """
    if not comparison.accepted or comparison.eval_step is None:
        raise ValueError("plot() needs an accepted comparison; this one was refused")
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    step = comparison.eval_step
    by_id = {r.run_id: r for r in runs}
    rows = comparison.rows
    domains = comparison.domains
    dp_kinds = sorted(
        {_dp_label(by_id[i].dp_sizes) for row in rows for i in row["run_ids"]},
        key=lambda s: (len(s), s),
    )
    palette = matplotlib.colormaps["tab10"]
    colour = {kind: palette(i % 10) for i, kind in enumerate(dp_kinds)}
    xs = list(range(len(rows)))
    labels = [f"#{row['rank']}\n" + row["mixture"].replace(" ", "\n") for row in rows]

    width = max(8.0, 1.7 * len(rows) + 3.0)
    ncols = max(1, len(domains))
    fig = Figure(figsize=(width, 8.5 if domains else 5.5), dpi=110, layout="constrained")
    grid = fig.add_gridspec(2 if domains else 1, ncols, height_ratios=[2.2, 1] if domains else [1])

    def panel(ax: Any, key: str | None, small: bool) -> None:
        for x, row in zip(xs, rows, strict=True):
            values = []
            for k, run_id in enumerate(row["run_ids"]):
                run = by_id[run_id]
                score = run.evals[step][AGGREGATE if key is None else key]
                values.append(score)
                n = len(row["run_ids"])
                jitter = (k - (n - 1) / 2) * (0.22 / max(1, n - 1)) if n > 1 else 0.0
                ax.scatter(
                    x + 0.18 + jitter,
                    score,
                    s=18 if small else 36,
                    color=colour[_dp_label(run.dp_sizes)],
                    edgecolor="white",
                    linewidth=0.5,
                    zorder=3,
                )
            mean = row["aggregate_bpb"] if key is None else row["bpb"][key]
            ax.errorbar(
                x,
                mean,
                yerr=[[mean - min(values)], [max(values) - mean]],
                fmt="D",
                color="black",
                markersize=4 if small else 7,
                capsize=3 if small else 5,
                zorder=4,
            )
            if not small:
                ax.annotate(
                    f"{mean:.4f}",
                    (x, mean),
                    xytext=(-8, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                    fontsize=9,
                )
        ax.set_xticks(xs, labels if not small else [str(r["rank"]) for r in rows])
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)

    main = fig.add_subplot(grid[0, :])
    panel(main, None, small=False)
    main.set_ylabel("aggregate bits per byte (lower is better)")
    main.set_title(
        f"Held-out bits per byte at eval step {step} — {len(rows)} mixtures, best first\n"
        "◆ mean over replicates, bar = replicate range, dots = replicates by dp size",
        fontsize=11,
    )
    handles = [Line2D([], [], marker="o", linestyle="", color=colour[k], label=k) for k in dp_kinds]
    main.legend(handles=handles, title="replicate ran on", loc="best", fontsize=8)
    for i, domain in enumerate(domains):
        ax = fig.add_subplot(grid[1, i])
        panel(ax, domain, small=True)
        ax.set_title(f"{domain} bpb", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("rank", fontsize=7)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig).print_png(path)  # Agg on this figure only: no global backend switch
    return path


# -- MLflow ------------------------------------------------------------------------------------


def _dp_sizes(tags: dict[str, str], steps: list[dict[str, Any]]) -> list[int]:
    for key in (TAG_DP_HISTORY, TAG_DP_SIZE):
        text = tags.get(key, "")
        sizes = [int(p) for p in text.split(",") if p.strip().isdigit()]
        if sizes:
            return sizes
    sizes = []
    for record in steps:
        size = record.get("dp_size")
        if isinstance(size, int) and (not sizes or sizes[-1] != size):
            sizes.append(size)
    return sizes


def load_runs(client: mlflow.MlflowClient, run_ids: list[str]) -> list[RunSummary]:
    """Read ``run_ids`` from MLflow into :class:`RunSummary` objects, in the given order.

    Tags give the variant, contract fingerprint and dp sizes; ``zephon/experiment.json``
    the contract and mixture (and the fingerprints, if the tags are missing);
    ``zephon/steps.jsonl`` the digests and ``zephon/eval.jsonl`` the scores. Missing
    artifacts leave the fields empty, so :func:`check` refuses the run with a reason
    instead of this function failing. An unknown run id raises ``ValueError``.
    """
    from mlflow.exceptions import MlflowException

    summaries = []
    for run_id in run_ids:
        try:
            run = client.get_run(run_id)
        except MlflowException as exc:
            raise ValueError(f"no MLflow run {run_id!r} at {client.tracking_uri}: {exc}") from exc
        tags = dict(run.data.tags)
        with tempfile.TemporaryDirectory(prefix="zephon-compare-") as tmp:
            with contextlib.suppress(MlflowException, OSError), _no_progress_bars():
                client.download_artifacts(run_id, ARTIFACT_DIR, tmp)  # none: the guard says so
            root = Path(tmp)
            experiment_path = root / ARTIFACT_EXPERIMENT
            try:
                experiment = json.loads(experiment_path.read_text())
            except (OSError, json.JSONDecodeError):
                experiment = {}
            steps = read_jsonl(root / ARTIFACT_STEPS)
            evals_raw = read_jsonl(root / ARTIFACT_EVAL)
        digests = {
            int(r["step"]): str(r["global_digest"])
            for r in steps
            if "step" in r and r.get("global_digest")
        }
        evals: dict[int, dict[str, float]] = {}
        for record in evals_raw:
            if "step" not in record:
                continue
            scores = {str(k): float(v) for k, v in (record.get("bpb") or {}).items()}
            if record.get("aggregate_bpb") is not None:
                scores[AGGREGATE] = float(record["aggregate_bpb"])
            evals[int(record["step"])] = scores
        summaries.append(
            RunSummary(
                run_id=run_id,
                name=run.info.run_name or run_id,
                variant=tags.get(TAG_VARIANT) or str(experiment.get("variant") or ""),
                contract_fingerprint=tags.get(TAG_CONTRACT)
                or str(experiment.get("contract_fingerprint") or ""),
                contract=dict(experiment.get("contract") or {}),
                mixture={str(k): float(v) for k, v in (experiment.get("mixture") or {}).items()},
                digests=digests,
                evals=evals,
                dp_sizes=_dp_sizes(tags, steps),
            )
        )
    return summaries


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def find_run_ids(
    client: mlflow.MlflowClient, *, experiment: str | None = None, sweep: str | None = None
) -> list[str]:
    """Ids of the training runs (``TAG_KIND == "run"``) of ``experiment`` (name; all
    experiments if None), only those of ``sweep`` if given; ordered by run name, then id.

    Raises ``ValueError`` if the experiment does not exist or no run matches.
    """
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ValueError(f"no MLflow experiment named {experiment!r} at {client.tracking_uri}")
        experiment_ids = [found.experiment_id]
    else:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    query = f"tags.`{TAG_KIND}` = 'run'"
    if sweep is not None:
        query += f" and tags.`{TAG_SWEEP}` = {_quote(sweep)}"
    runs = []
    token = None
    while experiment_ids:
        page = client.search_runs(experiment_ids, query, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    if not runs:
        where = f"experiment {experiment!r}" if experiment is not None else "any experiment"
        which = f" of sweep {sweep!r}" if sweep is not None else ""
        raise ValueError(
            f"no training runs{which} in {where} at {client.tracking_uri} "
            f"(looked for tag {TAG_KIND}=run); check the names, or sync the runs' tracking first"
        )
    runs.sort(key=lambda r: (r.info.run_name or "", r.info.run_id))
    return [r.info.run_id for r in runs]


def comparison_name(run_ids: Iterable[str]) -> str:
    """``compare-<8 hex>``: a short hash of the sorted run ids (same runs, same name)."""
    digest = hashlib.sha256(",".join(sorted(run_ids)).encode()).hexdigest()
    return f"compare-{digest[:8]}"


def log_comparison(
    tracker: Tracker,
    comparison: Comparison,
    runs: list[RunSummary],
    *,
    parent_run_id: str | None = None,
    workdir: Path,
    into_run_id: str | None = None,
) -> str:
    """Log ``comparison`` as a run of ``tracker``'s experiment; return its id.

    The run is named :func:`comparison_name`, tagged ``TAG_KIND=comparison``,
    ``TAG_VERDICT`` (accepted/refused), ``TAG_COMPARED`` (run ids, comma-separated) and
    ``mlflow.parentRunId`` if ``parent_run_id`` is given; its description is the markdown
    report. Artifacts: ``comparison.json``, ``comparison.md`` and, if accepted,
    ``comparison.png``, written first under ``workdir/<run name>/``. The run ends FINISHED
    whatever the verdict (FAILED only if logging itself fails). With ``into_run_id`` the
    verdict tags, description and artifacts go to that existing run instead (a sweep's
    parent), which is left as it is.
    """
    ids = [r.run_id for r in _ordered(runs)]
    name = comparison_name(ids)
    markdown = comparison.to_markdown()
    tags = {
        TAG_VERDICT: "accepted" if comparison.accepted else "refused",
        TAG_COMPARED: ",".join(ids),
        TAG_NOTE: markdown,
    }
    if into_run_id:
        run_id = into_run_id
        tracker.set_tags(run_id, tags)
    else:
        run_id = tracker.create_run(name, kind="comparison", tags=tags, parent_run_id=parent_run_id)
    try:
        folder = Path(workdir) / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "comparison.json").write_text(
            json.dumps(comparison.to_json(), indent=2, sort_keys=True) + "\n"
        )
        (folder / "comparison.md").write_text(markdown)
        files = [folder / "comparison.json", folder / "comparison.md"]
        if comparison.accepted:
            files.append(plot(comparison, runs, folder / "comparison.png"))
        tracker.log_artifacts(run_id, files)
    except BaseException:
        if not into_run_id:
            tracker.end_run(run_id, "FAILED")
        raise
    if not into_run_id:
        tracker.end_run(run_id, "FINISHED")
    return run_id


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """MLflow draws a download progress bar per run on stderr unless told not to."""
    import os

    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
