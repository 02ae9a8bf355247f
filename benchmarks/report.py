"""Medians, ratios, and the report: a JSON-ready dict and its markdown rendering.

A variant's runs are the JSON results of :mod:`benchmarks.child`, one per round.
Medians are taken over its *undisturbed* runs (other processes used at most
``NOISY_PERCENT`` of the machine during the run) when it has any, else over all its
successful runs, and the row says so ("runs used"). A ratio is a ratio of medians;
its range is the smallest and largest ratio of the runs of the same round (rounds
interleave all variants, so such a pair ran close together in time).

The headline table lists every ratio the benchmarks measure against a target, met or
missed (and the others, marked "no target"), each with the undisturbed runs it rests on:
those of the one of its two measurements that has fewer.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.noise import NOISY_PERCENT
from benchmarks.plan import Family, Variant

RESTORE_TARGET = 1.2
"""Most restore late/early time ratio the team wants."""
RESTORE_BASES = ("early", "matched")
"""The restore states the late state's time is divided by, each against the target."""

Row = dict[str, Any]

#: column key -> (header, decimals), after the variant, throughput and ratio columns
COLUMNS: dict[str, tuple[str, int]] = {
    "steady_M_tokens_per_s": ("M tokens/s after 1st batch", 2),
    "M_tokens_per_cpu_s": ("M tokens/CPU-s", 2),
    "tokens_M": ("tokens (M)", 1),
    "seconds": ("median s", 2),
    "cpu_s": ("CPU s", 1),
    "first_batch_s": ("1st batch s", 2),
    "peak_rss_mb": ("peak RSS MB", 0),
    "tree_rss_mb": ("peak RSS MB incl. workers", 0),
    "other_load_percent": ("other load %", 0),
    "runs": ("runs used", 0),
}


def undisturbed(runs: list[Row], load_of: Callable[[Row], float | None]) -> tuple[list[Row], bool]:
    """The runs whose other load is at most ``NOISY_PERCENT`` (unknown counts as quiet), or
    all ``runs`` if none is; the flag is true when disturbed runs had to be used."""
    quiet = [r for r in runs if (load_of(r) or 0.0) <= NOISY_PERCENT]
    return (quiet, False) if quiet else (runs, bool(runs))


def _runs_used(used: int, total: int, disturbed: bool) -> str:
    return f"{used} of {total}" + (" (all disturbed)" if disturbed else "")


def _make_run_evidence(undisturbed_runs: int, successful_runs: int) -> dict[str, int]:
    return {"undisturbed_runs": undisturbed_runs, "successful_runs": successful_runs}


@dataclass
class Summary:
    """The runs a variant's medians are taken over, and the errors of failed runs."""

    runs: list[dict[str, Any]]
    """Successful runs used (the undisturbed ones when there are any)."""
    successful: int
    """Successful runs in all."""
    disturbed: bool
    """True: every successful run was disturbed by other load; medians use them anyway."""
    errors: list[str]

    @property
    def ok(self) -> bool:
        """At least one run succeeded."""
        return bool(self.runs)

    @property
    def evidence(self) -> dict[str, int]:
        """How many undisturbed runs the medians rest on, of the successful runs."""
        return _make_run_evidence(0 if self.disturbed else len(self.runs), self.successful)

    def median(self, name: str) -> float | None:
        """Median of a ``Throughput`` field over the runs used (None if absent)."""
        values = [r["result"][name] for r in self.runs if r["result"].get(name) is not None]
        return statistics.median(values) if values else None

    def tokens_per_s_by_round(self) -> dict[int, float]:
        """Throughput of each run used, by round."""
        return {r["round"]: r["result"]["tokens_per_s"] for r in self.runs}

    def peak_rss(self, which: str) -> float | None:
        """Median peak RSS (MB) of the runs used: ``"process"`` or ``"tree"`` (with workers)."""
        values = [r["peak_rss_mb"][which] for r in self.runs]
        return statistics.median(values) if values else None


def summarize(outputs: Sequence[dict[str, Any]]) -> Summary:
    """A variant's summary from its child outputs (see the module docstring)."""
    successful = [o for o in outputs if o.get("ok")]
    used, disturbed = undisturbed(successful, lambda r: r["result"].get("other_load_percent"))
    return Summary(
        runs=used,
        successful=len(successful),
        disturbed=disturbed,
        errors=[o.get("error", "unknown error") for o in outputs if not o.get("ok")],
    )


def ratio(numerator: Summary, denominator: Summary) -> dict[str, float | None] | None:
    """Ratio of median throughputs, and the range of the same-round ratios (None: no round
    has both runs)."""
    if not (numerator.ok and denominator.ok):
        return None
    top, bottom = numerator.tokens_per_s_by_round(), denominator.tokens_per_s_by_round()
    pairs = [top[r] / bottom[r] for r in top.keys() & bottom.keys()]
    return {
        "ratio": statistics.median(top.values()) / statistics.median(bottom.values()),
        "min": min(pairs, default=None),
        "max": max(pairs, default=None),
    }


def throughput_row(variant: Variant, summary: Summary, versus: dict[str, float] | None) -> Row:
    """A table row: a variant's medians and its ratio (or the errors of its runs)."""
    row: Row = {"key": variant.key, "variant": variant.label, **summary.evidence}
    if not summary.ok:
        return {**row, "error": "; ".join(sorted(set(summary.errors)))}
    tokens_per_s = summary.median("tokens_per_s")
    tokens = summary.median("tokens")
    cpu_s = summary.median("cpu_s")
    steady = summary.median("steady_tokens_per_s")
    assert tokens_per_s is not None and tokens is not None and cpu_s is not None
    return {
        **row,
        "M_tokens_per_s": tokens_per_s / 1e6,
        "ratio": versus,
        "steady_M_tokens_per_s": None if steady is None else steady / 1e6,
        "M_tokens_per_cpu_s": tokens / cpu_s / 1e6,
        "tokens_M": tokens / 1e6,
        "seconds": summary.median("seconds"),
        "cpu_s": cpu_s,
        "first_batch_s": summary.median("first_batch_s"),
        "peak_rss_mb": summary.peak_rss("process"),
        "tree_rss_mb": summary.peak_rss("tree"),
        "other_load_percent": summary.median("other_load_percent"),
        "runs": _runs_used(len(summary.runs), summary.successful, summary.disturbed),
        "errors": summary.errors,
    }


def family_section(family: Family, summaries: dict[str, Summary]) -> dict[str, Any]:
    """One throughput table: every variant of the family with its ratio to the baseline."""
    base = summaries[family.baseline.key]
    rows = []
    for variant in family.variants:
        summary = summaries[variant.key]
        versus = ratio(base, summary) if family.inverted else ratio(summary, base)
        rows.append(throughput_row(variant, summary, versus))
    return {
        "name": family.name,
        "title": family.title,
        "note": family.note,
        "ratio_label": family.ratio_label,
        "rows": rows,
    }


def family_headlines(family: Family, section: dict[str, Any]) -> list[Row]:
    """Each variant's ratio to the baseline, against the family's target (``Family.headline``)."""
    if not family.headline:
        return []
    (base,) = [r for r in section["rows"] if r["key"] == family.baseline.key]
    headlines = []
    for row in section["rows"]:
        if row is base:
            continue
        value = None if row.get("ratio") is None else row["ratio"]["ratio"]
        pair = (family.baseline.label, row["variant"])
        name = " ÷ ".join(pair if family.inverted else pair[::-1])
        headlines.append(
            _make_headline(name, value, family.target, at_least=True, sides=(row, base))
        )
    return headlines


def _make_headline(
    name: str, value: float | None, target: float | None, at_least: bool, sides: Sequence[Row]
) -> Row:
    """A headline ratio of the measurements ``sides`` (rows with their run counts; none when
    nothing was measured)."""
    met = None
    if value is not None and target is not None:
        met = value >= target if at_least else value <= target
    sign = ">=" if at_least else "<="
    weakest = min(sides, key=lambda side: side["undisturbed_runs"], default=None)
    return {
        "metric": name,
        "value": value,
        "target": None if target is None else f"{sign} {target}",
        "met": met,
        "undisturbed_runs": None
        if weakest is None
        else f"{weakest['undisturbed_runs']} of {weakest['successful_runs']}",
    }


def restore_section(restore: dict[str, Any]) -> dict[str, Any]:
    """The restore table: time to the first micro-batch from states at three steps."""
    if not restore.get("ok"):
        return {"name": "restore", "error": restore.get("error", "unknown error")}
    result = restore["result"]
    lanes = result["spec"]["lanes"]
    rows = []
    for name, point in result["points"].items():
        runs, disturbed = undisturbed(point["runs"], lambda r: r["other_load_percent"])
        seconds = statistics.median(r["seconds"] for r in runs)
        tokenized = [r["tokenized"] for r in runs if r["tokenized"] is not None]
        loads = [r["other_load_percent"] for r in runs if r["other_load_percent"] is not None]
        rows.append(
            {
                "state": name,
                "step": point["step"],
                "mean_window": point["mean_window"],
                "mean_offset": point["mean_offset"],
                "median_s": seconds,
                "median_s_per_lane": seconds / lanes,
                "tokenized_k": statistics.median(tokenized) / 1e3 if tokenized else None,
                "batch_matches": all(r["matches"] for r in point["runs"]),
                "other_load_percent": statistics.median(loads) if loads else None,
                "runs": _runs_used(len(runs), len(point["runs"]), disturbed),
                **_make_run_evidence(0 if disturbed else len(runs), len(point["runs"])),
            }
        )
    for row in rows:
        row["vs_early"] = row["median_s"] / rows[0]["median_s"]
    return {
        "name": "restore",
        "spec": result["spec"],
        "replay_from_start_s": result["replay_from_start_s"],
        "rows": rows,
    }


def restore_headlines(section: dict[str, Any]) -> list[Row]:
    """late/early and late/matched restore time ratios (not measured: the restore failed)."""
    if "error" in section:
        return [
            _make_headline(
                f"restore late ÷ {other}", None, RESTORE_TARGET, at_least=False, sides=()
            )
            for other in RESTORE_BASES
        ]
    by_state = {r["state"]: r for r in section["rows"]}
    late = by_state["late"]
    return [
        _make_headline(
            f"restore step {late['step']:,} ÷ step {by_state[other]['step']:,} ({other})",
            late["median_s"] / by_state[other]["median_s"],
            RESTORE_TARGET,
            at_least=False,
            sides=(late, by_state[other]),
        )
        for other in RESTORE_BASES
    ]


def build_report(
    meta: dict[str, Any],
    selected: list[Family],
    outputs: dict[str, list[dict[str, Any]]],
    restore: dict[str, Any] | None,
) -> dict[str, Any]:
    """The whole report: metadata, headline ratios, one section per family, raw runs."""
    summaries = {key: summarize(runs) for key, runs in outputs.items()}
    sections = [family_section(f, summaries) for f in selected]
    headlines = [h for f, s in zip(selected, sections, strict=True) for h in family_headlines(f, s)]
    if restore is not None:
        section = restore_section(restore)
        # Benchmark 3: after "limit" and "alternatives" (1 and 2), before the others.
        sections.insert(sum(s["name"] in ("limit", "alternatives") for s in sections), section)
        headlines += restore_headlines(section)
    return {"meta": meta, "headlines": headlines, "sections": sections, "runs": outputs}


# -- markdown ------------------------------------------------------------------------------------


def _format_value(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _format_verdict(headline: Row) -> str:
    if headline["target"] is None:
        return "no target"
    if headline["met"] is None:
        return "not measured"
    return "met" if headline["met"] else "missed"


def _render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def _ratio_cells(versus: dict[str, float | None] | None) -> list[str]:
    if versus is None:
        return ["n/a", "n/a"]
    span = "n/a" if versus["min"] is None else f"{versus['min']:.2f}-{versus['max']:.2f}"
    return [f"{versus['ratio']:.2f}x", span]


def _throughput_markdown(section: dict[str, Any]) -> str:
    headers = ["variant", "M tokens/s", section["ratio_label"], "per-rep range"]
    headers += [header for header, _ in COLUMNS.values()]
    rows = []
    for row in section["rows"]:
        if "error" in row:
            rows.append([row["variant"], f"error: {row['error']}"] + [""] * (len(headers) - 2))
            continue
        versus = row["ratio"]
        cells = [row["variant"], _format_value(row["M_tokens_per_s"])]
        cells += _ratio_cells(versus)
        cells += [_format_value(row[c], digits) for c, (_, digits) in COLUMNS.items()]
        rows.append(cells)
    return "\n\n".join([f"## {section['title']}", section["note"], _render_table(headers, rows)])


def _restore_markdown(section: dict[str, Any]) -> str:
    title = "## 3. Restore cost: load_state_dict to the first micro-batch"
    if "error" in section:
        return f"{title}\n\nerror: {section['error']}"
    spec = section["spec"]
    note = (
        f"Pipeline: {spec['lanes']} lanes, parallelism {spec['parallelism']} ({spec['runner']}), "
        f"max_length {spec['max_length']}, global batch {spec['global_batch_size']} "
        f"(one sequence per lane per step), shuffle buffer 64, flush every 16 chunks. "
        "'offset' is how many sequences a lane had already delivered from its current flush "
        "window (mean over lanes): a restore replays that part of the window. 'matched' is "
        "the step in window 0 with the late state's mean offset. Reaching the late step "
        f"from step 0 took {section['replay_from_start_s']:.1f} s."
    )
    headers = [
        "state",
        "step",
        "mean window",
        "mean offset",
        "median s",
        "s per lane",
        "÷ early",
        "tokens tokenized by 1st batch (k)",
        "batch matches",
        "other load %",
        "runs used",
    ]
    rows = [
        [
            r["state"],
            _format_value(r["step"]),
            _format_value(r["mean_window"], 1),
            _format_value(r["mean_offset"], 0),
            _format_value(r["median_s"], 3),
            _format_value(r["median_s_per_lane"], 4),
            f"{r['vs_early']:.2f}x",
            _format_value(r["tokenized_k"], 0),
            _format_value(r["batch_matches"]),
            _format_value(r["other_load_percent"], 0),
            _format_value(r["runs"]),
        ]
        for r in section["rows"]
    ]
    return "\n\n".join([title, note, _render_table(headers, rows)])


def to_markdown(report: dict[str, Any]) -> str:
    """The report as markdown: metadata, headline ratios, then one table per benchmark."""
    meta = report["meta"]
    corpus = meta["corpus"]
    parts = [
        "# Zephon benchmarks",
        f"{meta['date']} · mode {meta['mode']} · {meta['reps']} round(s) (interleaved, "
        f"fresh process per measurement, medians) · {meta['machine']} · load average "
        f"{meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} after"
        f" · {meta['noise_spent_s']:.0f} of {meta['noise_budget_s']:.0f} s spent waiting for quiet"
        " and repeating disturbed measurements",
        "Corpus: "
        + ", ".join(
            f"{name} {corpus['text_bytes'][name] / 1e6:.1f} MB / "
            f"{corpus['tokens'][name] / 1e6:.2f}M tokens"
            for name in sorted(corpus["tokens"])
        )
        + f"; Zephon budget {meta['zephon_tokens'] / 1e6:.1f}M label tokens per run "
        f"(mixture = natural token shares), sequence length {meta['seq_len']}, gpt2.",
        "## Headline ratios",
        "Every ratio the benchmarks measure, its target met or missed. Undisturbed runs: those of "
        "the one of its two measurements that has fewer (its medians rest on them).",
        _render_table(
            ["metric", "value", "target", "target met", "undisturbed runs"],
            [
                [
                    h["metric"],
                    _format_value(h["value"]),
                    _format_value(h["target"]),
                    _format_verdict(h),
                    _format_value(h["undisturbed_runs"]),
                ]
                for h in report["headlines"]
            ],
        ),
    ]
    for section in report["sections"]:
        render = _restore_markdown if section["name"] == "restore" else _throughput_markdown
        parts.append(render(section))
    return "\n\n".join(parts) + "\n"
