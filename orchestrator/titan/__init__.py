"""TorchTitan 0.3.0 integration: the lane pipeline as TorchTitan's data loader.

``zephon-train`` (train.py) runs TorchTitan's ``main`` with :class:`ZephonTrainer`
(trainer.py), whose data loader (dataloader.py) feeds each rank its lanes of the pipeline
and records every step's global batch digest (runlog.py). Importing this package applies
:mod:`orchestrator.titan.cpu_compat` first, so TorchTitan is only ever imported after it,
then imports TorchTitan's text datasets with Hugging Face ``datasets`` deferred
(:mod:`orchestrator.titan.deferred_datasets`).

Design: docs/design/orchestrator_titan.md
"""

from orchestrator.titan import cpu_compat, deferred_datasets

cpu_compat.apply()
deferred_datasets.defer()
