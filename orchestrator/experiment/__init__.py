"""What an experiment is: its schema, its validation, its data and their fingerprints.

No torch, no MLflow, no subprocess: this package imports nothing of ``run/``,
``service/``, ``guard/``, ``tracking/`` or ``titan/`` (tests/orchestrator/test_layout.py).

Design: docs/design/orchestrator_experiment.md.
"""

from orchestrator.experiment.config import (
    DataSection,
    EvalSection,
    ExperimentConfig,
    ModelSection,
    PhaseSection,
    ResourcesSection,
    TrackingSection,
    TrainSection,
    load_data_section,
    load_experiment,
)
from orchestrator.experiment.dataspec import read_data_spec, write_data_spec
from orchestrator.experiment.fingerprints import (
    Fingerprints,
    absolute,
    build_pipeline,
    fingerprints,
)
from orchestrator.experiment.phases import PhaseOutline, phase_outline
from orchestrator.experiment.setting_enums import (
    DecayType,
    DeviceKind,
    DeviceRequest,
    Launcher,
    Precision,
)
from orchestrator.experiment.validation import (
    dp_problems,
    dp_sizes,
    split_step_problems,
    validate,
)

__all__ = [
    "DataSection",
    "DecayType",
    "DeviceKind",
    "DeviceRequest",
    "EvalSection",
    "ExperimentConfig",
    "Fingerprints",
    "Launcher",
    "ModelSection",
    "PhaseOutline",
    "PhaseSection",
    "Precision",
    "ResourcesSection",
    "TrackingSection",
    "TrainSection",
    "absolute",
    "build_pipeline",
    "dp_problems",
    "dp_sizes",
    "fingerprints",
    "load_data_section",
    "load_experiment",
    "phase_outline",
    "read_data_spec",
    "split_step_problems",
    "validate",
    "write_data_spec",
]
