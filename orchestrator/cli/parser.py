"""``zephon``'s argument parser: every subcommand and its options."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from orchestrator.service.job import KINDS
from orchestrator.service.slurm_settings import ServiceLauncher
from pipeline import ConfigError


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose refusals (an unknown option, a value of the wrong type, a
    missing argument) are :class:`ConfigError`, so that ``zephon`` answers them as every
    other mistake (exit 2, one JSON object with ``--json``), not with argparse's exit."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="zephon", description="Data-mix experiments with elastic-deterministic data."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, experiment: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", help="one JSON object on stdout")
        if experiment:
            p.add_argument("-c", "--config", help="experiment YAML file")
            p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.steps=40")
        return p

    p = command("plan", "resolve and validate an experiment; print the plan, launch nothing", True)
    p.add_argument("--dp", type=int, help="data-parallel size (default: from free devices)")
    p = command("run", "train one experiment to the end", True)
    p.add_argument("--dp", type=int, help="data-parallel size (default: from free devices)")
    p.add_argument("--name", help="run folder name (default: <name>-<variant>-<time>)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="train a new run even if a finished run of the same experiment would answer",
    )
    p = command("resume", "continue a run from its last checkpoint, on any dp size")
    p.add_argument("folder", help="run folder")
    p.add_argument("--dp", type=int, help="data-parallel size (any divisor of the lanes)")
    p.add_argument("--steps", type=int, help="train to this step instead of the planned end")
    p.add_argument(
        "overrides",
        nargs="*",
        help="where it trains now: resources.key=value, e.g. resources.launcher=local "
        "resources.nodes=1 (what it trains cannot change)",
    )
    p = command("compare", "compare runs' eval scores, or refuse with the reason")
    p.add_argument("run_ids", nargs="*", help="MLflow run ids")
    p.add_argument("--experiment", help="all runs of this MLflow experiment")
    p.add_argument("--sweep", help="all runs of this sweep")
    p.add_argument("--tracking-uri", help="MLflow URI (default: ./mlflow.db)")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="smallest difference in aggregate bits/byte that matters (default 0): a pair is "
        "decided only if its whole 95%% interval is beyond it",
    )
    p.add_argument(
        "--family",
        choices=["holm", "bh", "none"],
        default="holm",
        help="correct the pairs' decisions for their number: holm (default: no pair wrong "
        "with more than 5%% chance), bh (false discovery rate) or none",
    )
    p.add_argument(
        "--design",
        choices=["sequential", "fixed"],
        default="sequential",
        help="sequential (default): the 5%% error budget is shared by every comparison of these "
        "variants as seeds are added, up to --max-seeds; fixed: one look at a seed count fixed "
        "in advance, decided at the full 5%%",
    )
    p.add_argument(
        "--max-seeds",
        type=int,
        default=8,
        help="sequential design: the seed count by which the error budget is spent (default 8)",
    )
    p.add_argument(
        "--smooth-last",
        type=int,
        default=1,
        metavar="K",
        help="score each run on the mean of its last K held-out evals (the last K eval steps "
        "common to all runs, same documents) instead of the last one alone (default 1)",
    )
    p.add_argument(
        "--decide-on",
        metavar="DOMAIN,...|METRIC[:DOMAIN],...|task:NAME[:METRIC]",
        help="rank and decide on the mean of these held-out domains only (default: all), on "
        "another held-out metric (accuracy: next-token accuracy, every domain or "
        "accuracy:DOMAIN), or on a task of eval.tasks (default metric: acc, else "
        "bits_per_byte)",
    )
    p = command(
        "verify-elastic", "train, checkpoint, resume on another dp size, check digests", True
    )
    p.add_argument("--dp", type=int, required=True, help="dp size of the first segment")
    p.add_argument("--resume-dp", type=int, required=True, help="dp size after the checkpoint")
    p.add_argument("--split-step", type=int, help="checkpoint step (default: half the steps)")
    p = command("sync", "send a run folder's pending metrics and artifacts to its MLflow run")
    p.add_argument("folder", help="run folder")
    p = _search_parser(command, "fit", "fit mixture -> score models; k-fold figures per model")
    p.add_argument("--predict", metavar="P.CSV", help="predict these mixtures (id, weights...)")
    p = _search_parser(command, "propose", "the next mixtures to run, and whether to stop")
    p.add_argument("--n", type=int, default=4, help="mixtures to propose (default 4)")
    p.add_argument("--min", action="append", default=[], metavar="DOMAIN=X", help="least share")
    p.add_argument("--max", action="append", default=[], metavar="DOMAIN=X", help="most share")
    p.add_argument(
        "--tokens",
        action="append",
        default=[],
        metavar="DOMAIN=N",
        help="a dataset's tokens: with --budget, caps its share at --max-epochs passes",
    )
    p.add_argument("--budget", type=float, help="tokens one run trains on")
    p.add_argument(
        "--max-epochs",
        type=float,
        default=4.0,
        help="repetition cap (default 4); on Zephon runs from their datasets and steps",
    )
    p.add_argument("--prior", metavar="DOMAIN=X,...", help="reference mix (default uniform)")
    p.add_argument("--decimals", type=int, default=3, help="decimals of every share")
    p.add_argument(
        "--min-gain",
        type=float,
        help="stop when no proposal may gain more (default: the replicate noise)",
    )
    _service_parsers(command)
    return parser


def _search_parser(
    command: Callable[..., argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    """``fit`` and ``propose``: observations from tables or from Zephon runs."""
    p = command(name, help_text)
    p.add_argument("run_ids", nargs="*", help="MLflow run ids (the guard must accept them)")
    p.add_argument("--sweep", help="all runs of this sweep")
    p.add_argument("--experiment", help="all runs of this MLflow experiment")
    p.add_argument("--tracking-uri", help="MLflow URI (default: ./mlflow.db)")
    p.add_argument("--mixtures", metavar="M.CSV", help="id, then one weight column per domain")
    p.add_argument("--scores", metavar="S.CSV", help="id, then score columns (lower is better)")
    p.add_argument(
        "--target",
        metavar="COL,...",
        help="score columns (tables) or held-out domains (runs); the objective is their mean",
    )
    p.add_argument("--models", metavar="NAME,...", help="models to validate (default all)")
    p.add_argument("--folds", type=int, default=5, help="k of the k-fold validation")
    p.add_argument("--seed", type=int, default=0, help="seed of folds, refits and proposals")
    p.add_argument(
        "--at-size",
        type=float,
        metavar="PARAMS",
        help="runs of several model sizes (a params column): predict at this many "
        "parameters, e.g. 1e9 (default: the largest size observed)",
    )
    return p


def _service_parsers(command: Callable[..., argparse.ArgumentParser]) -> None:
    def service(name: str, help_text: str) -> argparse.ArgumentParser:
        p = command(name, help_text)
        p.add_argument("--root", default="zephon-service", help="the service root folder")
        return p

    p = service("serve", "run the scheduler: start queued jobs on the free devices")
    p.add_argument("--data-root", action="append", default=[], help="allowed data folder")
    p.add_argument(
        "--object-store-prefix",
        action="append",
        default=[],
        help="allowed dataset URL prefix, e.g. s3://bucket/corpus/ (default: no URLs)",
    )
    p.add_argument(
        "--tracking-uri", help="the MLflow server every job logs to (default: <root>/mlflow.db)"
    )
    p.add_argument("--capacity", type=int, help="most devices used at once (default: all free)")
    p.add_argument("--device", default="auto", help="auto, cuda or cpu")
    p.add_argument(
        "--extra-processes",
        type=int,
        default=1,
        help="CPU: training processes beyond the cores, filling idle time (0: one per core)",
    )
    p.add_argument("--max-queued", type=int, default=100, help="pending jobs per submitter")
    p.add_argument("--runs-per-day", type=int, help="run and verify jobs per submitter and UTC day")
    p.add_argument(
        "--device-hours-per-day",
        type=float,
        help="devices leased x hours run, per submitter and UTC day",
    )
    p.add_argument(
        "--budgets",
        help="YAML/JSON file: {default: {runs_per_day, device_hours_per_day}, users: {NAME: ...}}",
    )
    p.add_argument(
        "--launcher",
        default="local",
        choices=[str(launcher) for launcher in ServiceLauncher],
        help="local: attempts on this machine's devices; slurm: one Slurm job per attempt",
    )
    p.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    p.add_argument("--account", help="Slurm account (default: the user's)")
    p.add_argument(
        "--job-devices",
        type=int,
        default=1,
        help="Slurm: cores or GPUs per job whose spec sets no resources.dp",
    )
    p.add_argument(
        "--slurm-parameter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Slurm: another submitit parameter for every job, e.g. slurm_qos=high (repeatable)",
    )
    p.add_argument(
        "--slurm-poll-s",
        type=float,
        default=5.0,
        help="Slurm: seconds between reads of the jobs' states (one squeue each)",
    )
    p.add_argument("--until-idle", action="store_true", help="exit when no job is left")
    p = service("submit", "queue an experiment (idempotent per --key)")
    p.add_argument("-c", "--config", help="experiment file (YAML or JSON)")
    p.add_argument("--spec", help="experiment as a JSON object")
    p.add_argument("--key", required=True, help="idempotency key: a retry returns the same job")
    p.add_argument(
        "--kind",
        default="run",
        choices=KINDS,
        help='plan: dry run; verify: elasticity check, spec {"experiment", "first_dp", "second_dp"}',
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="train a new run even if this experiment already trained (default: answer from it)",
    )
    for name, text in (
        ("status", "a job's state, history and result"),
        ("cancel", "cancel a job"),
        ("wait", "wait until a job is final"),
        ("logs", "the tail of a job's logs"),
    ):
        p = service(name, text)
        p.add_argument("job_id")
        if name == "wait":
            p.add_argument("--timeout", type=float, default=3600, help="seconds")
        if name == "logs":
            p.add_argument("--tail", type=int, default=50, help="lines")
    p = service("jobs", "list jobs")
    p.add_argument("--state", action="append", help="queued, running, succeeded, ...")
    p.add_argument("--submitter")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--limit", type=int, default=100)
    service("datasets", "list the datasets (data files and sizes) under the data roots")
    service("mcp", "serve Zephon's tools to an MCP client on stdin/stdout")
    p = service("attempt", "one attempt of a job on the devices leased to it (the scheduler's)")
    p.add_argument("job_id")
    p.add_argument("--device", required=True, choices=["cpu", "cuda"])
    p.add_argument("--devices", type=int, required=True, help="cores or GPUs leased")
    p.add_argument("--gpu-ids", default="", help="the leased GPUs, comma-separated")
    p.add_argument("--dp", type=int, required=True, help="data-parallel size on the lease")
    p.add_argument("--job-file", help="the job as JSON (an attempt in Slurm), not the queue's")
