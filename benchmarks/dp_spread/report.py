"""The report: the markdown page (``docs/dp_spread.md``) and its figure (``docs/dp_spread.png``).

Both are written from the JSON report alone (``--render-only`` rewrites them from
``benchmarks/results/dp_spread.json``), so every number on the page is one the JSON holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.dp_spread.analysis import spread
from benchmarks.dp_spread.design import LOADERS, MODELS

LABELS = {"stock": "TorchTitan stock loader", "zephon": "Zephon lane loader"}
COLORS = {"stock": "#d62728", "zephon": "#1f77b4"}
STUDY = (
    {"benchmark": "benchmark A", "stock": 0.82, "lanes": 0.05},
    {"benchmark": "benchmark B", "stock": 0.64, "lanes": 0.011},
)
"""The spread of eval scores (points) across 8/16/32/64 GPUs that the study behind Zephon
reports (:data:`STUDY_SOURCE`): benchmark A is DCLM Core v1, benchmark B FineWeb's. Not
measured here: the page says ``quoted from`` its source wherever it writes them."""
STUDY_SOURCE = (
    "the Zephon team's post on the PyTorch blog of 16 October, 20 billion tokens from scratch "
    "on 8 to 64 GPUs"
)
RESULTS_PATH = "`benchmarks/results/dp_spread.json`"
"""Where the page's own numbers come from (``tests/test_docs_figures.py`` checks them there)."""


def _format_difference(x: float) -> str:
    """A score difference: 0 as 0, small ones in scientific notation."""
    return "0" if x == 0 else f"{x:.2e}" if abs(x) < 1e-3 else f"{x:.4f}"


def plot(report: dict[str, Any], path: Path) -> None:
    """Aggregate bpb per dp for both loaders (eval noise band), and the spreads per domain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), width_ratios=[1.1, 1])
    for loader in LOADERS:
        s = summary[loader]
        dps, agg = s["dps"], s["aggregate_bpb"]
        noise = s["eval_noise"]["aggregate"]
        left.plot(dps, agg, "o-", color=COLORS[loader], lw=2, label=LABELS[loader])
        low, high = np.array(agg) - noise, np.array(agg) + noise
        left.fill_between(dps, low, high, color=COLORS[loader], alpha=0.2, lw=0)
        left.annotate(
            f"spread {_format_difference(s['spread']['aggregate'])}",
            (dps[-1], agg[-1]),
            textcoords="offset points",
            xytext=(8, 0),
            va="center",
            color=COLORS[loader],
            fontsize=9,
        )
    left.set_xscale("log", base=2)
    left.set_xticks(summary["stock"]["dps"], [str(d) for d in summary["stock"]["dps"]])
    left.set_xlim(left.get_xlim()[0], left.get_xlim()[1] * 1.6)
    left.set_xlabel("data-parallel processes (dp)")
    left.set_ylabel("held-out bits per byte (mean of domains)")
    noises = [summary[k]["eval_noise"]["aggregate"] for k in LOADERS]
    noise_text = (
        "0 for both: bit-identical re-runs"
        if not any(noises)
        else ", ".join(f"{k} {_format_difference(n)}" for k, n in zip(LOADERS, noises, strict=True))
    )
    dps_text = "/".join(map(str, summary["stock"]["dps"]))
    left.set_title(
        f"Same model ({MODELS[report['meta']['model']].base}) and initial weights, "
        f"{report['meta']['steps']} steps, on dp {dps_text}\n"
        f"band: eval re-run noise ({noise_text})",
        fontsize=10,
    )
    left.grid(alpha=0.3)

    keys = ["aggregate", *sorted(summary["stock"]["bpb"])]
    x = np.arange(len(keys))
    floor = 1e-7  # a spread of exactly 0 still shows on the log axis
    for i, loader in enumerate(LOADERS):
        values = [max(summary[loader]["spread"][k], floor) for k in keys]
        bars = right.bar(
            x + (i - 0.5) * 0.38, values, 0.38, color=COLORS[loader], label=LABELS[loader]
        )
        for bar, k in zip(bars, keys, strict=True):
            right.annotate(
                _format_difference(summary[loader]["spread"][k]),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                textcoords="offset points",
                xytext=(0, 2),
                ha="center",
                fontsize=7,
            )
    right.set_yscale("log")
    right.set_xticks(x, keys)
    right.set_ylabel("spread across dp (max - min bits/byte)")
    ratio = summary.get("spread_ratio")
    ratio_text = f"stock / Zephon = {ratio:.0f}x" if ratio else "Zephon spread 0"
    right.set_title(f"Spread of the score across dp sizes ({ratio_text})", fontsize=10)
    right.grid(alpha=0.3, axis="y")
    right.set_ylim(top=right.get_ylim()[1] * 3)  # room for the labels
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _write_verdict(summary: dict[str, Any]) -> str:
    stock, zephon = summary["stock"], summary["zephon"]
    s, z = stock["spread"]["aggregate"], zephon["spread"]["aggregate"]
    ratio = summary.get("spread_ratio")
    study = ", ".join(f"{b['stock'] / b['lanes']:.0f}x" for b in STUDY)
    if ratio is None:
        size = "Zephon's aggregate score did not move at all across dp sizes"
    elif ratio >= 5:
        size = (
            f"Zephon's spread is {ratio:.0f}x smaller than the stock loader's (quoted from "
            f"{STUDY_SOURCE}: "
            f"{study})"
        )
    elif ratio >= 1.5:
        size = (
            f"Zephon's spread is only {ratio:.1f}x smaller than the stock loader's, less of a gap "
            f"than the {study} quoted from {STUDY_SOURCE}"
        )
    else:
        size = (
            f"Zephon's spread is not smaller than the stock loader's in this run (ratio "
            f"{ratio:.2f}; quoted from {STUDY_SOURCE}: {study}): at this scale the float-order differences "
            "dominate whatever the data order adds"
        )
    noise = max(stock["eval_noise"]["aggregate"], zephon["eval_noise"]["aggregate"])
    noise_text = (
        "The evaluation itself is bit-for-bit repeatable here (re-run noise 0: deterministic "
        "CPU kernels), so every difference in the table comes from training, not from the eval."
        if noise == 0
        else f"The eval's re-run noise is at most {_format_difference(noise)} bits/byte."
    )
    dps = "/".join(map(str, stock["dps"]))
    first = ""
    if None not in zephon["first_loss"] + stock["first_loss"]:
        z1 = spread(zephon["first_loss"])
        first = (
            " Zephon's step-1 training loss, on the same batch from the same weights, is "
            + (
                "bit-identical across dp sizes"
                if z1 == 0
                else f"within {_format_difference(z1)} (float order)"
            )
            + f"; the stock loader's, on different batches, differs by "
            f"{_format_difference(spread(stock['first_loss']))}."
        )
    return (
        f"Across dp {dps}, the stock loader's aggregate held-out score spreads over "
        f"{_format_difference(s)} bits/byte, Zephon's over {_format_difference(z)}: {size}. {noise_text}{first}"
    )


def to_markdown(report: dict[str, Any]) -> str:
    """The page ``docs/dp_spread.md`` of ``report`` (the JSON report)."""
    summary, meta = report["summary"], report["meta"]
    domains = sorted(summary["stock"]["bpb"])
    return "\n".join(
        [
            "# Score spread across dp sizes: stock loader vs lane loader",
            "",
            "<!-- generated by benchmarks/dp_spread (python -m benchmarks.dp_spread) from "
            f"{RESULTS_PATH.strip('`')}; do not edit by hand -->",
            "",
            "![aggregate held-out bits/byte per dp size, and the spread across dp sizes]"
            "(dp_spread.png)",
            "",
            _write_verdict(summary),
            "",
            *_write_score_table(summary, domains),
            "",
            *_next_to_study(summary, meta),
            "",
            *_global_batches(summary, meta),
            "",
            *_write_method(meta, domains),
            "",
            "## Reproduce",
            "",
            "```bash",
            meta["command"],
            "```",
            "",
            f"Machine: {meta['machine']}. Run {meta['date']}; whole benchmark "
            f"{meta['wall_minutes']:.1f} min ({2 * len(meta['dps'])} runs"
            + (" and the seed checkpoint" if meta["seed_checkpoint"] else "")
            + f", one after another; load average before "
            f"{meta['load_average_before'][0]:.1f}; {RESULTS_PATH}).",
            "",
        ]
    )


def _write_score_table(summary: dict[str, Any], domains: list[str]) -> list[str]:
    """The table of held-out scores per loader and dp, spreads and eval noise."""
    lines = [
        "## Held-out bits per byte (lower is better)",
        "",
        "| loader | dp | " + " | ".join(domains) + " | aggregate | step-1 loss | final loss |",
        "|---|---|" + "---|" * len(domains) + "---|---|---|",
    ]
    for loader in LOADERS:
        s = summary[loader]
        for i, dp in enumerate(s["dps"]):
            cells = [f"{s['bpb'][d][i]:.4f}" for d in domains]
            losses = " | ".join(
                "" if x is None else f"{x:.6f}" for x in (s["first_loss"][i], s["final_loss"][i])
            )
            lines.append(
                f"| {LABELS[loader]} | {dp} | "
                + " | ".join(cells)
                + f" | **{s['aggregate_bpb'][i]:.4f}** | {losses} |"
            )
        spreads = [_format_difference(s["spread"][d]) for d in domains]
        lines.append(
            f"| {LABELS[loader]} | spread (max - min) | "
            + " | ".join(spreads)
            + f" | **{_format_difference(s['spread']['aggregate'])}** | | |"
        )
        noise = [_format_difference(s["eval_noise"][d]) for d in domains]
        lines.append(
            f"| {LABELS[loader]} | eval re-run noise | "
            + " | ".join(noise)
            + f" | {_format_difference(s['eval_noise']['aggregate'])} | | |"
        )
    return lines


def _next_to_study(summary: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The spreads next to the original study's."""
    ratio = summary.get("spread_ratio")
    lines = [
        "## Spread across dp sizes, next to the study",
        "",
        f"The study's rows are not measured here: they are quoted from {STUDY_SOURCE}. "
        f"The last row is this run's ({RESULTS_PATH}).",
        "",
        "| | stock | lanes | stock / lanes |",
        "|---|---|---|---|",
    ]
    for b in STUDY:
        lines.append(
            f"| study, {b['benchmark']} (eval points, 8/16/32/64 GPUs; quoted from the study) "
            f"| {b['stock']} | "
            f"{b['lanes']} | {b['stock'] / b['lanes']:.0f}x |"
        )
    lines.append(
        f"| here, aggregate held-out bits/byte (dp {'/'.join(map(str, summary['stock']['dps']))}) | "
        f"{_format_difference(summary['stock']['spread']['aggregate'])} | "
        f"{_format_difference(summary['zephon']['spread']['aggregate'])} | "
        f"{'n/a (Zephon 0)' if ratio is None else f'{ratio:.0f}x' if ratio >= 10 else f'{ratio:.1f}x'} |"
    )
    model = MODELS[meta["model"]]
    return [
        *lines,
        "",
        "The study's numbers are eval-score points of a large model on real benchmarks; "
        f"these are bits per byte of a {model.parameters}-parameter model after {meta['steps']} "
        "steps. Only the ratios, and the spread next to the eval's noise, carry over.",
    ]


def _global_batches(summary: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Per loader and pair of dp sizes, how many steps had the same global batch."""
    lines = [
        "## Global batches per step",
        "",
        f"This run's global batches ({RESULTS_PATH}):",
        "",
        "| loader | pair | steps with the same global batch | share of the first run's sequences "
        "the second trained on at some step |",
        "|---|---|---|---|",
    ]
    for loader in LOADERS:
        s = summary[loader]
        for pair, e in s["agreement"].items():
            same = f"{e['steps_with_same_global_batch']} of {meta['steps']}"
            if loader == "zephon":
                same += (
                    f" (Zephon digests: {e['steps_with_same_zephon_digest']} of {meta['steps']})"
                )
            lines.append(
                f"| {LABELS[loader]} | {pair.replace('_vs_', ' vs ')} | {same} | "
                f"{e['sequences_shared_at_any_step']:.0%} |"
            )
    return [
        *lines,
        "",
        f"Same global batches on every dp size: stock "
        f"**{'yes' if summary['stock']['global_batches_agree'] else 'no'}**, Zephon "
        f"**{'yes' if summary['zephon']['global_batches_agree'] else 'no'}**.",
    ]


def _write_method(meta: dict[str, Any], domains: list[str]) -> list[str]:
    """How the numbers were made: runs, weights, corpus, loaders, scores, caveats."""
    model = MODELS[meta["model"]]
    return [
        "## Method",
        "",
        f"* **Runs.** For each loader and dp in {meta['dps']}: `torchrun --nproc-per-node dp` "
        f"on CPU (gloo), TorchTitan {meta['versions']['torchtitan']}, from scratch, "
        f"{meta['steps']} steps, global batch {meta['global_batch']} sequences of "
        f"{meta['seq_len']} tokens (local batch {meta['global_batch']} / dp, no gradient "
        "accumulation). Model, optimizer, lr schedule (warm-up 2, linear decay), seed 42 and "
        f"tokenizer (gpt2) are `{model.base}`'s for both loaders (`--model {meta['model']}`, "
        f"`benchmarks/dp_spread/configs.py`): {model.description}. One OpenMP thread per "
        "process.",
        "* **Initial weights.** "
        + (
            "Every run loads one TorchTitan seed checkpoint (`--checkpoint.create-seed-checkpoint` "
            "on 1 process, model only; `--checkpoint.initial-load-path`), TorchTitan's way to "
            "start all parallelisms from the same weights. With `--debug.seed` alone, TorchTitan "
            "0.3.0 on CPU initialises the FSDP-sharded model differently on each dp size "
            "(it warns that DTensor's `manual_seed` may not have complete support on CPU "
            "meshes, and the step-1 loss on the identical first batch then differs between dp "
            "sizes), which adds an init difference to both loaders' spread "
            "(`--no-seed-checkpoint` measures it)."
            if meta["seed_checkpoint"]
            else "`--debug.seed 42` only (`--no-seed-checkpoint`): on CPU, TorchTitan 0.3.0 "
            "initialises the FSDP-sharded model differently on each dp size, so both spreads "
            "include an init difference."
        ),
        f"* **Corpus.** `demo.local_corpus` capped at {meta['corpus_bytes_per_domain']:,} "
        f"text bytes per domain. Zephon's `WorkSource` with `holdout_bytes={meta['holdout_bytes']}` "
        "chooses each domain's held-out records (by dataset name alone); training records: "
        + ", ".join(
            f"{d} {meta['records'][d]['train']} ({meta['tokens'][d]:,} tokens)" for d in domains
        )
        + "; held out: "
        + ", ".join(
            f"{d} {meta['records'][d]['heldout']} ({meta['heldout_bytes'][d]:,} bytes)"
            for d in domains
        )
        + f" (the counts of {RESULTS_PATH}'s `meta`).",
        "* **Stock loader.** TorchTitan's `HuggingFaceTextDataLoader`, unchanged, reading a "
        "local JSON dataset of the training records only, rows in a seeded random order "
        "(written once; a map-style dataset is read in file order in its first epoch and "
        "split into contiguous blocks per dp rank). "
        + (
            "A rank's share ran out and restarted in: "
            + ", ".join(r for r in meta["relooped"])
            + "."
            if meta["relooped"]
            else "No rank reaches the end of its share of the data."
        ),
        "* **Zephon.** The lane pipeline (4 lanes, shuffle buffer 16), mixture = each "
        "domain's natural token share of the training records ("
        + ", ".join(f"{d} {meta['mixture'][d]:.3f}" for d in domains)
        + "), so both loaders draw from the same distribution.",
        "* **Scores.** `HeldOutEvaluator` at the last step, on the same held-out records for "
        "both loaders (for the stock runs a trainer subclass builds the `WorkSource` only to "
        "evaluate): bits per byte per domain, aggregate = their mean. It runs twice in a row "
        "on the final model; the difference is the *eval re-run noise* (the largest over dp "
        "sizes is shown).",
        "* **Spread** = max - min over dp sizes of a score. **Global batches**: each rank "
        "records the sha256 of every sequence it hands to the trainer; a step's global batch "
        "is the multiset over ranks, compared with dp "
        f"{meta['dps'][0]}'s; for Zephon also the global digests of `titan/zephon/steps.jsonl`.",
        "* **Caveat.** Zephon guarantees the data, not the arithmetic: dp sizes sum gradients "
        "in a different order (and run other matmul shapes), so its spread is float-order "
        "noise amplified by training. The stock loader's spread is that plus different data "
        "per step, and not only at random: each rank reads its own contiguous block of rows, so "
        "with fewer ranks a global batch holds consecutive sequences of fewer documents. One "
        "seed and one row order: the stock spread is one draw.",
    ]


def render(report: dict[str, Any], docs_dir: Path) -> str:
    """Write ``report``'s figure and page into ``docs_dir``; return the page."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    plot(report, docs_dir / "dp_spread.png")
    markdown = to_markdown(report)
    (docs_dir / "dp_spread.md").write_text(markdown)
    return markdown
