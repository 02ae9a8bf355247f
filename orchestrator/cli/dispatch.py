"""``zephon``: the command line over Zephon's Python API, for people and agents.

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
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from orchestrator.cli import run_commands, search_commands, service_commands
from orchestrator.cli.parser import build_parser
from orchestrator.errors import (
    DISK_FULL_ERRNOS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    ErrorKind,
    debug_traceback,
)
from orchestrator.run import interrupts
from pipeline import ConfigError, ZephonError

COMMANDS: dict[str, Callable[[argparse.Namespace], tuple[int, dict[str, Any]]]] = {
    "plan": run_commands.command_plan,
    "run": run_commands.command_run,
    "resume": run_commands.command_resume,
    "compare": run_commands.command_compare,
    "verify-elastic": run_commands.command_verify_elastic,
    "sync": run_commands.command_sync,
    "fit": search_commands.command_fit,
    "propose": search_commands.command_propose,
    "serve": service_commands.command_serve,
    "submit": service_commands.command_submit,
    "status": service_commands.command_job,
    "wait": service_commands.command_job,
    "cancel": service_commands.command_job,
    "logs": service_commands.command_job,
    "jobs": service_commands.command_jobs,
    "datasets": service_commands.command_datasets,
    "mcp": service_commands.command_mcp,
    "attempt": service_commands.command_attempt,
}


TRAINING = ("run", "resume", "verify-elastic", "attempt")
"""Commands that train here (and so handle SIGINT/SIGTERM by stopping their launch)."""


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``key=value`` overrides may follow options too (argparse alone
    gives ``resume FOLDER --dp 1 resources.nodes=1`` no place for the override)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [word for word in extra if "=" in word and not word.startswith("-")]
    if extra and (overrides != extra or not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one ``zephon`` command; returns (and, as a script, exits with) its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_arguments(argv)
    except ConfigError as error:  # words argparse refuses: answered as any other mistake
        code, payload = _describe_error(error)
        _print_payload(payload, "--json" in argv)
        return code
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
    warnings.showwarning = _show_warning
    interrupts.exit_without_teardown(main())


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as a line of the command's own (``zephon: warning: ...``), not Python's
    form with a line of Zephon's source under it."""
    print(f"zephon: warning: {message}", file=file or sys.stderr)


def _interrupted_payload() -> dict[str, Any]:
    message = "interrupted before training started; nothing was created"
    return {"error": {"kind": ErrorKind.INTERRUPTED, "message": message, "problems": [message]}}


def _describe_error(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The exit code and JSON payload of ``error`` (the class says which: orchestrator/errors.py)."""
    message = str(error)
    if isinstance(error, ZephonError):
        code, kind = error.exit_code, error.kind
    elif isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
        code, kind = EXIT_FAILED, ErrorKind.DISK_FULL
        message = (
            f"no space left on the device holding {error.filename or 'a file it wrote'}: "
            "free some, then run the same command again (a run goes on with `zephon resume "
            "<run folder>`; nothing it had written is lost)"
        )
    elif isinstance(error, (FileNotFoundError, ValueError)):  # files and values of arguments
        code, kind = EXIT_INVALID, ErrorKind.INVALID
    elif isinstance(error, KeyboardInterrupt):
        code, kind = EXIT_INTERRUPTED, ErrorKind.INTERRUPTED
    else:  # a bug: the traceback goes to stderr, the payload stays one JSON object
        traceback.print_exception(error, file=sys.stderr)
        code, kind = EXIT_FAILED, ErrorKind.INTERNAL
    if kind != ErrorKind.INTERNAL:
        debug_traceback(error)
    problems = getattr(error, "problems", [message])
    return code, {"error": {"kind": kind, "message": message, "problems": problems}}


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
            # the whole experiment, contract, command and recipe are in --json; the text
            # keeps one line each (the recipe: its fingerprint, not TorchTitan's settings)
            elif key not in ("config", "contract", "command", "recipe") or value is None:
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                print(f"{key}: {text}")
