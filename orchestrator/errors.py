"""Every error the orchestrator raises, with the exit code the ``zephon`` CLI ends with.

They all derive from ``pipeline.ZephonError``, so the CLI maps an error to its code and
JSON ``kind`` by reading the class, never by the order of its checks. Exit codes the CLI
uses beyond errors: 0 ok, 3 the guard refused, 124 timed out, 130 interrupted.

Design: docs/design/orchestrator_cli.md
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from enum import StrEnum

from pipeline.errors import EXIT_FAILED, EXIT_INVALID, ConfigError, ZephonError

EXIT_OK = 0
EXIT_REFUSED = 3
"""The comparison guard (or ``verify-elastic``) refused."""
EXIT_TRACKING = 4
"""The tracking server is unreachable (before launch, or on sync)."""
EXIT_BUSY = 5
"""The submitter's queue is full, or its daily budget is used up: retry later."""
EXIT_TIMED_OUT = 124
EXIT_INTERRUPTED = 130
"""SIGINT or SIGTERM stopped the command (128 + SIGINT, as shells report Ctrl-C)."""

__all__ = [
    "DEBUG_ENV",
    "DISK_FULL_ERRNOS",
    "EXIT_BUSY",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TIMED_OUT",
    "EXIT_TRACKING",
    "ComparisonRefused",
    "DiskFull",
    "ErrorKind",
    "ExperimentError",
    "LaunchError",
    "MixError",
    "NoFit",
    "NotTracked",
    "OverBudget",
    "ProblemsError",
    "QueueError",
    "QueueFull",
    "SearchError",
    "TrackingError",
    "TrackingUnavailable",
    "TransitionError",
    "debug_traceback",
]


DEBUG_ENV = "ZEPHON_DEBUG"
"""``ZEPHON_DEBUG=1``: a refused or failed command also prints its traceback."""


def debug_traceback(error: BaseException) -> None:
    """Print ``error``'s traceback to stderr when ``ZEPHON_DEBUG=1`` (the command line says
    only what is wrong and what to do)."""
    if os.environ.get(DEBUG_ENV) == "1":
        traceback.print_exception(error, file=sys.stderr)


class ErrorKind(StrEnum):
    """An error's ``kind`` in the ``zephon`` CLI's JSON output (``{"error": {"kind": ...}}``;
    a member equals its string). ``failed`` and ``invalid`` are also the kinds of the
    pipeline's errors (``pipeline/errors.py``, which imports nothing of the orchestrator)."""

    FAILED = "failed"
    """Work that failed."""
    INVALID = "invalid"
    """A request refused before any work started."""
    QUEUE_FULL = "queue_full"
    OVER_BUDGET = "over_budget"
    LAUNCH_FAILED = "launch_failed"
    TRACKING_ERROR = "tracking_error"
    TRACKING_UNAVAILABLE = "tracking_unavailable"
    INTERRUPTED = "interrupted"
    """SIGINT or SIGTERM stopped the command."""
    DISK_FULL = "disk_full"
    """A write found its device full (exit 1): free space, then run the command again."""
    REFUSED = "refused"
    """The guard refused a sweep's comparison."""
    INTERNAL = "internal"
    """A bug: an exception no error class describes (its traceback goes to stderr)."""


class ProblemsError(ConfigError):
    """A request refused for one or more reasons; ``problems`` lists every one."""

    subject = "request"
    """What was invalid, for the message."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid {self.subject}:\n" + "\n".join(f"  - {p}" for p in problems)
            if len(problems) > 1
            else f"invalid {self.subject}: {problems[0]}"
        )


class ExperimentError(ProblemsError):
    """An experiment that must not be launched; ``problems`` lists every reason."""

    subject = "experiment"


class MixError(ProblemsError):
    """A mix or a mix request that cannot work; ``problems`` lists every reason."""

    subject = "data mix"


class SearchError(ProblemsError):
    """Observations that cannot be fitted, or a fit or proposal request that cannot work."""

    subject = "mix search"


class QueueError(ConfigError):
    """A request the queue refuses: bad input, a reused key, a limit reached, an unknown job."""


class QueueFull(QueueError):
    """The submitter already has as many unfinished jobs as it may."""

    exit_code, kind = EXIT_BUSY, ErrorKind.QUEUE_FULL


class OverBudget(QueueError):
    """The submitter used up its daily budget of runs or device-hours."""

    exit_code, kind = EXIT_BUSY, ErrorKind.OVER_BUDGET


class TransitionError(QueueError):
    """A state change the state machine forbids, or the job is not in the expected state."""


class NoFit(ZephonError):
    """A run asks only for dp sizes larger than every device of the pool together."""

    exit_code, kind = EXIT_INVALID, ErrorKind.INVALID


class LaunchError(ZephonError):
    """A launch that failed; the message ends with the tail of its log."""

    kind = ErrorKind.LAUNCH_FAILED


class TrackingError(ZephonError):
    """Tracking cannot proceed; the message says what is wrong and what to do."""

    exit_code, kind = EXIT_TRACKING, ErrorKind.TRACKING_ERROR


class TrackingUnavailable(TrackingError):
    """The tracking server (or database) cannot be reached right now; retrying later may work."""

    kind = ErrorKind.TRACKING_UNAVAILABLE


class NotTracked(TrackingError):
    """A run folder that was never tracked: there is nothing to send."""

    exit_code, kind = EXIT_INVALID, ErrorKind.INVALID


class DiskFull(ZephonError):
    """A write found its device full (exit 1): the message names the run and how it goes on
    once space is freed; what was written before stays."""

    kind = ErrorKind.DISK_FULL


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""The errors of a write that found its device (or the user's quota) full."""


class RunFailed(ZephonError):
    """A run that ended in another status than ``succeeded`` (``zephon-run`` reports its
    Hydra job failed with it)."""


class SweepFailed(ZephonError):
    """Some job of the sweep failed or the launcher failed (all logged)."""


class ComparisonRefused(SweepFailed):
    """Every job of the sweep succeeded and the guard refused their comparison (logged)."""

    exit_code, kind = EXIT_REFUSED, ErrorKind.REFUSED
