"""What a search leaves for people: the trajectory per round, its plots and the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.search import Observations
from sweeps.mixes import mix_label
from sweeps.search_state import SearchState

TRAJECTORY_PLOT = "search_trajectory.png"
PREDICTIONS_PLOT = "search_predictions.png"


@dataclass(frozen=True, kw_only=True)
class TrajectoryPoint:
    """Where the search stood after one round."""

    round: int
    runs: int
    """Accepted runs so far."""
    best_observed: float
    """The best mean objective of any mixture run so far (over its replicates)."""
    recommended: dict[str, float]
    """The mixture the fit on the runs so far believes best."""
    recommended_predicted: float
    recommended_interval: tuple[float, float]
    model: str
    cv_spearman: float | None
    """The chosen model's out-of-sample Spearman correlation."""
    stop: bool
    predicted: list[float] = field(default_factory=list)
    """The round's proposed mixtures as predicted when proposed (empty for the design)."""
    observed: list[float] = field(default_factory=list)
    """The same mixtures' observed mean objective."""

    def metrics(self) -> dict[str, float]:
        """The round's figures as MLflow metrics (step: the round)."""
        low, high = self.recommended_interval
        metrics = {
            "search.runs": float(self.runs),
            "search.best_observed": self.best_observed,
            "search.recommended_predicted": self.recommended_predicted,
            "search.recommended_low": low,
            "search.recommended_high": high,
        }
        if self.cv_spearman is not None:
            metrics["search.cv_spearman"] = self.cv_spearman
        if self.predicted:
            errors = [abs(p - o) for p, o in zip(self.predicted, self.observed, strict=True)]
            metrics["search.prediction_error"] = sum(errors) / len(errors)
        return metrics


def trajectory(
    state: SearchState, observations: Observations, decimals: int
) -> list[TrajectoryPoint]:
    """One point per finished round with a proposal, from the state and the runs' scores."""
    objective = dict(zip(observations.ids, observations.objective, strict=True))
    points: list[TrajectoryPoint] = []
    best = float("inf")
    runs = 0
    for record in state.rounds:
        if not record.finished or record.proposal is None:
            break
        by_mixture: dict[str, list[float]] = {}
        for outcome in record.outcomes:
            label = mix_label(outcome["mixture"], decimals)
            by_mixture.setdefault(label, []).append(objective[outcome["mlflow_run_id"]])
        means = {label: sum(v) / len(v) for label, v in by_mixture.items()}
        best = min(best, *means.values())
        runs += len(record.outcomes)
        proposed = [
            (p, means[mix_label(m, decimals)])
            for m, p in zip(record.mixtures, record.predicted, strict=True)
            if p is not None
        ]
        proposal = record.proposal
        chosen = next(m for m in proposal["models"] if m["name"] == proposal["model"])
        points.append(
            TrajectoryPoint(
                round=record.number,
                runs=runs,
                best_observed=best,
                recommended=proposal["recommended"]["mixture"],
                recommended_predicted=proposal["recommended"]["predicted"],
                recommended_interval=tuple(proposal["recommended"]["interval"]),
                model=proposal["model"],
                cv_spearman=chosen["cv_spearman"],
                stop=proposal["stop"]["stop"],
                predicted=[p for p, _ in proposed],
                observed=[o for _, o in proposed],
            )
        )
    return points


def plot_search(points: list[TrajectoryPoint], folder: Path) -> list[Path]:
    """The trajectory (best observed so far and the recommendation's prediction per round)
    and predicted vs observed for every proposed mixture, as PNG files in ``folder``."""
    # deferred: ~0.4 s, and Hydra imports this module (its plugin) in every zephon-run
    import matplotlib

    matplotlib.use("Agg")  # files only: sweeps run without a display
    import matplotlib.pyplot as plt

    rounds = [p.round for p in points]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(rounds, [p.best_observed for p in points], "o-", label="best observed so far")
    axes.errorbar(
        rounds,
        [p.recommended_predicted for p in points],
        yerr=[
            [p.recommended_predicted - p.recommended_interval[0] for p in points],
            [p.recommended_interval[1] - p.recommended_predicted for p in points],
        ],
        fmt="s--",
        capsize=3,
        label="recommended, predicted (90% interval)",
    )
    axes.set(xlabel="round (0: initial design)", ylabel="objective (lower is better)")
    axes.set_xticks(rounds)
    axes.legend()
    figure.tight_layout()
    trajectory_path = folder / TRAJECTORY_PLOT
    figure.savefig(trajectory_path, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(5, 5))
    everything: list[float] = []
    for point in points:
        if point.predicted:
            axes.scatter(point.predicted, point.observed, label=f"round {point.round}")
            everything += point.predicted + point.observed
    if everything:
        low, high = min(everything), max(everything)
        axes.plot([low, high], [low, high], "k:", linewidth=1, label="predicted = observed")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no proposed mixture ran yet", ha="center", transform=axes.transAxes)
    axes.set(xlabel="predicted objective", ylabel="observed objective (mean of replicates)")
    figure.tight_layout()
    predictions_path = folder / PREDICTIONS_PLOT
    figure.savefig(predictions_path, dpi=110)
    plt.close(figure)
    return [trajectory_path, predictions_path]


def report_lines(state: SearchState, points: list[TrajectoryPoint], decimals: int) -> list[str]:
    """The search as the user reads it at the end: each round, the stop reason, the pick."""
    lines = ["== search"]
    for point, record in zip(points, state.rounds, strict=False):
        what = "initial design" if record.number == 0 else "proposed"
        lines.append(
            f"  round {record.number} ({what}, {len(record.mixtures)} mixtures): best observed "
            f"{point.best_observed:.4f}; model {point.model} (cv Spearman "
            f"{point.cv_spearman if point.cv_spearman is None else round(point.cv_spearman, 3)})"
        )
        for predicted, observed in zip(point.predicted, point.observed, strict=True):
            lines.append(f"    predicted {predicted:.4f}, observed {observed:.4f}")
    if points:
        last = points[-1]
        proposal = state.rounds[len(points) - 1].proposal or {}
        lines.append(f"  {proposal.get('stop', {}).get('reason', '')}")
        low, high = last.recommended_interval
        lines.append(
            f"  recommended: {mix_label(last.recommended, decimals)} predicted "
            f"{last.recommended_predicted:.4f} [{low:.4f}, {high:.4f}]"
        )
    return lines
