"""One run: plan -> torchrun -> result.

::

    api.py         plan / run / resume / sync / compare (the Python API)
    elastic_check.py  verify_elastic: train on one dp size, resume on another, compare digests
      │  devices.py     free GPUs or cores -> dp (a divisor of the lanes)
      │  precision.py   train.precision=auto -> float32 or bfloat16, measured once per CPU
      │  recipe.py      the recipe (TorchTitan's parser, in a subprocess) and its fingerprint
      │  init_checkpoint.py  one seed checkpoint per recipe, made once, loaded by every run
      ▼
    launch.py      torchrun's command and environment, its process groups, progress
      │  warm_start.py  CPU launches fork from a server with torch and TorchTitan imported
    slurm.py       on Slurm: the allocation decides dp; each task finds its node's devices
      │  interrupts.py  SIGINT/SIGTERM: stop every launch, note how to continue, exit 130
      ▼
    titan/ (the trainer) writes the run folder; tracking/ mirrors it to MLflow
"""
