"""``orchestrator.titan.deferred_datasets``: the trainer (and the warm server) without Hugging
Face ``datasets`` until something uses it; TorchTitan's stock loader still gets the real one."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO


def run_probe(probe: str) -> str:
    """``probe`` in a fresh interpreter (sys.modules as a trainer process has them); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_the_trainer_and_the_warm_servers_imports_leave_datasets_out() -> None:
    probe = (
        "import sys\n"
        "from orchestrator.run.warm_start import PRELOAD_MODULES\n"
        "for module in PRELOAD_MODULES: __import__(module)\n"
        "print(sorted(m for m in sys.modules if m == 'datasets' or m.startswith('datasets.')))"
    )
    assert run_probe(probe) == "[]"


def test_text_datasets_gets_the_real_datasets_at_its_first_use() -> None:
    probe = (
        "import sys, orchestrator.titan\n"
        "import torchtitan.hf_datasets.text_datasets as td\n"
        "stand_in = td.Dataset\n"
        "assert not isinstance([], td.Dataset) and 'datasets' in sys.modules\n"
        "import datasets, datasets.distributed\n"
        "assert td.Dataset is datasets.Dataset and td.load_dataset is datasets.load_dataset\n"
        "assert td.split_dataset_by_node is datasets.distributed.split_dataset_by_node\n"
        "rows = datasets.Dataset.from_dict({'text': ['a', 'b', 'c', 'd']})\n"
        "assert isinstance(rows, stand_in) and issubclass(type(rows), stand_in)\n"
        "assert stand_in.from_dict == datasets.Dataset.from_dict\n"
        "print(td.split_dataset_by_node(rows, 1, 2)['text'][:])"
    )
    assert run_probe(probe) == "['c', 'd']"
