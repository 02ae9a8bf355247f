"""One run: plan -> prepare -> answer -> launch (or follow node 0) -> finish.

api.py is the Python API (plan, run, resume, sync) and its phases, elastic_check.py its
``verify_elastic``; planner.py, recipe.py and initial_weights.py resolve what a run trains
on and from; lifecycle.py's ``Run`` owns a run's records and trains its segments;
launch.py (with warm_start.py) or slurm.py starts torchrun, and interrupts.py stops it.
The trainer (``titan/``) writes the run folder.

Design: docs/design/orchestrator_run.md
"""
