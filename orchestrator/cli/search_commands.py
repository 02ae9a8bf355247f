"""``zephon fit`` and ``propose``: mixture -> score models over tables or Zephon runs."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.errors import EXIT_OK
from orchestrator.search import Bounds, FitResult, Observations, fit, propose, read_tables
from orchestrator.search.observations import read_mixtures
from orchestrator.search.repetition_caps import capped_bounds
from orchestrator.search.run_observations import observations_from_runs, run_experiment
from pipeline import ConfigError


def _read_observations(args: argparse.Namespace) -> Observations:
    """The observations the command names: tables (--mixtures, --scores) or Zephon runs."""
    targets = args.target.split(",") if args.target else None
    if args.mixtures or args.scores:
        if not (args.mixtures and args.scores and targets):
            raise ConfigError("tables need all three: --mixtures M.csv --scores S.csv --target COL")
        if args.run_ids or args.sweep or args.experiment:
            raise ConfigError("give tables (--mixtures/--scores) or runs, not both")
        return read_tables(args.mixtures, args.scores, targets)
    return observations_from_runs(
        args.run_ids,
        sweep=args.sweep,
        experiment=args.experiment,
        tracking_uri=args.tracking_uri,
        targets=targets,
    )


def _fit_observations(args: argparse.Namespace) -> FitResult:
    """The models fitted to the command's observations, with their k-fold figures."""
    models = args.models.split(",") if args.models else None
    return fit(
        _read_observations(args),
        models=models,
        folds=args.folds,
        seed=args.seed,
        at_size=args.at_size,
    )


def command_fit(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    result = _fit_observations(args)
    payload = result.to_json()
    if args.predict:
        ids, mixtures = read_mixtures(args.predict, result.observations.domains)
        payload["predictions"] = [
            {"id": run_id, "score": p.predicted, "interval": p.to_json()["interval"]}
            for run_id, p in zip(ids, result.predictions(mixtures), strict=True)
        ]
    return EXIT_OK, payload


def command_propose(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    bounds = Bounds(_parse_shares(args.min, "--min"), _parse_shares(args.max, "--max"))
    if args.tokens or args.budget:
        if not (args.tokens and args.budget):
            raise ConfigError("a repetition cap needs both --tokens DOMAIN=N ... and --budget N")
        bounds = bounds.with_repetition_cap(
            _parse_shares(args.tokens, "--tokens"), args.budget, args.max_epochs
        )
    fitted = _fit_observations(args)
    if not args.mixtures:  # Zephon runs: the cap from their datasets and token budget
        experiment = run_experiment(fitted.observations.ids[0], args.tracking_uri)
        bounds = capped_bounds(experiment, bounds, args.max_epochs)
    prior = _parse_shares(args.prior.split(","), "--prior") if args.prior else None
    proposal = propose(
        fitted,
        count=args.n,
        bounds=bounds,
        seed=args.seed,
        decimals=args.decimals,
        min_gain=args.min_gain,
        prior=prior,
    )
    return EXIT_OK, proposal.to_json()


def _parse_shares(pairs: list[str], option: str) -> dict[str, float]:
    """``["code=0.2", ...]`` as ``{"code": 0.2}``; ConfigError naming ``option`` if malformed."""
    shares = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            shares[name.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{option} {pair!r}: write DOMAIN=NUMBER, e.g. code=0.2") from None
    return shares
