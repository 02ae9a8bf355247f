"""``zephon``: the command line over :mod:`orchestrator.run.api`, for people and agents.

Subcommands plan, run, resume, compare, verify-elastic, sync, fit and propose, and the
job service's serve, submit, status, wait, cancel, logs, jobs, datasets, mcp and attempt.
``--json`` prints exactly one JSON object on stdout, errors too; the exit codes are
stable (agents rely on them): 0 success, 1 failed, 2 invalid, 3 refused, 4 tracking
unreachable, 5 queue full, 124 timed out, 130 interrupted.

Design: docs/design/orchestrator_cli.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from orchestrator.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TIMED_OUT,
)
from orchestrator.experiment.runfolder import RunStatus
from orchestrator.run import interrupts
from orchestrator.service.job import KINDS
from pipeline import ConfigError, ZephonError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        "--decide-on",
        metavar="DOMAIN,...|task:NAME[:METRIC]",
        help="rank and decide on the mean of these held-out domains only (default: all), or "
        "on a task of eval.tasks (default metric: acc, else bits_per_byte)",
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
    p.add_argument("--capacity", type=int, help="most devices used at once (default: all free)")
    p.add_argument("--device", default="auto", help="auto, cuda or cpu")
    p.add_argument(
        "--extra-processes",
        type=int,
        default=1,
        help="CPU: training processes beyond the cores, filling idle time (0: one per core)",
    )
    p.add_argument("--max-queued", type=int, default=100, help="pending jobs per submitter")
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


def _command_plan(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run import api

    return EXIT_OK, api.plan(args.config, dp=args.dp, overrides=args.overrides).to_dict()


def _run_result(result: Any) -> tuple[int, dict[str, Any]]:
    code = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.INTERRUPTED: EXIT_INTERRUPTED}.get(
        result.status, EXIT_FAILED
    )
    return code, result.to_dict()


def _command_run(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run import api

    result = api.run(
        args.config, dp=args.dp, run_name=args.name, overrides=args.overrides, progress=sys.stderr
    )
    return _run_result(result)


def _command_resume(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run import api

    result = api.resume(
        args.folder, dp=args.dp, steps=args.steps, overrides=args.overrides, progress=sys.stderr
    )
    return _run_result(result)


def _command_compare(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run import api

    if not args.run_ids and not args.experiment and not args.sweep:
        raise ConfigError("name the runs: RUN_ID ..., --experiment NAME or --sweep NAME")
    verdict = api.compare(
        args.run_ids,
        experiment=args.experiment,
        sweep=args.sweep,
        tracking_uri=args.tracking_uri,
        threshold=args.threshold,
        decide_on=args.decide_on.split(",") if args.decide_on else None,
        family=args.family,
    )
    return (EXIT_OK if verdict["accepted"] else EXIT_REFUSED), verdict


def _command_verify_elastic(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run.elastic_check import verify_elastic

    report = verify_elastic(
        args.config,
        first_dp=args.dp,
        second_dp=args.resume_dp,
        split_step=args.split_step,
        overrides=args.overrides,
        progress=sys.stderr,
    )
    return (EXIT_OK if report["ok"] else EXIT_REFUSED), report


def _command_sync(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run import api

    return EXIT_OK, api.sync(args.folder)


def _read_observations(args: argparse.Namespace) -> Any:
    from orchestrator.search import read_tables
    from orchestrator.search.runs import observations_from_runs

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


def _fit_observations(args: argparse.Namespace) -> Any:
    from orchestrator.search import fit

    models = args.models.split(",") if args.models else None
    return fit(
        _read_observations(args),
        models=models,
        folds=args.folds,
        seed=args.seed,
        at_size=args.at_size,
    )


def _command_fit(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.search.observations import read_mixtures

    result = _fit_observations(args)
    payload = result.to_json()
    if args.predict:
        ids, mixtures = read_mixtures(args.predict, result.observations.domains)
        payload["predictions"] = [
            {"id": run_id, "score": p.predicted, "interval": list(p.interval)}
            for run_id, p in zip(ids, result.predictions(mixtures), strict=True)
        ]
    return EXIT_OK, payload


def _command_propose(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.search import Bounds, propose

    bounds = Bounds(_parse_shares(args.min, "--min"), _parse_shares(args.max, "--max"))
    if args.tokens or args.budget:
        if not (args.tokens and args.budget):
            raise ConfigError("a repetition cap needs both --tokens DOMAIN=N ... and --budget N")
        bounds = bounds.with_repetition_cap(
            _parse_shares(args.tokens, "--tokens"), args.budget, args.max_epochs
        )
    fitted = _fit_observations(args)
    if not args.mixtures:  # Zephon runs: the cap from their datasets and token budget
        from orchestrator.search.budget import capped_bounds
        from orchestrator.search.runs import run_experiment

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


def _command_serve(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service.client import ServiceConfig
    from orchestrator.service.scheduler import Scheduler

    service = ServiceConfig(
        root=args.root,
        data_roots=tuple(args.data_root),
        device=args.device,
        capacity=args.capacity,
        extra_processes=args.extra_processes,
        max_queued_per_submitter=args.max_queued,
    )
    scheduler = Scheduler(service)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
    try:
        scheduler.serve(until_idle=args.until_idle)
    except KeyboardInterrupt:
        scheduler.stop()
    return EXIT_OK, {"root": str(service.path), "counts": scheduler.queue.counts()}


def _command_submit(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service import client as service

    if (args.config is None) == (args.spec is None):
        raise ConfigError("give the experiment with -c FILE or --spec JSON (one of them)")
    if args.spec is not None:
        try:
            spec = json.loads(args.spec)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--spec is not valid JSON: {e}") from None
    else:
        from omegaconf import OmegaConf

        spec = OmegaConf.to_container(OmegaConf.load(args.config))
    return EXIT_OK, service.submit(
        service.load_service(args.root),
        spec,
        key=args.key,
        kind=args.kind,
    )


def _command_job(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service import client as service

    svc = service.load_service(args.root)
    if args.command == "status":
        return EXIT_OK, service.status(svc, args.job_id)
    if args.command == "cancel":
        return EXIT_OK, service.cancel(svc, args.job_id)
    if args.command == "logs":
        return EXIT_OK, service.logs(svc, args.job_id, tail=args.tail)
    report = service.wait(svc, args.job_id, timeout_s=args.timeout)
    state = report["job"]["state"]
    code = (
        EXIT_TIMED_OUT if report["timed_out"] else EXIT_OK if state == "succeeded" else EXIT_FAILED
    )
    return code, report


def _command_jobs(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service import client as service

    return EXIT_OK, service.list_jobs(
        service.load_service(args.root),
        states=args.state,
        submitter=args.submitter,
        kind=args.kind,
        limit=args.limit,
    )


def _command_datasets(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service import client as service

    return EXIT_OK, service.list_datasets(service.load_service(args.root))


def _command_attempt(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.run.devices import Devices
    from orchestrator.service import attempt
    from orchestrator.service.client import load_service
    from orchestrator.service.pool import Lease

    gpus = tuple(int(i) for i in args.gpu_ids.split(",") if i)
    lease = Lease(Devices(args.device, args.devices, args.device, gpus), args.dp)
    result = attempt.run(load_service(args.root), args.job_id, lease)
    code = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.INTERRUPTED: EXIT_INTERRUPTED}.get(
        result["status"]
    )
    return (EXIT_FAILED if code is None else code), result


def _command_mcp(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from orchestrator.service.mcp_server import serve_stdio

    serve_stdio(args.root)
    return EXIT_OK, {}


COMMANDS: dict[str, Callable[[argparse.Namespace], tuple[int, dict[str, Any]]]] = {
    "plan": _command_plan,
    "run": _command_run,
    "resume": _command_resume,
    "compare": _command_compare,
    "verify-elastic": _command_verify_elastic,
    "sync": _command_sync,
    "fit": _command_fit,
    "propose": _command_propose,
    "serve": _command_serve,
    "submit": _command_submit,
    "status": _command_job,
    "wait": _command_job,
    "cancel": _command_job,
    "logs": _command_job,
    "jobs": _command_jobs,
    "datasets": _command_datasets,
    "mcp": _command_mcp,
    "attempt": _command_attempt,
}


TRAINING = ("run", "resume", "verify-elastic", "attempt")
"""Commands that train here (and so handle SIGINT/SIGTERM by stopping their launch)."""


def _parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``key=value`` overrides may follow options too (argparse alone
    gives ``resume FOLDER --dp 1 resources.nodes=1`` no place for the override)."""
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [word for word in extra if "=" in word and not word.startswith("-")]
    if extra and (overrides != extra or not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one ``zephon`` command; returns (and, as a script, exits with) its exit code."""
    args = _parse_arguments(argv)
    # Training commands stop their torchrun on SIGINT/SIGTERM and report the run interrupted.
    handling = interrupts.handling() if args.command in TRAINING else contextlib.nullcontext()
    try:
        with handling:
            code, payload = COMMANDS[args.command](args)
    except interrupts.Interrupted:
        code, payload = EXIT_INTERRUPTED, _interrupted_payload()
    except (Exception, KeyboardInterrupt) as error:  # a stable exit code and a clear message
        code, payload = _describe_error(error)
    if interrupts.requested():
        code = EXIT_INTERRUPTED
    _print_payload(payload, args.json)
    if interrupts.requested():
        interrupts.report("zephon")
    return code


def script() -> NoReturn:
    """The ``zephon`` console script: :func:`main`, then its exit code without the
    interpreter's teardown (:func:`orchestrator.run.interrupts.exit_without_teardown`)."""
    interrupts.exit_without_teardown(main())


def _interrupted_payload() -> dict[str, Any]:
    message = "interrupted before training started; nothing was created"
    return {"error": {"kind": "interrupted", "message": message, "problems": [message]}}


def _describe_error(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The exit code and JSON payload of ``error`` (the class says which: orchestrator/errors.py)."""
    if isinstance(error, ZephonError):
        code, kind = error.exit_code, error.kind
    elif isinstance(error, (FileNotFoundError, ValueError)):  # files and values of arguments
        code, kind = EXIT_INVALID, "invalid"
    elif isinstance(error, KeyboardInterrupt):
        code, kind = EXIT_INTERRUPTED, "interrupted"
    else:  # a bug: the traceback goes to stderr, the payload stays one JSON object
        traceback.print_exception(error, file=sys.stderr)
        code, kind = EXIT_FAILED, "internal"
    problems = getattr(error, "problems", [str(error)])
    return code, {"error": {"kind": kind, "message": str(error), "problems": problems}}


def _print_payload(payload: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(payload, default=str))
    elif "error" in payload:
        print(f"zephon: {payload['error']['message']}", file=sys.stderr)
    elif "markdown" in payload:
        print(payload["markdown"])
        print(f"comparison run: {payload['comparison_run_id']} ({payload['tracking_uri']})")
    else:
        for key, value in payload.items():
            if key == "phases":
                print("phases:")
                for phase in value:
                    if phase["steps"] is None:
                        print(f"  phase {phase['phase']}: not reached within train.steps")
                        continue
                    first, last = phase["steps"]
                    tokens = " ".join(f"{n}={t}" for n, t in phase["expected_tokens"].items())
                    print(f"  phase {phase['phase']}: steps {first}-{last}, tokens {tokens}")
            elif key not in ("config", "contract", "command") or value is None:
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                print(f"{key}: {text}")


if __name__ == "__main__":
    sys.exit(main())
