"""Where the job service starts training attempts, and what it asks Slurm for.

Design: docs/design/orchestrator_service.md, On Slurm
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from pipeline.errors import ConfigError


class ServiceLauncher(StrEnum):
    """``zephon serve --launcher``: what starts each training attempt."""

    LOCAL = "local"
    """A process on this machine, on devices leased from the service's pool."""
    SLURM = "slurm"
    """One Slurm job per attempt (submitit); Slurm decides where and when it runs."""


@dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    """What every Slurm job of the service asks for (``zephon serve --partition ...``)."""

    partition: str | None = None
    """Slurm partition; None: the cluster's default."""
    account: str | None = None
    """Slurm account charged; None: the user's default."""
    job_devices: int = 1
    """Cores (CPU) or GPUs a job asks for when its spec sets no ``resources.dp``."""
    timeout_min: int = 24 * 60
    """Time limit of a job whose spec sets no ``resources.timeout_s``."""
    parameters: dict[str, Any] = field(default_factory=dict)
    """Other submitit parameters for every job, e.g. ``slurm_qos``, ``mem_gb``."""
    poll_s: float = 5.0
    """How often the states of every job the service has in Slurm are read (one ``squeue``)."""

    def __post_init__(self) -> None:
        problems = [
            f"slurm.{name} must be {rule}, not {getattr(self, name)!r}"
            for name, rule, ok in (
                ("job_devices", "an integer >= 1", _is_int(self.job_devices, least=1)),
                ("timeout_min", "an integer >= 1", _is_int(self.timeout_min, least=1)),
                ("poll_s", "a number > 0", _is_positive_number(self.poll_s)),
            )
            if not ok
        ]
        owned = sorted(set(self.parameters) & OWNED_PARAMETERS)
        if owned:
            problems.append(
                f"slurm.parameters sets {owned}: the service sets them for each job (one node, "
                "one task, the job's cores or GPUs, its time limit); use job_devices or "
                "timeout_min, or resources.dp and resources.timeout_s in the spec"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlurmSettings:
        """Settings from ``service.json``'s ``slurm`` object; ConfigError naming unknown keys."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown slurm setting(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


OWNED_PARAMETERS = frozenset(
    {
        "nodes",
        "tasks_per_node",
        "cpus_per_task",
        "gpus_per_node",
        "timeout_min",
        "name",
        "slurm_partition",
        "slurm_account",
    }
)
"""submitit parameters the service sets itself for each job."""


def _is_int(value: Any, *, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _is_positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
