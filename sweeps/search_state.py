"""A search's spec and state: what ``hydra.sweeper.mix.search`` asks for, and every round so
far, kept in a file so that a continued search picks up where it was."""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    """``hydra.sweeper.mix.search``: how long to search and how many runs a round."""

    rounds: int = 2
    """Rounds of fit -> propose -> run after the initial design (fewer if it stops)."""
    per_round: int = 2
    """Mixtures proposed per round (each run under every replicate seed and dp size)."""
    initial: int = 2
    """Dirichlet draws in the initial design, besides the uniform and token-proportional mix."""
    seed: int = 0
    """Seed of the draws, the folds, the bootstrap refits and the proposals."""
    max_epochs: float = 4.0
    """A dataset's share is capped at this many passes over its tokens in one run."""
    min_gain: float | None = None
    """The stop signal's least worthwhile gain in the objective; None: the replicate noise."""
    stop: bool = True
    """End at the stop signal; false: run every round whatever it says."""

    @classmethod
    def from_config(cls, values: dict[str, Any]) -> SearchSpec:
        """The spec of ``values``; ExperimentError naming every unknown key or bad value."""
        known = {f.name for f in fields(cls)}
        problems = [
            f"hydra.sweeper.mix.search.{key}: unknown; use {sorted(known)}"
            for key in sorted(set(values) - known)
        ]
        if problems:
            raise ExperimentError(problems)
        spec = cls(**values)
        for name, least in (("rounds", 0), ("per_round", 1), ("initial", 0), ("seed", 0)):
            value = getattr(spec, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                problems.append(
                    f"hydra.sweeper.mix.search.{name}={value!r}: use a whole number >= {least}"
                )
        if not isinstance(spec.stop, bool):
            problems.append(f"hydra.sweeper.mix.search.stop={spec.stop!r}: use true or false")
        if not spec.max_epochs > 0:
            problems.append(f"hydra.sweeper.mix.search.max_epochs={spec.max_epochs}: use > 0")
        if problems:
            raise ExperimentError(problems)
        return spec


@dataclass
class SearchRound:
    """One round: its mixtures and, once finished, its runs, verdict and the proposal made
    after it."""

    number: int
    """0: the initial design; -1: the confirmation."""
    mixtures: list[dict[str, float]]
    _: KW_ONLY
    first_job: int
    """The job number (run folder ``<sweep>-<number>``) of the round's first job."""
    predicted: list[float | None] = field(default_factory=list)
    """Per mixture, the objective the fit predicted when it proposed it (None: not proposed)."""
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    accepted: bool | None = None
    """The guard's verdict on every accepted run so far plus this round's (None: not run)."""
    comparison_run_id: str | None = None
    refusals: list[str] = field(default_factory=list)
    proposal: dict[str, Any] | None = None
    """``propose(...).to_json()`` of the fit on every accepted run up to this round."""
    proposal_inputs: dict[str, Any] | None = None
    """What made ``proposal``: ``fit(observations_from_runs(run_ids), seed=seed)`` then
    ``propose(..., count, bounds, seed, decimals, prior)``, so that anyone can redo it."""

    @property
    def finished(self) -> bool:
        return self.accepted is not None


@dataclass
class SearchState:
    """Every round so far, kept in a file so that a continued search picks up where it was."""

    path: Path
    rounds: list[SearchRound] = field(default_factory=list)
    confirmation: SearchRound | None = None

    @classmethod
    def load(cls, path: Path) -> SearchState:
        """The state in ``path``; empty if there is none (interrupted before round 0)."""
        if not path.exists():
            return cls(path)
        data = json.loads(path.read_text())
        confirmation = data.get("confirmation")
        return cls(
            path,
            [SearchRound(**r) for r in data["rounds"]],
            SearchRound(**confirmation) if confirmation else None,
        )

    def save(self) -> None:
        """Write the state (atomically: a crash leaves the previous one)."""
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        temporary.replace(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": [asdict(r) for r in self.rounds],
            "confirmation": asdict(self.confirmation) if self.confirmation else None,
        }
