"""A job service's configuration: where it keeps its state (its root folder), and its rules
(``service.json``, which ``zephon serve`` writes and every client of the root reads).

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import QueueError
from orchestrator.experiment import DeviceRequest
from orchestrator.service.admission import Limits, Rules
from orchestrator.service.daily_budgets import Budgets
from orchestrator.service.queue import JobQueue
from orchestrator.service.slurm_settings import ServiceLauncher, SlurmSettings
from pipeline.choice import parse_choice
from pipeline.errors import ConfigError

SERVICE_FILE = "service.json"
DEFAULT_ROOT = "zephon-service"


@dataclass(frozen=True)
class ServiceConfig:
    """Where a job service keeps its state, and its rules."""

    root: str = DEFAULT_ROOT
    """Folder holding service.json, queue.db, jobs/, runs/ and mlflow.db."""
    _: KW_ONLY
    data_roots: tuple[str, ...] = ()
    """Folders dataset files must lie under; empty: ``<root>/data``."""
    tracking_uri: str | None = None
    """MLflow tracking URI; None: ``sqlite:///<root>/mlflow.db``."""
    max_queued_per_submitter: int = 100
    """Jobs a submitter may have queued, running or preempted at once."""
    device: DeviceRequest = DeviceRequest.AUTO
    """Devices the scheduler shares: auto, cuda or cpu."""
    capacity: int | None = None
    """Most devices the scheduler uses at once; None: every free one."""
    extra_processes: int = 1
    """CPU: training processes beyond the cores, filling what the runs leave idle
    (:class:`~orchestrator.service.pool.DevicePool`); 0: one process per core."""
    plan_workers: int = 2
    """Dry-run (``plan``) jobs evaluated at once."""
    max_attempts: int = 3
    """Attempts of a job whose process keeps dying before it is marked failed."""
    limits: Limits = field(default_factory=Limits)
    budgets: Budgets = field(default_factory=Budgets)
    """Runs and device-hours per submitter and UTC day (:mod:`.budget`); none by default."""
    object_store_prefixes: tuple[str, ...] = ()
    """URL prefixes (``s3://bucket/prefix/``) dataset URLs may start with; none: no URLs."""
    launcher: ServiceLauncher = ServiceLauncher.LOCAL
    """What starts training attempts: local processes on leased devices, or Slurm jobs."""
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    """What each Slurm job asks for (with ``launcher=slurm``)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "launcher", parse_choice(ServiceLauncher, self.launcher, "launcher")
        )
        object.__setattr__(self, "device", parse_choice(DeviceRequest, self.device, "--device"))

    def check_serving(self) -> None:
        """ConfigError, before the service starts, for a data root that is no folder: every
        submission naming data there would be refused."""
        missing = [root for root in self.data_roots if not Path(root).expanduser().is_dir()]
        if missing:
            raise ConfigError(
                f"--data-root {', '.join(missing)}: no such folder; give folders that hold "
                "the datasets jobs may read"
            )

    @property
    def path(self) -> Path:
        return Path(self.root).absolute()

    @property
    def queue_path(self) -> Path:
        return self.path / "queue.db"

    @property
    def runs_root(self) -> Path:
        return self.path / "runs"

    def job_dir(self, job_id: str) -> Path:
        return self.path / "jobs" / job_id

    def rules(self) -> Rules:
        """The admission rules of this service."""
        roots = self.data_roots or (str(self.path / "data"),)
        uri = self.tracking_uri or f"sqlite:///{self.path / 'mlflow.db'}"
        return Rules(
            tuple(str(Path(r).expanduser().absolute()) for r in roots),
            str(self.runs_root),
            tracking_uri=uri,
            limits=self.limits,
            object_store_prefixes=self.object_store_prefixes,
        )

    def queue(self) -> JobQueue:
        """The root's job queue, created on first use (a submit, the scheduler)."""
        return JobQueue(
            self.queue_path,
            max_queued_per_submitter=self.max_queued_per_submitter,
            budgets=self.budgets,
        )

    def existing_queue(self) -> JobQueue:
        """The job queue of a service's root (one holding its ``service.json`` or a queue)
        for a command that only reads it or acts on its jobs; QueueError naming the root for
        any other folder, so that a mistyped ``--root`` creates nothing."""
        if not (self.path / SERVICE_FILE).is_file() and not self.queue_path.is_file():
            raise QueueError(
                f"{self.path} is no job service's root (no {SERVICE_FILE}, no "
                f"{self.queue_path.name}): check --root; a root is made by its first "
                "`zephon submit` or `zephon serve`"
            )
        return self.queue()

    def save(self) -> None:
        """Write ``service.json``, so clients of this root apply the same rules."""
        self.path.mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "root": str(self.path)}
        tmp = self.path / f".{SERVICE_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path / SERVICE_FILE)


def load_service(root: str | Path = DEFAULT_ROOT) -> ServiceConfig:
    """The service of ``root`` (its ``service.json``; defaults if it has none yet);
    ConfigError naming the file if it is not a service's configuration."""
    path = Path(root) / SERVICE_FILE
    if not path.is_file():
        return ServiceConfig(root=str(Path(root).absolute()))
    try:
        return _service_from_dict(json.loads(path.read_text()))
    except (ConfigError, TypeError, ValueError) as e:  # ValueError: not JSON, not UTF-8
        raise ConfigError(
            f"{path} is not a job service's configuration ({e}); fix it, or remove it and "
            f"run `zephon serve --root {root}` again, which writes it"
        ) from None


def _service_from_dict(data: Any) -> ServiceConfig:
    """The configuration ``service.json`` holds (:meth:`ServiceConfig.save`)."""
    data = dict(_object(data, SERVICE_FILE))
    limits = Limits(**_object(data.pop("limits", {}), "limits"))
    budgets = Budgets.from_dict(_object(data.pop("budgets", {}), "budgets"))
    slurm = SlurmSettings.from_dict(_object(data.pop("slurm", {}), "slurm"))
    data["data_roots"] = tuple(data.get("data_roots", ()))
    data["object_store_prefixes"] = tuple(data.get("object_store_prefixes", ()))
    return ServiceConfig(**data, limits=limits, budgets=budgets, slurm=slurm)


def _object(value: Any, key: str) -> dict[str, Any]:
    """``value``, the JSON object at ``key``; ConfigError if it is another value."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a JSON object, not {value!r}")
    return value
