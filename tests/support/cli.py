"""The ``zephon`` CLI run in the test process, for commands that neither train nor serve."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

from orchestrator import cli


def zephon_in_process(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``zephon ARGV`` run in ``folder`` by ``orchestrator.cli.main`` in this process: its exit
    code, stdout and stderr, as a subprocess would give them, without the ~3 s of CPU a new
    interpreter spends importing MLflow and the fitting libraries again."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return subprocess.CompletedProcess(["zephon", *argv], code, out.getvalue(), err.getvalue())
