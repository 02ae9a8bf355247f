"""TorchTitan 0.3.0 integration: the lane pipeline as TorchTitan's data loader.

::

    zephon-train (train.py) ── cpu_compat.apply() ── torchtitan.train.main()
                                                        │  --module orchestrator.titan.configs --config zephon_debug
                                                        ▼
    ZephonTrainer (trainer.py) = TorchTitan's Trainer; checks config vs data contract
        ├── ZephonTokenizer (tokenizer.py)     offline gpt2, the model vocab follows it
        └── ZephonDataLoader (dataloader.py)   one rank's lanes of a pipeline.Pipeline
              │ yields ({"input", "positions"}, labels) per micro-batch
              ├── collectives.py   all_gather of 32-byte lane digests (uint8) per step,
              │                    all_gather_object of lane states at checkpoints
              ├── runlog.py        <dump_folder>/zephon/steps.jsonl (digest, fingerprint chain,
              │                    tokens, data wait) and metrics.jsonl (TorchTitan's metrics)
              └── state_dict()     merged over ranks, identical on every rank: DCP stores it
                                   once under "dataloader.zephon"; any dp dividing L loads it

    python -m orchestrator.titan.recipe FLAGS   the run's recipe as TorchTitan's parser
                                                resolves it (recipe.py; run/recipe.py calls it)

Importing this package applies :mod:`orchestrator.titan.cpu_compat` first, so
TorchTitan's modules are only ever imported after the compatibility preparation.
"""

from orchestrator.titan import cpu_compat

cpu_compat.apply()
