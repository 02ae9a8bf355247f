"""A run folder's records as types: ``experiment.json`` (:class:`ExperimentRecord`, written
once at the start) and ``run.json`` (:class:`RunState`, updated by the launching process).

The only code that reads these files by key. Each record writes back exactly the keys it
was read with or given (``present``) and any it does not know (``extra``), so a file of
an earlier release reads and, rewritten, stays as it was; old layouts are migrated in one
place, :meth:`ExperimentRecord.from_dict`. No torch import.

Design: docs/design/orchestrator_experiment.md
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Self

from orchestrator.experiment.config import ExperimentConfig, load_experiment
from orchestrator.experiment.fingerprints import Fingerprints
from orchestrator.experiment.setting_enums import Precision
from pipeline import fingerprint


class RunStatus(StrEnum):
    """A run's status in ``run.json`` (a ``str``: it is written and compared as its value)."""

    CREATED = "created"
    """Planned and recorded; no segment launched yet."""
    RUNNING = "running"
    """A segment is training (or the process that ran it died: a resume checks)."""
    SUCCEEDED = "succeeded"
    """Trained to its last step."""
    FAILED = "failed"
    """A segment ended with an error before the last step."""
    INTERRUPTED = "interrupted"
    """Stopped by SIGINT/SIGTERM; ``zephon resume`` continues it."""


@dataclass(frozen=True)
class Record:
    """Base of the records: a frozen dataclass that remembers which keys it holds."""

    present: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The keys read from the file or given since: the ones :meth:`to_dict` writes."""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Keys of the file that this release does not know, written back as they were."""
    NESTED: ClassVar[Mapping[str, type[Record]]] = {}
    """Fields holding a record (or a list of records) of that type."""

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)} - {"present", "extra"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The record of ``data`` (a file's JSON; ValueError if it is not an object)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        names = cls.names()
        known = {k: _decode(cls.NESTED.get(k), v) for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**known, present=frozenset(known), extra=extra)

    @classmethod
    def new(cls, **values: Any) -> Self:
        """A record holding ``values`` (and nothing else: other fields stay unwritten)."""
        return cls(**values, present=frozenset(values))

    def with_(self, **changes: Any) -> Self:
        """This record with ``changes`` (TypeError for a key it does not have); a nested
        record may be given as its JSON."""
        unknown = changes.keys() - self.names()
        if unknown:
            raise TypeError(f"{type(self).__name__} has no {sorted(unknown)}")
        typed = {k: _decode(self.NESTED.get(k), v) for k, v in changes.items()}
        return dataclasses.replace(self, **typed, present=self.present | changes.keys())

    def without(self, *keys: str) -> Self:
        """This record with ``keys`` unwritten (and back at their defaults)."""
        cleared = {
            f.name: f.default_factory()
            if f.default_factory is not dataclasses.MISSING
            else f.default
            for f in dataclasses.fields(self)
            if f.name in keys
        }
        return dataclasses.replace(self, **cleared, present=self.present - set(keys))

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON: the keys it holds, as they are written."""
        out = dict(self.extra)
        for name in sorted(self.present):
            out[name] = _encode(getattr(self, name))
        return out


def _decode(kind: type[Record] | None, value: Any) -> Any:
    """``value`` with the JSON of a record of ``kind`` (or a list of them) made that record."""
    if kind is None or value is None or isinstance(value, Record):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(v if isinstance(v, Record) else kind.from_dict(v) for v in value)
    return kind.from_dict(value)


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


# -- experiment.json ---------------------------------------------------------------------------


@dataclass(frozen=True)
class InitCheckpoint(Record):
    """Where a recipe's initial weights are, and their content hash
    (:mod:`orchestrator.run.initial_weights`)."""

    init_key: str = ""
    path: str = ""
    """Absolute path of the DCP checkpoint folder (``--checkpoint.initial-load-path``)."""
    sha256: str = ""

    @classmethod
    def of(cls, init_key: str, path: str, sha256: str) -> InitCheckpoint:
        return cls.new(init_key=init_key, path=path, sha256=sha256)


@dataclass(frozen=True)
class Extension(Record):
    """A longer schedule given to a run: the step it changed at and the recipe before."""

    at_step: int = 0
    from_recipe: str | None = None


@dataclass(frozen=True)
class ExperimentRecord(Record):
    """``experiment.json``: the experiment as planned, its data fingerprints, its recipe
    and initial checkpoint, and the identity that answers it."""

    config: Mapping[str, Any] = field(default_factory=dict)
    """The experiment (:meth:`ExperimentConfig.to_dict`): paths absolute, precision resolved."""
    contract_fingerprint: str = ""
    variant: str = ""
    contract: Mapping[str, Any] = field(default_factory=dict)
    mixture: Mapping[str, str] = field(default_factory=dict)
    varied: Mapping[str, Any] = field(default_factory=dict)
    recipe: Mapping[str, Any] | None = None
    """TorchTitan's resolved settings (absent in runs recorded before recipes)."""
    recipe_fingerprint: str | None = None
    init_key: str | None = None
    parameters: int | None = None
    init_checkpoint: InitCheckpoint | None = None
    identity: str | None = None
    """The run's answer identity (:mod:`orchestrator.run.identity_index`); none once extended."""
    extended: tuple[Extension, ...] = ()
    NESTED: ClassVar[Mapping[str, type[Record]]] = {
        "init_checkpoint": InitCheckpoint,
        "extended": Extension,
    }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentRecord:
        """The record of an ``experiment.json`` of any release: experiments recorded before
        ``train.precision`` trained in TorchTitan's default, bfloat16, and before orders
        had versions, in order v1. A key it lacks reads as its default."""
        if not isinstance(data.get("config"), Mapping):
            return super().from_dict(data)
        config = dict(data["config"])
        if "precision" not in config.get("train", {}):
            config["train"] = {**config.get("train", {}), "precision": Precision.BFLOAT16.value}
        if "order" not in config.get("data", {}):
            config["data"] = {**config.get("data", {}), "order": "v1"}
        return super().from_dict({**data, "config": config})

    def experiment_config(self) -> ExperimentConfig:
        """The experiment this run trains, loaded and checked."""
        return load_experiment(dict(self.config))

    @property
    def fingerprints(self) -> Fingerprints:
        """The data contract, mixture and fingerprints recorded at the run's start."""
        return Fingerprints(
            contract=dict(self.contract),
            mixture=dict(self.mixture),
            contract_fingerprint=self.contract_fingerprint,
            variant=self.variant,
            varied=dict(self.varied),
        )

    def answer_identity(self) -> str:
        """The run's identity (:mod:`orchestrator.run.identity_index`), from its children's: the
        data contract's and variant's fingerprints, the recipe's, the initial checkpoint's
        sha256, and the ``eval`` section."""
        return fingerprint(
            {
                "contract": self.contract_fingerprint,
                "variant": self.variant,
                "recipe": self.recipe_fingerprint,
                "init": self.init_sha256,
                "eval": self.config["eval"],
            }
        )

    # Settings of the recorded experiment that readers need without loading it (a load
    # checks the whole experiment: tens of milliseconds).

    @property
    def name(self) -> str | None:
        return self.config.get("name")

    @property
    def data_settings(self) -> Mapping[str, Any]:
        """The experiment's ``data`` section as recorded."""
        return self.config.get("data") or {}

    @property
    def planned_steps(self) -> int | None:
        return (self.config.get("train") or {}).get("steps")

    @property
    def precision(self) -> str | None:
        """The precision it trains in (resolved when it was planned)."""
        return (self.config.get("train") or {}).get("precision")

    @property
    def seeds(self) -> tuple[int | None, int | None, int | None]:
        """``(data.seed, data.shuffle_seed, train.seed)``."""
        data, train = self.data_settings, self.config.get("train") or {}
        return data.get("seed"), data.get("shuffle_seed"), train.get("seed")

    @property
    def requested_dp(self) -> int | None:
        """``resources.dp`` as written (None: chosen from the free devices)."""
        return (self.config.get("resources") or {}).get("dp")

    @property
    def recorded_init(self) -> InitCheckpoint | None:
        """The initial checkpoint the run started from (None: recorded without one)."""
        init = self.init_checkpoint
        return init if init is not None and init.sha256 else None

    @property
    def init_sha256(self) -> str | None:
        return None if self.recorded_init is None else self.recorded_init.sha256


# -- run.json ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment(Record):
    """One launch of a run: from the step it started at to the step it ended at."""

    dp_size: int | None = None
    start_step: int = 0
    device: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    returncode: int | None = None
    end_step: int | None = None


@dataclass(frozen=True)
class PartialUnit(Record):
    """How much MLflow holds of a unit of metrics larger than a batch (one step's or one
    eval's, sent over several batches): its first ``points``; a sync sends the rest."""

    cursor: str = ""
    """The cursor field the unit advances (``metrics_step`` or ``eval_step``)."""
    step: int = 0
    """The unit's step."""
    points: int = 0
    """How many of its points, in the order a sync sends them, MLflow holds."""


@dataclass(frozen=True)
class InFlight(Record):
    """A batch of metrics sent to MLflow whose acceptance is not recorded yet: a sync killed
    between the two asks MLflow whether it holds ``probe`` at ``step`` (the batch's last
    point) before it sends anything again, so no point is logged twice."""

    cursors: Mapping[str, int] = field(default_factory=dict)
    """Cursor field -> the step it reaches once the batch is accepted."""
    probe: str = ""
    """The metric key of the batch's last point."""
    step: int = 0
    """The step of the batch's last point."""
    partial: PartialUnit | None = None
    """What MLflow holds of a unit larger than a batch once the batch is accepted: the
    batch ends inside that unit (unwritten when it ends at a unit's end)."""
    NESTED: ClassVar[Mapping[str, type[Record]]] = {"partial": PartialUnit}


@dataclass(frozen=True)
class TrackingCursor(Record):
    """What of the run the tracking store has (``run.json``'s ``tracking``): each sent
    once, so a sync after a crash sends the rest."""

    tags: Mapping[str, str] = field(default_factory=dict)
    parent_run_id: str | None = None
    params_logged: bool = False
    inputs_logged: bool = False
    metrics_step: int | None = None
    """The last step whose metrics were sent."""
    eval_step: int | None = None
    """The last step whose eval scores were sent."""
    artifacts: Mapping[str, list[int]] = field(default_factory=dict)
    """Artifact path -> the (size, mtime_ns) it was sent at."""
    in_flight: InFlight | None = None
    """The batch being sent (unwritten when none is)."""
    partial: PartialUnit | None = None
    """The unit after the cursors that MLflow holds part of (unwritten when none)."""
    NESTED: ClassVar[Mapping[str, type[Record]]] = {"in_flight": InFlight, "partial": PartialUnit}


@dataclass(frozen=True)
class RunState(Record):
    """``run.json``: a run's status, its segments, and where it is tracked."""

    status: RunStatus | None = None
    segments: tuple[Segment, ...] = ()
    sweep: str | None = None
    parent_run_id: str | None = None
    tracking_enabled: bool = True
    tracking_uri: str | None = None
    mlflow_experiment: str | None = None
    mlflow_run_id: str | None = None
    tracking: TrackingCursor = field(default_factory=TrackingCursor)
    launch_process_groups: tuple[int, ...] = ()
    """Process groups of the launch now running (a resume stops leftovers)."""
    slurm_job_id: str | None = None
    NESTED: ClassVar[Mapping[str, type[Record]]] = {
        "segments": Segment,
        "tracking": TrackingCursor,
    }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunState:
        state = super().from_dict(data)
        status = None if state.status is None else RunStatus(state.status)
        groups = tuple(state.launch_process_groups or ())
        return dataclasses.replace(state, status=status, launch_process_groups=groups)

    @property
    def dp_sizes(self) -> list[int]:
        """The dp size of each segment that recorded one."""
        return [s.dp_size for s in self.segments if s.dp_size is not None]
