"""``zephon-train`` / ``python -m orchestrator.titan.train``: TorchTitan's trainer on the lane pipeline.

Runs TorchTitan's own entry point (``torchtitan.train.main``) after
:mod:`orchestrator.titan.cpu_compat` has prepared TorchTitan for this machine;
``--module`` defaults to ``orchestrator.titan.configs`` and everything else is
TorchTitan's CLI, ``--dataloader.spec`` naming the data (an experiment's data section).

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import os
import sys

from orchestrator.titan import cpu_compat

DEFAULT_MODULE = "orchestrator.titan.configs"


def prepare_machine() -> list[str]:
    """Prepare TorchTitan for this machine (:func:`cpu_compat.apply`) before it is imported:
    what :func:`main` does first, and the warm server (:mod:`orchestrator.run.warm_start`)
    before its own imports. The patches applied, by name."""
    return cpu_compat.apply()


def main(argv: list[str] | None = None) -> None:
    """Parse TorchTitan's CLI (``argv``, default ``sys.argv[1:]``) and train."""
    prepare_machine()
    from torchtitan.train import main as torchtitan_main  # only ever after apply()

    _threads_from_environment()

    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--module" or a.startswith("--module=") for a in args):
        args = ["--module", DEFAULT_MODULE, *args]
    sys.argv[1:] = args  # torchtitan.train.main parses sys.argv
    torchtitan_main()


def _threads_from_environment() -> None:
    """Apply ``OMP_NUM_THREADS`` now: OpenMP read it when torch was imported, which in a
    warm start (:mod:`orchestrator.run.warm_start`) was before this launch's value was set."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))


if __name__ == "__main__":
    main()
