"""What a fit learns from: one mixture and its held-out scores per run, read from tables."""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.errors import SearchError

MIN_DISTINCT_MIXTURES = 4
"""Fewest distinct mixtures a fit accepts: k-fold validation needs some held out."""
PARAMS_COLUMN = "params"
"""A scores table's column of each run's model size (parameters), when runs are of several."""


@dataclass(frozen=True)
class Observations:
    """Runs as a design matrix: row ``i`` trained on ``mixtures[i]`` and scored ``scores[i]``.

    Replicates (other seeds, other dp sizes) are separate rows with equal mixtures.
    Lower scores are better; the objective is the mean of the target columns. ``blocks``
    names each run's seed block when known: runs of one block share initial weights and
    data order, so a block shifts every mixture's score alike (the guard pairs by it), and
    its effect is estimated and removed before fitting (:meth:`without_block_effects`).
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
    blocks: tuple[str, ...] | None = None
    """Each run's seed block (None: unknown, every run its own)."""
    params: np.ndarray | None = None
    """Each run's model size in parameters (None: one size, not given)."""

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
        assert self.blocks is None or len(self.blocks) == runs, (
            f"blocks must name one block per run ({runs}), got {len(self.blocks)}"
        )
        assert self.params is None or self.params.shape == (runs,), (
            f"params must give one size per run ({runs}), got {self.params.shape}"
        )

    @property
    def sizes(self) -> list[float]:
        """The distinct model sizes observed, smallest first ([] when not given)."""
        return [] if self.params is None else sorted({float(n) for n in self.params})

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
            blocks=None if self.blocks is None else tuple(self.blocks[i] for i in index),
            params=None if self.params is None else self.params[index],
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
            blocks=None
            if self.blocks is None or other.blocks is None
            else self.blocks + other.blocks,
            params=None
            if self.params is None or other.params is None
            else np.concatenate([self.params, other.params]),
        )

    def best_observed(self) -> tuple[np.ndarray, float]:
        """The distinct mixture with the lowest mean objective over its replicates, and that
        mean."""
        objective = self.objective
        means = [(float(objective[rows].mean()), rows[0]) for rows in self.mixture_groups()]
        mean, row = min(means)
        return self.mixtures[row], mean

    def replicate_noise(self) -> float:
        """Standard deviation of the objective between replicates of one mixture, after the
        seed blocks' effects (pooled residual of ``mixture + block``; 0 when no mixture was
        run twice)."""
        fitted = self._additive_fit(self.objective, with_mixtures=True)
        if fitted is None:
            return 0.0
        squares, freedom = fitted
        return math.sqrt(squares / freedom)

    def mixture_effect_p_value(self) -> float | None:
        """The p-value of the F test of ``mixture + block`` against ``block`` alone on the
        objective (large: the mixtures differ no more than their replicates); None without
        replicates to measure noise."""
        from scipy.stats import f as f_distribution

        full = self._additive_fit(self.objective, with_mixtures=True)
        reduced = self._additive_fit(self.objective, with_mixtures=False)
        if full is None or reduced is None or full[0] <= 0:
            return None
        (full_squares, full_freedom), (reduced_squares, reduced_freedom) = full, reduced
        extra = reduced_freedom - full_freedom
        if extra <= 0:
            return None
        statistic = ((reduced_squares - full_squares) / extra) / (full_squares / full_freedom)
        return float(f_distribution.sf(statistic, extra, full_freedom))

    def without_block_effects(self) -> Observations:
        """These runs with each seed block's estimated effect (from ``mixture + block`` least
        squares, centred so the level is kept) taken off every score; unchanged without
        blocks or with one."""
        if self.blocks is None or len(set(self.blocks)) < 2:
            return self
        design, block_columns = self._build_design_matrix(with_mixtures=True)
        coefficients = np.linalg.lstsq(design, self.scores, rcond=None)[0]
        effects = design[:, block_columns] @ coefficients[block_columns]
        return replace(self, scores=self.scores - (effects - effects.mean(axis=0)))

    def _build_design_matrix(self, with_mixtures: bool) -> tuple[np.ndarray, slice]:
        """The dummy-coded design matrix (an intercept or one column per mixture, then one
        column per block but the first) and the slice of its block columns."""
        columns = []
        if with_mixtures:
            groups = self.mixture_groups()
            mixture_columns = np.zeros((len(self.ids), len(groups)))
            for g, rows in enumerate(groups):
                mixture_columns[rows, g] = 1.0
            columns.append(mixture_columns)
        else:
            columns.append(np.ones((len(self.ids), 1)))
        first_block = columns[0].shape[1]
        names = sorted(set(self.blocks or ()))
        if len(names) > 1:
            assert self.blocks is not None
            block_columns = np.array([[b == name for name in names[1:]] for b in self.blocks])
            columns.append(block_columns.astype(float))
        design = np.hstack(columns)
        return design, slice(first_block, design.shape[1])

    def _additive_fit(self, values: np.ndarray, with_mixtures: bool) -> tuple[float, int] | None:
        """(residual sum of squares, residual degrees of freedom) of ``values`` regressed on
        the design; None when no degree of freedom is left."""
        design, _ = self._build_design_matrix(with_mixtures)
        coefficients = np.linalg.lstsq(design, values, rcond=None)[0]
        freedom = len(values) - int(np.linalg.matrix_rank(design))
        if freedom <= 0:
            return None
        residual = values - design @ coefficients
        return float(residual @ residual), freedom

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


@dataclass(frozen=True)
class RunRecord:
    """One run as plain data: its id, token shares and scores (the inline form of a table row)."""

    id: str
    mixture: dict[str, float]
    scores: dict[str, float]


def records_from_json(items: Sequence[Any]) -> list[RunRecord]:
    """Runs given inline as ``[{"id": ..., "mixture": {domain: weight}, "scores": {target:
    score}}, ...]`` (an agent's table); :class:`SearchError` names every malformed item."""
    problems, records = [], []
    for number, item in enumerate(items):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("mixture"), dict)
            or not isinstance(item.get("scores"), dict)
            or "id" not in item
        ):
            problems.append(
                f"run {number}: {str(item)[:80]} is not "
                '{"id": ..., "mixture": {domain: weight}, "scores": {target: score}}'
            )
            continue
        records.append(RunRecord(str(item["id"]), dict(item["mixture"]), dict(item["scores"])))
    if problems:
        raise SearchError(problems)
    return records


def observations_from_records(
    records: Sequence[RunRecord], targets: Sequence[str], source: str = "the runs"
) -> Observations:
    """Observations of ``records`` on ``targets``; :class:`SearchError` lists every problem
    (no target, a missing score, weights that are negative, not finite or sum to 0)."""
    problems: list[str] = []
    if not targets:
        problems.append("no target given: name one or more score columns")
    if not records:
        problems.append(f"{source}: no runs")
    domains = tuple(sorted({d for r in records for d in r.mixture}))
    repeated = sorted(i for i, n in Counter(r.id for r in records).items() if n > 1)
    if repeated:
        problems.append(f"{source}: ids {repeated[:5]} appear more than once; ids must be unique")
    for record in records:
        weights = list(record.mixture.values())
        if not all(_is_finite_number(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            problems.append(
                f"{source}: run {record.id!r} has weights {record.mixture}: use finite "
                "weights >= 0, at least one > 0"
            )
        missing = [t for t in targets if t not in record.scores]
        if missing:
            problems.append(
                f"{source}: run {record.id!r} has no score {missing}; it has "
                f"{sorted(record.scores)}"
            )
        elif not all(_is_finite_number(record.scores[t]) for t in targets):
            problems.append(f"{source}: run {record.id!r} has a score that is not a finite number")
    sized = [r for r in records if PARAMS_COLUMN in r.scores]
    if sized and len(sized) != len(records):
        problems.append(
            f"{source}: {len(records) - len(sized)} runs have no {PARAMS_COLUMN!r} (model size); "
            "give every run its size or none"
        )
    elif sized and not all(
        _is_finite_number(r.scores[PARAMS_COLUMN]) and r.scores[PARAMS_COLUMN] > 0 for r in sized
    ):
        problems.append(f"{source}: {PARAMS_COLUMN!r} must be a positive parameter count")
    if PARAMS_COLUMN in targets:
        problems.append(f"{PARAMS_COLUMN!r} is the runs' model size, not a score to target")
    if problems:
        raise SearchError(problems)
    mixtures = np.array([[float(r.mixture.get(d, 0.0)) for d in domains] for r in records])
    return Observations(
        ids=tuple(r.id for r in records),
        domains=domains,
        mixtures=mixtures / mixtures.sum(axis=1, keepdims=True),
        targets=tuple(targets),
        scores=np.array([[float(r.scores[t]) for t in targets] for r in records]),
        params=np.array([float(r.scores[PARAMS_COLUMN]) for r in records]) if sized else None,
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
    mixture_rows = _read_table(mixtures_csv, problems)
    score_rows = _read_table(scores_csv, problems)
    if problems or mixture_rows is None or score_rows is None:
        raise SearchError(problems)
    (mixture_header, mixture_table), (score_header, score_table) = mixture_rows, score_rows
    missing = [t for t in targets if t not in score_header[1:]]
    if missing:
        problems.append(
            f"{scores_csv}: no column {missing}; its score columns are {score_header[1:]}"
        )
    for ids, here, there in (
        (sorted(mixture_table.keys() - score_table.keys()), mixtures_csv, scores_csv),
        (sorted(score_table.keys() - mixture_table.keys()), scores_csv, mixtures_csv),
    ):
        if ids:
            problems.append(
                f"{len(ids)} ids of {here} are not in {there} (first: {ids[:5]}); "
                "both files need a row for every run"
            )
    if problems:
        raise SearchError(problems)
    records = [
        RunRecord(
            run_id,
            _parse_numbers(
                mixture_header[1:], cells, path=mixtures_csv, run_id=run_id, problems=problems
            ),
            _parse_numbers(
                score_header[1:],
                score_table[run_id],
                path=scores_csv,
                run_id=run_id,
                problems=problems,
            ),
        )
        for run_id, cells in mixture_table.items()
    ]
    if problems:
        raise SearchError(
            problems[:10] + ([f"... {len(problems) - 10} more"] if len(problems) > 10 else [])
        )
    return observations_from_records(records, targets, source=f"{mixtures_csv}")


def read_mixtures(path: str | Path, domains: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The ids and mixtures (``(rows, len(domains))``, normalised, in ``domains`` order) of a
    CSV file of an id column and weight columns; a domain it lacks gets 0, a column that is
    not one of ``domains`` is refused (the fit knows nothing of it)."""
    problems: list[str] = []
    table = _read_table(path, problems)
    if table is None:
        raise SearchError(problems)
    header, rows = table
    unknown = sorted(set(header[1:]) - set(domains))
    if unknown:
        raise SearchError(
            [f"{path}: columns {unknown} are not domains of the fit ({', '.join(domains)})"]
        )
    records = [
        RunRecord(
            run_id,
            _parse_numbers(header[1:], cells, path=path, run_id=run_id, problems=problems),
            {},
        )
        for run_id, cells in rows.items()
    ]
    if problems:
        raise SearchError(problems)
    weights = np.array([[r.mixture.get(d, 0.0) for d in domains] for r in records])
    bad = [
        r.id for r, row in zip(records, weights, strict=True) if (row < 0).any() or row.sum() <= 0
    ]
    if bad:
        raise SearchError([f"{path}: rows {bad[:5]} have negative weights or weights summing to 0"])
    return [r.id for r in records], weights / weights.sum(axis=1, keepdims=True)


def _is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
    if len(rows) < 2 or len(rows[0]) < 2:
        problems.append(f"{path}: needs a header of an id and one or more columns, and data rows")
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


def _parse_numbers(
    columns: Sequence[str],
    cells: Sequence[str],
    *,
    path: str | Path,
    run_id: str,
    problems: list[str],
) -> dict[str, float]:
    """``{column: float(cell)}``; a cell that is not a number is noted in ``problems``."""
    values = {}
    for column, cell in zip(columns, cells, strict=True):
        try:
            values[column] = float(cell)
        except ValueError:
            problems.append(f"{path}: run {run_id!r}, column {column!r}: {cell!r} is not a number")
    return values
