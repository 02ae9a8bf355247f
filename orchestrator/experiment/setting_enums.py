"""The closed sets of experiment settings, as ``StrEnum``s (a member equals its YAML string)."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    """``train.precision``: TorchTitan's ``training.mixed_precision_param``, or ``auto``
    (resolved per machine by :mod:`orchestrator.machine.precision`)."""

    AUTO = "auto"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class DecayType(StrEnum):
    """How the learning rate decays (TorchTitan's ``lr_scheduler.decay_type``)."""

    LINEAR = "linear"
    SQRT = "sqrt"
    COSINE = "cosine"


class Launcher(StrEnum):
    """``resources.launcher``: what starts the training processes."""

    LOCAL = "local"
    """One torchrun on this machine."""
    MULTINODE = "multinode"
    """One torchrun per node, meeting at a c10d rendezvous."""
    SLURM = "slurm"
    """A Slurm job through submitit, one task per rank."""


class DeviceKind(StrEnum):
    """The kind of device a run trains on."""

    CPU = "cpu"
    CUDA = "cuda"


class DeviceRequest(StrEnum):
    """``resources.device``: a device kind, or ``auto`` (CUDA if a GPU is free, else CPU)."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


def choice_problem(key: str, value: object, choices: type[StrEnum]) -> list[str]:
    """``["<key>=<value>: use one of ..."]`` when ``value`` is not one of ``choices``, else []."""
    if value in {c.value for c in choices}:
        return []
    return [f"{key}={value!r}: use one of {', '.join(c.value for c in choices)}"]
