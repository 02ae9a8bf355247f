"""One run: plan -> torchrun -> result.

api.py is the Python API (plan, run, resume, sync, compare) and elastic_check.py its
``verify_elastic``; devices, precision, recipe and init_checkpoint resolve what a run
trains on and from; launch.py (with warm_start.py) or slurm.py starts torchrun, and
interrupts.py stops it. The trainer (``titan/``) writes the run folder.

Design: docs/design/orchestrator_run.md
"""
