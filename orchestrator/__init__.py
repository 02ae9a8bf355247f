"""Zephon's orchestrator: experiments in, trustworthy comparisons out.

::

    experiment (YAML / dict / Hydra config + key=value overrides)
        |  experiment.py   schema, validation (every problem at once), fingerprints
        v
    plan --------------------> dry run: dp, lanes per rank, tokens, contract + variant
        |  devices.py      free GPUs / cores -> dp (a divisor of the lanes)
        v
    launch.py   torchrun (local | multinode c10d | slurm via submitit)
        |          -> titan/ (ZephonTrainer + ZephonDataLoader + HeldOutEvaluator)
        v
    runfolder.py  run.json, launch.log, titan/zephon/{steps,metrics,eval}.jsonl, checkpoints
        |  tracking.py     incremental, batched MLflow sync (the folder is the buffer)
        v
    MLflow run (params, tags, metrics, digests)  ---- compare.py: the guard ----> table + plot
                                                      or refusal with the reason

``api.py`` is the Python API over all of it; ``cli.py`` (``zephon``) prints its
results as JSON with stable exit codes. For many concurrent submitters::

    service.py (submit/status/wait/cancel) -> admission.py -> queue.py (SQLite, WAL)
        scheduler.py (``zephon serve``): pool.py leases devices -> ``zephon run|resume``
        mcp_server.py (``zephon mcp``): the same functions as MCP tools The lane pipeline (``pipeline/``) knows
nothing of this package.
"""
