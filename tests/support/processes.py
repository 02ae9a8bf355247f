"""Fresh processes: for the concurrency tests, forked from a server that imported their code
once; for import probes, a new interpreter."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from multiprocessing.context import ForkServerContext

from tests.support import REPO


def forked_process_context(*preload: str) -> ForkServerContext:
    """A ``forkserver`` context whose server imports the modules ``preload`` (those of the
    processes' targets) once: each process is then a fork of it, where ``spawn`` would
    start an interpreter that imports them again (~1-2 s of CPU each), and ``fork`` would
    copy the test process with its threads. The server starts on first use and serves the
    whole test process; a later call's ``preload`` only applies if none runs yet (its
    processes then import what they need themselves)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


def run_python_probe(probe: str) -> str:
    """``probe`` (Python source) in a fresh interpreter that imports this repository, so its
    ``sys.modules`` are a new process's; its stdout, stripped. Fails on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()
