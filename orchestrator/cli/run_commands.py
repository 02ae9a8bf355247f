"""``zephon plan``, ``run``, ``resume``, ``verify-elastic``, ``compare`` and ``sync``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED
from orchestrator.experiment.run_record import RunStatus
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.run.api import plan, plan_summary, resume, run, sync
from orchestrator.run.elastic_check import verify_elastic
from orchestrator.run.result import RunResult
from pipeline import ConfigError


def command_plan(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return EXIT_OK, plan_summary(plan(args.config, dp=args.dp, overrides=args.overrides))


def _run_exit(result: RunResult) -> tuple[int, dict[str, Any]]:
    """A run's exit code (0 succeeded, 130 interrupted, else 1) and its result."""
    code = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.INTERRUPTED: EXIT_INTERRUPTED}.get(
        result.status, EXIT_FAILED
    )
    return code, result.to_dict()


def command_run(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    named = {"run_name": args.name, "fresh": args.fresh}
    result = run(args.config, dp=args.dp, overrides=args.overrides, progress=sys.stderr, **named)
    return _run_exit(result)


def command_resume(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    result = resume(
        args.folder, dp=args.dp, steps=args.steps, overrides=args.overrides, progress=sys.stderr
    )
    return _run_exit(result)


def command_compare(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    if not args.run_ids and not args.experiment and not args.sweep:
        raise ConfigError("name the runs: RUN_ID ..., --experiment NAME or --sweep NAME")
    policy = DecisionPolicy(
        threshold=args.threshold,
        decide_on=args.decide_on.split(",") if args.decide_on else None,
        family=args.family,
        design=args.design,
        max_seeds=args.max_seeds,
        smooth_last=args.smooth_last,
    )
    verdict = compare_tracked(
        args.run_ids,
        policy,
        experiment=args.experiment,
        sweep=args.sweep,
        tracking_uri=args.tracking_uri,
    )
    return (EXIT_OK if verdict["accepted"] else EXIT_REFUSED), verdict


def command_verify_elastic(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    report = verify_elastic(
        args.config,
        first_dp=args.dp,
        second_dp=args.resume_dp,
        split_step=args.split_step,
        overrides=args.overrides,
        progress=sys.stderr,
    )
    return (EXIT_OK if report["ok"] else EXIT_REFUSED), report


def command_sync(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return EXIT_OK, sync(args.folder)
