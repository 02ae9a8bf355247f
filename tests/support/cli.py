"""The ``zephon`` CLI run in the test process, for commands that neither train nor serve."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from orchestrator import cli


@contextlib.contextmanager
def working_in(folder: Path) -> Iterator[None]:
    """Run the body with ``folder`` as the current directory."""
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def zephon_in_process(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``zephon ARGV`` run in ``folder`` by ``orchestrator.cli.main`` in this process: its exit
    code, stdout and stderr, as a subprocess would give them, without the ~3 s of CPU a new
    interpreter spends importing MLflow and the fitting libraries again."""
    out, err = io.StringIO(), io.StringIO()
    with working_in(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return subprocess.CompletedProcess(["zephon", *argv], code, out.getvalue(), err.getvalue())
