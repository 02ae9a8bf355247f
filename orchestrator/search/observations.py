"""What a fit learns from: one mixture and its held-out scores per run, read from tables."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orchestrator.errors import SearchError

MIN_DISTINCT_MIXTURES = 4
"""Fewest distinct mixtures a fit accepts: k-fold validation needs some held out."""


@dataclass(frozen=True)
class Observations:
    """Runs as a design matrix: row ``i`` trained on ``mixtures[i]`` and scored ``scores[i]``.

    Replicates (other seeds, other dp sizes) are separate rows with equal mixtures.
    Lower scores are better; the objective is the mean of the target columns.
    """

    ids: tuple[str, ...]
    """One id per run (a run id, or the table's first column)."""
    domains: tuple[str, ...]
    """The mixture's columns, sorted."""
    mixtures: np.ndarray
    """``(runs, domains)`` token shares, each row summing to 1."""
    targets: tuple[str, ...]
    """The score columns (held-out domains); the objective is their mean."""
    scores: np.ndarray
    """``(runs, targets)``, lower is better."""

    def __post_init__(self) -> None:
        runs = len(self.ids)
        assert self.mixtures.shape == (runs, len(self.domains)), (
            f"mixtures must be (runs, domains) = ({runs}, {len(self.domains)}), "
            f"got {self.mixtures.shape}"
        )
        assert self.scores.shape == (runs, len(self.targets)), (
            f"scores must be (runs, targets) = ({runs}, {len(self.targets)}), "
            f"got {self.scores.shape}"
        )

    @property
    def objective(self) -> np.ndarray:
        """The mean of the target scores per run (lower is better)."""
        return self.scores.mean(axis=1)

    def mixture_groups(self, decimals: int = 6) -> list[np.ndarray]:
        """Row indexes per distinct mixture (replicates together), in order of first use."""
        keys: dict[tuple[float, ...], list[int]] = {}
        for row, mixture in enumerate(np.round(self.mixtures, decimals)):
            keys.setdefault(tuple(mixture.tolist()), []).append(row)
        return [np.asarray(rows) for rows in keys.values()]

    def subset(self, rows: Sequence[int] | np.ndarray) -> Observations:
        """The observations of ``rows`` (repeats allowed: a bootstrap sample)."""
        index = np.asarray(rows, dtype=int)
        return Observations(
            ids=tuple(self.ids[i] for i in index),
            domains=self.domains,
            mixtures=self.mixtures[index],
            targets=self.targets,
            scores=self.scores[index],
        )

    def concatenate(self, other: Observations) -> Observations:
        """These runs followed by ``other``'s (the same domains and targets)."""
        assert (other.domains, other.targets) == (self.domains, self.targets), (
            f"observations over domains {other.domains} and targets {other.targets} cannot "
            f"join those over {self.domains} and {self.targets}"
        )
        return Observations(
            ids=self.ids + other.ids,
            domains=self.domains,
            mixtures=np.vstack([self.mixtures, other.mixtures]),
            targets=self.targets,
            scores=np.vstack([self.scores, other.scores]),
        )

    def best_observed(self) -> tuple[np.ndarray, float]:
        """The distinct mixture with the lowest mean objective over its replicates, and that
        mean."""
        objective = self.objective
        means = [(float(objective[rows].mean()), rows[0]) for rows in self.mixture_groups()]
        mean, row = min(means)
        return self.mixtures[row], mean

    def replicate_noise(self) -> float:
        """Pooled standard deviation of the objective between replicates of one mixture
        (0 when no mixture was run twice)."""
        objective = self.objective
        squares, freedom = 0.0, 0
        for rows in self.mixture_groups():
            if len(rows) > 1:
                values = objective[rows]
                squares += float(((values - values.mean()) ** 2).sum())
                freedom += len(rows) - 1
        return math.sqrt(squares / freedom) if freedom else 0.0

    def check_fittable(self) -> None:
        """Raise :class:`SearchError` unless a fit can be validated on these observations."""
        distinct = len(self.mixture_groups())
        if distinct < MIN_DISTINCT_MIXTURES:
            raise SearchError(
                [
                    f"{distinct} distinct mixtures observed; a fit needs at least "
                    f"{MIN_DISTINCT_MIXTURES} (k-fold validation holds some out): run more "
                    "mixtures first"
                ]
            )


def read_tables(
    mixtures_csv: str | Path, scores_csv: str | Path, targets: Sequence[str]
) -> Observations:
    """Observations from two CSV files that share their first column (a run id).

    ``mixtures_csv``: the other columns are domain weights (normalised per row).
    ``scores_csv``: the columns named in ``targets`` are scores, lower is better. Every id
    must be in both files, once. Raises :class:`SearchError` listing every problem.
    """
    problems: list[str] = []
    if not targets:
        problems.append("no target column given: name one or more with --target COL[,COL...]")
    mixture_rows = _read_table(mixtures_csv, problems)
    score_rows = _read_table(scores_csv, problems)
    if problems or mixture_rows is None or score_rows is None:
        raise SearchError(problems)
    mixture_header, mixture_table = mixture_rows
    score_header, score_table = score_rows
    domains = mixture_header[1:]
    if not domains:
        problems.append(f"{mixtures_csv}: no domain columns after the id column")
    missing = [t for t in targets if t not in score_header[1:]]
    if missing:
        problems.append(
            f"{scores_csv}: no column {missing}; its score columns are {score_header[1:]}"
        )
    only_mixtures = sorted(mixture_table.keys() - score_table.keys())
    only_scores = sorted(score_table.keys() - mixture_table.keys())
    for ids, here, there in (
        (only_mixtures, mixtures_csv, scores_csv),
        (only_scores, scores_csv, mixtures_csv),
    ):
        if ids:
            problems.append(
                f"{len(ids)} ids of {here} are not in {there} (first: {ids[:5]}); "
                "both files need a row for every run"
            )
    if problems:
        raise SearchError(problems)
    ids = list(mixture_table)
    weights = _numbers(mixture_table, ids, domains, mixtures_csv, problems)
    columns = [score_header[1:].index(t) for t in targets]
    scores = _numbers(
        {i: [score_table[i][c] for c in columns] for i in ids}, ids, targets, scores_csv, problems
    )
    if weights is not None:
        bad = [ids[r] for r in range(len(ids)) if (weights[r] < 0).any() or weights[r].sum() <= 0]
        if bad:
            problems.append(
                f"{mixtures_csv}: rows {bad[:5]} have negative weights or weights summing to 0"
            )
    if problems or weights is None or scores is None:
        raise SearchError(problems)
    order = np.argsort(domains, kind="stable")
    observations = Observations(
        ids=tuple(ids),
        domains=tuple(domains[i] for i in order),
        mixtures=(weights / weights.sum(axis=1, keepdims=True))[:, order],
        targets=tuple(targets),
        scores=scores,
    )
    return observations


def _read_table(
    path: str | Path, problems: list[str]
) -> tuple[list[str], dict[str, list[str]]] | None:
    """``(header, {id: other cells})`` of a CSV file; None (with the problem noted) if it
    cannot be read."""
    try:
        with open(path, newline="") as handle:
            rows = [row for row in csv.reader(handle) if row]
    except OSError as e:
        problems.append(f"cannot read {path}: {e.strerror or e}")
        return None
    if len(rows) < 2:
        problems.append(f"{path}: needs a header row and at least one data row")
        return None
    header, body = rows[0], rows[1:]
    table: dict[str, list[str]] = {}
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            problems.append(f"{path} line {line}: {len(row)} cells, the header has {len(header)}")
            return None
        if row[0] in table:
            problems.append(f"{path} line {line}: id {row[0]!r} appears twice; ids must be unique")
            return None
        table[row[0]] = row[1:]
    return header, table


def _numbers(
    table: dict[str, list[str]],
    ids: list[str],
    columns: Sequence[str],
    path: str | Path,
    problems: list[str],
) -> np.ndarray | None:
    """The cells of ``table`` as a finite float matrix; None with the problem noted."""
    try:
        values = np.array([[float(cell) for cell in table[i]] for i in ids], dtype=float)
    except ValueError as e:
        problems.append(f"{path}: a cell of columns {list(columns)} is not a number ({e})")
        return None
    if not np.isfinite(values).all():
        row = ids[int(np.argwhere(~np.isfinite(values))[0][0])]
        problems.append(f"{path}: row {row!r} has a value that is not finite")
        return None
    return values
