"""TorchTitan 0.3.0 integration: the lane pipeline as TorchTitan's data loader.

``zephon-train`` (train.py) runs TorchTitan's ``main`` with :class:`ZephonTrainer`
(trainer.py), whose data loader (dataloader.py) feeds each rank its lanes of the pipeline
and records every step's global batch digest (runlog.py). Importing this package applies
:mod:`orchestrator.titan.cpu_compat` first, so TorchTitan is only ever imported after it,
then imports the TorchTitan modules that would import what Zephon never uses (Hugging
Face ``datasets``, ``torch._functorch.partitioners``) with those imports deferred
(:mod:`orchestrator.titan.deferred_imports`).

Design: docs/design/orchestrator_titan.md
"""

from orchestrator.titan import cpu_compat, deferred_imports

cpu_compat.apply()
deferred_imports.defer()
