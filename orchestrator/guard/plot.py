"""The comparison plot: each variant's scores, one marker per replicate, coloured by dp size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.guard.comparison import Comparison, RunSummary
from orchestrator.guard.eval_smoothing import smoothed_runs


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
    # deferred: matplotlib takes ~1 s to import, and only an accepted comparison is drawn
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    step = comparison.eval_step
    runs = smoothed_runs(runs, step, last=comparison.smooth_last)  # the scores compared
    by_id = {r.run_id: r for r in runs}
    rows = comparison.rows
    domains = comparison.domains
    dp_kinds = sorted(
        {_dp_label(by_id[i].dp_sizes) for row in rows for i in row.run_ids},
        key=lambda s: (len(s), s),
    )
    palette = matplotlib.colormaps["tab10"]
    colour = {kind: palette(i % 10) for i, kind in enumerate(dp_kinds)}
    xs = list(range(len(rows)))
    labels = [f"#{row.rank}\n" + row.mixture.replace(" ", "\n") for row in rows]

    width = max(8.0, 1.7 * len(rows) + 3.0)
    ncols = max(1, len(domains))
    fig = Figure(figsize=(width, 8.5 if domains else 5.5), dpi=110, layout="constrained")
    grid = fig.add_gridspec(2 if domains else 1, ncols, height_ratios=[2.2, 1] if domains else [1])

    def panel(ax: Any, key: str | None, small: bool) -> None:
        for x, row in zip(xs, rows, strict=True):
            values = []
            for k, run_id in enumerate(row.run_ids):
                run = by_id[run_id]
                score = row.run_aggregates[k] if key is None else run.evals[step][key]
                values.append(score)
                n = len(row.run_ids)
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
            mean = row.aggregate_bpb if key is None else row.bpb[key]
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
        ax.set_xticks(xs, labels if not small else [str(r.rank) for r in rows])
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)

    main = fig.add_subplot(grid[0, :])
    panel(main, None, small=False)
    over = "" if comparison.decided_on == domains else f" ({', '.join(comparison.decided_on)})"
    main.set_ylabel(f"aggregate bits per byte{over} (lower is better)")
    last = comparison.smooth_last
    smoothed = f" (mean of the last {last} evals)" if last > 1 else ""
    main.set_title(
        f"Held-out bits per byte at eval step {step}{smoothed} — {len(rows)} mixtures, best "
        "first\n"
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
