"""The comparison guard's Markdown report: the table and decisions, or the reasons refused."""

from __future__ import annotations

from orchestrator.experiment.variant_axis import parse_axis
from orchestrator.guard.comparison import (
    DECONTAMINATED,
    HELD_OUT_SCORE,
    SHORT,
    Comparison,
    ComparisonRow,
)
from orchestrator.guard.decisions import Design, Family
from orchestrator.guard.eval_smoothing import smoothing_note

_NUMERIC_COLUMNS = ("rank", "n", "seeds", "± docs", "vs best", "dp range", "std")
"""Table columns aligned right (besides the ``... bpb`` ones)."""


def comparison_markdown(comparison: Comparison) -> str:
    """A readable report: the table and decisions if accepted, the reasons if refused."""
    if not comparison.accepted:
        return _refusals_markdown(comparison)
    header = ["rank", "tier", "variant", "mixture", "n", "seeds", "dp sizes"]
    header += [f"{d} bpb" for d in comparison.domains]
    header += ["aggregate bpb", "± docs", "vs best", "dp range", "std", "runs"]
    lines = [
        "## Comparison accepted",
        "",
        f"Held-out bits per byte (lower is better) at eval step {comparison.eval_step}, the last "
        "step every run evaluated"
        f"{_smoothed_note(comparison)}; means over replicates, the aggregate's standard error from "
        "the held-out documents (± docs), the largest range of the aggregate among replicates "
        "of one seed (dp range: they saw the same data) and its standard deviation over all "
        "replicates (std)"
        f"{_decided_on_note(comparison)}. "
        "Variants of one tier cannot be told apart; **best** only if decided better than "
        "every other variant.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(_column_alignment(h) for h in header) + "|",
    ]
    lines += [_table_line(row, comparison.domains) for row in comparison.rows]
    lines += _gains_lines(comparison)
    lines += _data_read_lines(comparison)
    lines += ["", *_decisions_lines(comparison)]
    lines += _signal_noise_lines(comparison)
    lines += ["", _checked_paragraph(comparison)]
    return "\n".join(lines) + "\n"


def _gains_lines(comparison: Comparison) -> list[str]:
    """What training gained: each variant's initial and final bits per byte per domain, and
    the share removed ([] unless every run scored its initial model)."""
    if not all(row.initial_bpb for row in comparison.rows):
        return []
    lines = [
        "",
        f"### What training gained (step 0 -> step {comparison.eval_step})",
        "",
        "Bits per byte of the initial model and at the eval step; the share removed is the "
        "same in bits per token.",
        "",
        "| variant | " + " | ".join(comparison.domains) + " |",
        "|---|" + "---:|" * len(comparison.domains),
    ]
    for row in comparison.rows:
        cells = [
            f"{row.initial_bpb[d]:.3f} -> {row.bpb[d]:.3f} (-{row.gain(d):.0%})"
            for d in comparison.domains
        ]
        lines.append(f"| `{row.variant}` {row.mixture} | " + " | ".join(cells) + " |")
    return lines


def _data_read_lines(comparison: Comparison) -> list[str]:
    """What each run read and removed per dataset: the processing steps' drops and the
    scored documents removed from training (``decontaminate``); [] when no run recorded any
    dataset's (no table without rows)."""
    rows: list[str] = []
    ran_out = []
    for run, datasets in comparison.data_read.items():
        for dataset, counts in datasets.items():
            removed = counts["removed"]
            steps = ", ".join(
                f"{step} {n}" for step, n in sorted(removed.items()) if step != DECONTAMINATED
            )
            epochs = "-" if counts.get("epochs") is None else f"{counts['epochs']:.2f}"
            rows.append(
                f"| {run} | {dataset} | {counts['records_read']} | "
                f"{counts.get('unique_records', '-')} | {epochs} | {steps or '-'} | "
                f"{removed.get(DECONTAMINATED, 0)} | {counts.get('overlapping', '-')} |"
            )
            if counts.get("ran_out_lanes"):
                ran_out.append(f"{run} ran out of {dataset} in {counts['ran_out_lanes']} lane(s)")
    if not rows:
        return []
    lines = [
        "",
        "### Data read per run",
        "",
        "Records read per dataset over the run's steps (a resume replays at most a flush window), "
        "the distinct records among them and the epochs they make (records read over distinct "
        "ones), and what was removed before training: by a processing step, or as a scored "
        "document (`decontaminate`).",
        "",
        "| run | dataset | records read | distinct | epochs | removed | decontaminated "
        "| overlapping |",
        "|---|---|---:|---:|---:|---|---:|---:|",
        *rows,
        "",
        "Overlapping: records trained on that share a word n-gram with a scored document "
        "(`data.overlap_ngram`; `-`: not counted). They are near copies the exact-text "
        "decontamination does not catch.",
    ]
    if ran_out:
        lines += [
            "",
            f"**Ran out** (`exhausted: stop`): {'; '.join(ran_out)}. From there the other "
            "datasets filled its share: the mixture it trained on is not the one it names.",
        ]
    return lines


def _signal_noise_lines(comparison: Comparison) -> list[str]:
    """Each yardstick's signal, noise and their ratio, its noisiest variant and any variant
    much noisier than the rest ([] without two seeds: no noise is measured)."""
    measured = [y for y in comparison.yardsticks if y.noise is not None]
    if not measured:
        return []
    lines = [
        "",
        "### Signal and noise per yardstick",
        "",
        "Signal: the spread (sd) of the variants' mean scores; noise: a variant's spread over "
        "seeds (root mean of the variants' variances); a ratio well below 1 means the seeds "
        "move the score more than the variants do, and that yardstick needs many seeds to "
        "decide. Noisier: variants whose seed spread exceeds the rest's (p below 0.05 over the "
        "number of variants); their pairs are decided on their own spreads.",
        "",
        "| yardstick | signal | noise | signal / noise | noisiest variant (seed sd) | noisier |",
        "|---|---:|---:|---:|---|---|",
    ]
    for y in measured:
        ratio = y.ratio
        noisiest = max(y.seed_sd, key=lambda v: y.seed_sd[v])
        named = ", ".join(f"`{v}` (p = {p:.2g})" for v, p in y.noisier.items()) or "-"
        lines.append(
            f"| {y.yardstick} | {y.signal:.4f} | {y.noise:.4f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | `{noisiest}` ({y.seed_sd[noisiest]:.4f}) "
            f"| {named} |"
        )
    return lines


def _refusals_markdown(comparison: Comparison) -> str:
    """The heading of a refused comparison and one bullet per refusal."""
    count = len(comparison.refusals)
    lines = [f"## Comparison refused ({count} reason{'s' if count != 1 else ''})", ""]
    lines += [f"- **{r.code}**: {r.message}" for r in comparison.refusals]
    return "\n".join(lines) + "\n"


def _table_line(row: ComparisonRow, domains: list[str]) -> str:
    """One variant's line of the table."""
    cells = [
        str(row.rank),
        f"{row.tier}{' **best**' if row.best else ''}",
        f"`{row.variant}`",
        row.mixture,
        str(row.replicates),
        str(row.seeds),
        row.dp_sizes,
    ]
    cells += [f"{row.bpb[d]:.4f}" for d in domains]
    cells += [
        f"**{row.aggregate_bpb:.4f}**",
        _format_small_number(row.aggregate_se),
        f"{row.vs_best:+.4f}",
        _format_small_number(row.dp_range),
        _format_small_number(row.aggregate_std),
        ", ".join(row.runs),
    ]
    return "| " + " | ".join(cells) + " |"


def _smoothed_note(comparison: Comparison) -> str:
    """How the scores were smoothed over the last evals ("" if not)."""
    note = smoothing_note(comparison.smooth_last, comparison.smoothed_steps)
    return f" ({note})" if note else ""


def _decided_on_note(comparison: Comparison) -> str:
    """Which domains the aggregate is the mean over, when not all of them ("" if all)."""
    if comparison.decided_on == comparison.domains:
        return ""
    if comparison.score != HELD_OUT_SCORE:
        return f"; the aggregate (ranked and decided on) is the {comparison.score}"
    return (
        "; the aggregate (ranked and decided on) is the mean over "
        f"{', '.join(comparison.decided_on)} only"
    )


def _decisions_lines(comparison: Comparison) -> list[str]:
    """The decisions section: one table line per pair, the method and what it can detect."""
    if not comparison.pairs:
        return ["One variant (its replicates only): nothing to decide."]
    confidence = f"{100 * (1 - comparison.look_level):.3g}%" if comparison.look_level else "no"
    lines = [
        f"### Decisions (threshold {comparison.threshold:g} bits/byte, {confidence} intervals, "
        f"{comparison.design} design)",
        "",
        f"| a | b | a - b | {confidence} interval | p | {FAMILY_COLUMN[comparison.family]} | "
        "decision |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for pair in comparison.pairs:
        lo, hi = pair["interval"]
        adjusted = pair.get("adjusted_p_value")
        lines.append(
            f"| `{pair['a']}` {pair['a_mixture']} | `{pair['b']}` {pair['b_mixture']} | "
            f"{pair['difference']:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {pair['p_value']:.3g} | "
            f"{'-' if adjusted is None else f'{adjusted:.3g}'} | **{pair['decision']}** |"
        )
    methods = sorted({pair["method"] for pair in comparison.pairs})
    detectable = (
        f"Smallest difference this design detects (80% power, every pair): "
        f"{comparison.smallest_detectable:.4f} bits/byte."
        if comparison.smallest_detectable is not None
        else "One seed decides nothing: rerun with hydra.sweeper.replicate_seeds=[0,1,2]."
    )
    lines += [
        "",
        f"Method: {'; '.join(methods)}. {_family_sentence(comparison)} {detectable}",
        "",
        _design_sentence(comparison),
        *_next_step_lines(comparison),
    ]
    return lines


def _design_sentence(comparison: Comparison) -> str:
    """Which design decided, at what level, and the look's place in its sequence."""
    seeds, alpha = len(comparison.seeds), 1 - comparison.confidence
    if comparison.design is Design.FIXED:
        return (
            f"**Fixed design**: one look at {seeds} seeds, decided at {alpha:.2g}: valid if this "
            "seed count was fixed in advance. Adding seeds and comparing again wants the "
            "sequential design (the default)."
        )
    earlier = ", ".join(
        f"{look['seeds']} seeds (`{look['comparison_run_id']}`)"
        for look in comparison.earlier_looks
    )
    place = f"look {comparison.look} of its sequence" + (
        f" (earlier: {earlier})" if earlier else ""
    )
    if comparison.look_level == 0:
        spent = (
            "decides nothing: one seed leaves training noise unmeasured"
            if seeds < 2
            else f"decides nothing: the budget is spent by {comparison.max_seeds} seeds"
        )
        return f"**Sequential design**, {place} at {seeds} seeds: {spent}."
    return (
        f"**Sequential design**, {place} at {seeds} seeds: it decides at "
        f"{comparison.look_level:.2%} of the {alpha:.2g} budget that every look of these "
        f"variants shares up to {comparison.max_seeds} seeds, so the chance that any look "
        f"decides equal variants wrongly stays at most {alpha:.2g}, however seeds are added. "
        "`--design fixed` for a seed count fixed in advance."
    )


def _next_step_lines(comparison: Comparison) -> list[str]:
    """For each pair that cannot be told: the seeds that would decide it, or stop."""
    steps = [(pair, pair["next_step"]) for pair in comparison.pairs if pair.get("next_step")]
    if not steps:
        return []
    lines = ["", "**Next step** for the pairs that cannot be told:", ""]
    for pair, step in steps:
        name = f"`{pair['a']}` vs `{pair['b']}`"
        if step["stop"] or not step["powered"]:  # stop, or one more seed first: said why
            lines.append(f"- {name}: {step['reason']}.")
            continue
        hours = step["device_hours"]
        cost = f"{step['runs']} runs" + (
            "" if hours is None else f", about {hours:.2g} device-hours"
        )
        lines.append(
            f"- {name}: {step['more_seeds']} more seed(s), {step['seeds']} in all ({cost}), "
            f"would decide a difference of {step['target']:.4f} (the observed one) with 80% power."
        )
    return lines


FAMILY_COLUMN = {Family.HOLM: "Holm p", Family.BH: "BH q", Family.NONE: "adjusted"}
"""The adjusted p-value column's heading per family correction."""


def _family_sentence(comparison: Comparison) -> str:
    """Which correction the decisions follow, and over how many pairs."""
    k = len(comparison.pairs)
    level = f"{comparison.look_level:.2g}"
    if comparison.family == Family.HOLM:
        return (
            f"Decisions corrected for {k} pairs by Holm's method: the chance that any of them "
            f"is wrong is at most {level} (a best mixture is claimed at that family level)."
        )
    if comparison.family == Family.BH:
        return (
            f"Decisions corrected for {k} pairs by Benjamini-Hochberg: at most {level} of the "
            "decisions made are expected to be wrong."
        )
    return f"Each of the {k} pairs decided on its own at {level}: no correction for their number."


def _checked_paragraph(comparison: Comparison) -> str:
    """What the guard checked before accepting: the paragraph closing the report."""
    agreed = (
        f"every replicate of a variant had the same global batch digests over its "
        f"{comparison.common_steps} common steps or more"
        if comparison.common_steps
        else "no variant had two replicates to cross-check"
    )
    seeds = (
        f"the seed ({len(comparison.seeds)} seed blocks, each run by every variant: "
        f"{'; '.join(comparison.seeds)})"
        if len(comparison.seeds) > 1
        else "nothing else"
    )
    return (
        f"Checked: every run finished its schedule; all data fingerprints agreed ({agreed}); "
        f"all runs share data contract `{(comparison.contract_fingerprint or '')[:SHORT]}` (data "
        f"files, tokenizer, batch layout, seeds) and recipe "
        f"`{(comparison.recipe_fingerprint or '')[:SHORT]}` (model, optimizer, schedule, steps, "
        "init seed, precision, TorchTitan flags, versions) but for "
        f"{seeds}, and runs of one seed started from one initial checkpoint. What differs "
        f"between variants is {_varied_text(comparison.compared)}; within a variant, the dp "
        "size and micro-batch size at most."
    )


def _varied_text(compared: str) -> str:
    """What ``data.compared`` lets variants differ in, as words."""
    axis = parse_axis(compared)
    if axis.setting is None:
        return "the mixture"
    moving = (
        f"; {axis.dataset}'s own held-out documents move with its version and are not compared"
        if axis.dataset
        else ""
    )
    return f"the mixture and {axis.setting} (data.compared){moving}"


def _column_alignment(header: str) -> str:
    """The Markdown alignment of a table column: numbers right, text left."""
    return "---:" if header in _NUMERIC_COLUMNS or header.endswith("bpb") else "---"


def _format_small_number(value: float) -> str:
    """A spread: 4 decimals, or two significant digits below 1e-4 (replicates agree closely)."""
    return f"{value:.4f}" if value == 0 or value >= 1e-4 else f"{value:.1e}"
