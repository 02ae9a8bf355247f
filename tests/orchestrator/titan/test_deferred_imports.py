"""``orchestrator.titan.deferred_imports``: the trainer (and the warm server) without Hugging
Face ``datasets`` and ``torch._functorch.partitioners`` until something uses them; TorchTitan's
stock loader and selective activation checkpointing still get the real ones."""

from __future__ import annotations

from tests.support.processes import run_python_probe


def test_the_trainer_and_the_warm_servers_imports_leave_the_deferred_modules_out() -> None:
    probe = (
        "import sys\n"
        "from orchestrator.run.warm_start import PRELOAD_MODULES\n"
        "from orchestrator.titan.deferred_imports import DEFERRED\n"
        "for module in PRELOAD_MODULES: __import__(module)\n"
        "deferred = {source for sources in DEFERRED.values() for source in sources}\n"
        "assert all(importer in sys.modules for importer in DEFERRED)\n"
        "print(sorted(m for m in sys.modules if m in deferred or m.startswith('datasets.')))"
    )
    assert run_python_probe(probe) == "[]"


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
    assert run_python_probe(probe) == "['c', 'd']"


def test_activation_checkpointing_gets_the_real_op_list_at_its_first_use() -> None:
    probe = (
        "import orchestrator.titan\n"
        "import torchtitan.distributed.activation_checkpoint as ac\n"
        "ops = ac.get_default_op_list()\n"
        "from torch._functorch import partitioners\n"
        "assert ac.get_default_op_list is partitioners.get_default_op_list\n"
        "assert ops.compute_intensive_ops == partitioners.get_default_op_list().compute_intensive_ops\n"
        "print(type(ops).__name__)"
    )
    assert run_python_probe(probe) == "OpTypes"
