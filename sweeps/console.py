"""What ``zephon-run`` ends with when its command is refused or fails: the message and the
exit code of the ``zephon`` CLI (docs/design/orchestrator_cli.md#exit-codes), no traceback.

Hydra prints an error's traceback and exits 1 unless ``HYDRA_FULL_ERROR`` is set; with it
set, the error reaches :func:`reported_errors`, which says what is wrong and exits with its
class's code (a job that failed 1, an invalid experiment or sweep 2, a comparison the
guard refused 3). An error of no known class is a bug: its traceback stays.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from hydra.errors import HydraException

from orchestrator.errors import debug_traceback
from pipeline.errors import EXIT_INVALID, ZephonError

PROGRAM = "zephon-run"


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Run the block with Hydra re-raising errors; a Zephon or Hydra configuration error ends
    the process with its message on stderr and its exit code."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except ZephonError as error:
        debug_traceback(error)
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    except HydraException as error:  # a config group, value or override Hydra refused
        debug_traceback(error)
        cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
        print(f"{PROGRAM}: {error}{cause}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
