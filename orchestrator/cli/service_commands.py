"""The job service's commands: ``serve``, ``submit``, ``status``/``wait``/``cancel``/``logs``,
``jobs``, ``datasets``, ``attempt`` (the scheduler's) and ``mcp``."""

from __future__ import annotations

import argparse
import json
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_TIMED_OUT
from orchestrator.experiment.config import read_yaml_file
from orchestrator.experiment.run_record import RunStatus
from orchestrator.machine.devices import Devices
from orchestrator.service import attempt
from orchestrator.service import client as service
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.daily_budgets import Budgets
from orchestrator.service.job import Job, JobState
from orchestrator.service.pool import Lease
from orchestrator.service.scheduler import Scheduler
from orchestrator.service.slurm_settings import SlurmSettings
from pipeline import ConfigError


def command_serve(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    service = ServiceConfig(
        root=args.root,
        data_roots=tuple(args.data_root),
        object_store_prefixes=tuple(args.object_store_prefix),
        tracking_uri=args.tracking_uri,
        device=args.device,
        capacity=args.capacity,
        extra_processes=args.extra_processes,
        max_queued_per_submitter=args.max_queued,
        budgets=_read_budgets(args),
        launcher=args.launcher,
        slurm=SlurmSettings(
            partition=args.partition,
            account=args.account,
            job_devices=args.job_devices,
            parameters=_read_slurm_parameters(args.slurm_parameter),
            poll_s=args.slurm_poll_s,
        ),
    )
    service.check_serving()
    scheduler = Scheduler(service)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
    try:
        scheduler.serve(until_idle=args.until_idle)
    except KeyboardInterrupt:
        scheduler.stop()
    return EXIT_OK, {"root": str(service.path), "counts": scheduler.queue.counts()}


def _read_slurm_parameters(given: list[str]) -> dict[str, Any]:
    """``--slurm-parameter KEY=VALUE`` options as submitit parameters (values read as YAML,
    so numbers are numbers)."""
    parameters = {}
    for option in given:
        key, equals, value = option.partition("=")
        if not equals or not key:
            raise ConfigError(f"--slurm-parameter {option!r} is not KEY=VALUE, e.g. slurm_qos=high")
        parameters[key] = yaml.safe_load(value)
    return parameters


def _read_budgets(args: argparse.Namespace) -> Budgets:
    """The budgets of ``--budgets FILE`` (YAML or JSON: default, users), their default's
    limits replaced by ``--runs-per-day`` and ``--device-hours-per-day`` when given."""
    budgets = Budgets()
    if args.budgets is not None:
        budgets = Budgets.from_dict(read_yaml_file(args.budgets, "--budgets file"))
    given = {
        name: value
        for name, value in (
            ("runs_per_day", args.runs_per_day),
            ("device_hours_per_day", args.device_hours_per_day),
        )
        if value is not None
    }
    return replace(budgets, default=replace(budgets.default, **given))


def command_submit(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    if (args.config is None) == (args.spec is None):
        raise ConfigError("give the experiment with -c FILE or --spec JSON (one of them)")
    if args.spec is not None:
        try:
            spec = json.loads(args.spec)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--spec is not valid JSON: {e}") from None
    else:
        spec = read_yaml_file(args.config, "experiment file")
    return EXIT_OK, service.submit(
        load_service(args.root),
        spec,
        key=args.key,
        kind=args.kind,
        fresh=args.fresh,
    )


def command_job(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    svc = load_service(args.root)
    if args.command == "status":
        return EXIT_OK, service.status(svc, args.job_id)
    if args.command == "cancel":
        return EXIT_OK, service.cancel(svc, args.job_id)
    if args.command == "logs":
        return EXIT_OK, service.logs(svc, args.job_id, tail=args.tail)
    report = service.wait(svc, args.job_id, timeout_s=args.timeout)
    state = report["job"]["state"]
    code = (
        EXIT_TIMED_OUT
        if report["timed_out"]
        else EXIT_OK
        if state == JobState.SUCCEEDED
        else EXIT_FAILED
    )
    return code, report


def command_jobs(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return EXIT_OK, service.list_jobs(
        load_service(args.root),
        states=args.state,
        submitter=args.submitter,
        kind=args.kind,
        limit=args.limit,
    )


def command_datasets(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return EXIT_OK, service.list_datasets(load_service(args.root))


def command_attempt(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    gpus = tuple(int(i) for i in args.gpu_ids.split(",") if i)
    lease = Lease(Devices(args.device, args.devices, args.device, gpus), args.dp)
    svc = load_service(args.root)
    if args.job_file is None:
        job = svc.queue().get(args.job_id)
    else:  # an attempt in Slurm: compute nodes read the job's file, not the queue
        job = Job.from_dict(json.loads(Path(args.job_file).read_text()))
    result = attempt.run(svc, job, lease)
    code = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.INTERRUPTED: EXIT_INTERRUPTED}.get(
        result["status"]
    )
    return (EXIT_FAILED if code is None else code), result


def command_mcp(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    # deferred: the MCP SDK takes about half a second to import; only `zephon mcp` needs it
    from orchestrator.mcp.server import serve_stdio

    serve_stdio(args.root)
    return EXIT_OK, {}
