"""The data spec: an experiment's ``data`` section as one JSON file, the trainer's data config.

One schema on both sides (:class:`~orchestrator.experiment.config.DataSection`), local paths
made absolute. Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from orchestrator.errors import ExperimentError
from orchestrator.experiment.config import DataSection, load_data_section
from orchestrator.experiment.fingerprints import absolute
from orchestrator.experiment.runfolder import write_json_atomic


def write_data_spec(path: str | os.PathLike[str], data: DataSection) -> None:
    """Write ``data`` to ``path`` (atomically), its local paths made absolute."""
    resolved = replace(
        data,
        datasets={name: [absolute(p) for p in paths] for name, paths in data.datasets.items()},
        cache_dir=None if data.cache_dir is None else absolute(data.cache_dir),
        token_cache_dir=None if data.token_cache_dir is None else absolute(data.token_cache_dir),
    )
    write_json_atomic(Path(path), asdict(resolved))


def read_data_spec(path: str | os.PathLike[str]) -> DataSection:
    """The ``DataSection`` stored at ``path``; ExperimentError saying what is wrong with it."""
    try:
        content = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ExperimentError([f"data spec {str(path)!r} does not exist"]) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError([f"data spec {str(path)!r} is not readable JSON: {e}"]) from None
    if not isinstance(content, dict):
        raise ExperimentError([f"data spec {str(path)!r} is not a JSON object"])
    try:
        return load_data_section(content)
    except ExperimentError as e:
        raise ExperimentError([f"data spec {str(path)!r}: {p}" for p in e.problems]) from None
