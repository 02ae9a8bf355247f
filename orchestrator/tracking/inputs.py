"""A training run's data in MLflow's own terms: its datasets as MLflow dataset inputs.

Each dataset the run trains on becomes one dataset input of its MLflow run (what the runs
list shows in its Datasets column and ``search_runs`` filters on, ``dataset.name = 'code'``):

* ``name``: the dataset's name in the data contract;
* ``digest``: its fingerprint in the data contract, cut to MLflow's 36 characters (the full
  fingerprint is in the profile);
* ``source``: the shard paths or globs it reads, as JSON ``{"uris": [...]}`` (with one path
  also MLflow's own ``uri``, or ``url`` for HTTP, so MLflow's source classes read it);
  ``source_type`` from the first path's scheme (``local``, ``s3``, ``http``, ...);
* ``profile``: JSON ``{"token_share", "fingerprint", "field", "exhausted",
  "tokens_per_byte"}`` (a staged mixture adds ``phase_shares``: the share in each phase);
* the input tag ``mlflow.data.context`` = ``training``.

A dataset whose versions are what the experiment compares (``data.compared=dataset:NAME``)
has its version, not in the contract, in ``experiment.json``'s ``varied``
(``{"data.datasets.NAME": {fingerprint, field, exhausted, tokens_per_byte, paths}}``): its
input is that version.

Evaluation corpora (``data.eval_sets``: ``{NAME: [globs]}``, when the experiment has them) are inputs with context ``evaluation``, their digest their fingerprint
in the contract's ``eval_sets``, else a hash of their name and paths. Everything here is
plain data read from the run folder's records;
:class:`~orchestrator.tracking.tracker.Tracker` sends it (MLflow imported there).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.tracking.mirrored_run import MirroredRun
from orchestrator.tracking.mlflow_names import run_display_name
from orchestrator.tracking.store import load_mlflow

if TYPE_CHECKING:  # annotations only; load_mlflow() imports MLflow at run time
    from mlflow.entities import DatasetInput

CONTEXT_TAG = "mlflow.data.context"
"""MLflow's own input tag (``mlflow.utils.mlflow_tags.MLFLOW_DATASET_CONTEXT``)."""
TRAINING = "training"
EVALUATION = "evaluation"
MAX_DIGEST = 36
"""MLflow 3.17's longest dataset digest (``mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE``)."""
MAX_SOURCE = 65535
"""MLflow 3.17's longest dataset source (``MAX_DATASET_SOURCE_SIZE``)."""


@dataclass(frozen=True)
class InputRecord:
    """One dataset input as MLflow stores it, before it is an MLflow entity."""

    name: str
    digest: str
    source_type: str
    source: str
    """JSON: ``{"uris": [...]}`` (and ``uri``/``url`` with a single path)."""
    profile: str
    """JSON summary of the dataset in this run."""
    context: str
    """``training`` or ``evaluation``."""

    @property
    def key(self) -> tuple[str, str]:
        """What MLflow keeps one input of per run: the dataset's name and digest."""
        return (self.name, self.digest)

    def entity(self) -> DatasetInput:
        """This input as MLflow's ``DatasetInput`` (MLflow is imported here)."""
        entities = load_mlflow().entities
        dataset = entities.Dataset(
            name=self.name,
            digest=self.digest,
            source_type=self.source_type,
            source=self.source,
            profile=self.profile,
        )
        return entities.DatasetInput(dataset, tags=[entities.InputTag(CONTEXT_TAG, self.context)])


def training_inputs(
    experiment: ExperimentRecord, paths: Mapping[str, Sequence[str]] | None = None
) -> list[InputRecord]:
    """The training datasets of a run folder's ``experiment.json`` record, contract order.

    ``paths``: dataset name -> shard paths or globs (the run's data spec, local paths
    absolute); None or a dataset missing there: the experiment's ``data.datasets``, else
    the contract entry's own ``paths``.
    """
    contract = experiment.contract
    config_paths = experiment.data_settings.get("datasets") or {}
    mixture = experiment.mixture
    tokens_per_byte = dict(contract.get("tokens_per_byte") or {})
    phases = contract.get("phases") or []
    compared = contract.get("compared_phase")
    varied = experiment.varied
    records = []
    for listed in contract.get("datasets") or []:
        name = str(listed["name"])
        version = varied.get(f"data.datasets.{name}")
        entry = {**listed, **version} if isinstance(version, dict) else listed
        if isinstance(version, dict) and "tokens_per_byte" in version:
            tokens_per_byte[name] = version["tokens_per_byte"]
        fingerprint = str(entry.get("fingerprint") or "")
        shards = [
            str(p)
            for p in (paths or {}).get(name) or config_paths.get(name) or entry.get("paths") or []
        ]
        profile: dict[str, Any] = {
            "token_share": _share(mixture.get(name)),
            "fingerprint": fingerprint,
            "field": entry.get("field"),
            "exhausted": entry.get("exhausted"),
        }
        if name in tokens_per_byte:
            profile["tokens_per_byte"] = tokens_per_byte[name]
        if phases:
            profile["phase_shares"] = [
                _share(mixture.get(name))
                if k == compared
                else _share((phase.get("mixture") or {}).get(name))
                for k, phase in enumerate(phases)
            ]
        records.append(
            _record(name, fingerprint or _paths_digest(name, shards), shards, profile, TRAINING)
        )
    return records


def evaluation_inputs(
    experiment: ExperimentRecord, paths: Mapping[str, Sequence[str]] | None = None
) -> list[InputRecord]:
    """The evaluation corpora of an ``experiment.json`` record: ``data.eval_sets``
    (``{NAME: [globs]}``), each with its fingerprint in the contract's ``eval_sets``;
    ``paths`` (the data spec's ``eval_sets``, local paths absolute) before the experiment's
    own."""
    sets = experiment.data_settings.get("eval_sets") or {}
    fingerprints = {
        str(e.get("name")): e.get("fingerprint")
        for e in experiment.contract.get("eval_sets") or []
        if isinstance(e, dict)
    }
    return [
        evaluation_input(
            str(name), (paths or {}).get(name) or globs, fingerprints.get(str(name)) or None
        )
        for name, globs in sorted(sets.items())
    ]


def evaluation_input(
    name: str, paths: str | Sequence[str], fingerprint: str | None = None
) -> InputRecord:
    """The evaluation corpus ``name`` read from ``paths``; its digest ``fingerprint`` if
    given, else a hash of its name and paths."""
    shards = [paths] if isinstance(paths, str) else [str(p) for p in paths]
    profile = {"fingerprint": fingerprint} if fingerprint else {}
    digest = fingerprint or _paths_digest(name, shards)
    return _record(name, digest, shards, profile, EVALUATION)


def mirrored_display_name(run: MirroredRun) -> str:
    """The MLflow run name of ``run``: :func:`run_display_name` of its records, the dp size
    its first segment started on."""
    sizes = run.state.dp_sizes
    return run_display_name(run.experiment, dp=sizes[0] if sizes else None)


def mirrored_inputs(run: MirroredRun) -> list[InputRecord]:
    """The dataset inputs of ``run``: its training datasets and evaluation sets (shard
    paths from its data spec, local paths absolute, else from ``experiment.json``)."""
    try:
        spec = json.loads(run.folder.data_spec_path.read_text())
    except (OSError, ValueError):  # none yet, or not readable: experiment.json's paths
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    paths, eval_paths = (spec.get(key) for key in ("datasets", "eval_sets"))
    return [
        *training_inputs(run.experiment, paths if isinstance(paths, dict) else None),
        *evaluation_inputs(run.experiment, eval_paths if isinstance(eval_paths, dict) else None),
    ]


def _record(
    name: str, digest: str, shards: list[str], profile: dict[str, Any], context: str
) -> InputRecord:
    source_type = _source_type(shards[0]) if shards else "local"
    source: dict[str, Any] = {"uris": shards}
    if len(shards) == 1:  # the key MLflow's own source class of that type reads
        source["url" if source_type == "http" else "uri"] = shards[0]
    return InputRecord(
        name=name,
        digest=digest[:MAX_DIGEST],
        source_type=source_type,
        source=_source_json(source),
        profile=json.dumps(profile, sort_keys=True),
        context=context,
    )


def _source_json(source: dict[str, Any]) -> str:
    """``source`` as JSON within MLflow's limit: a dataset listing more shard files than fit
    keeps the first ones and says how many it left out (``"left_out"``)."""
    text = json.dumps(source, sort_keys=True)
    uris = source["uris"]
    kept = len(uris)
    while len(text) > MAX_SOURCE and kept:
        kept = kept * MAX_SOURCE // (len(text) + 64) if kept > 1 else 0
        text = json.dumps({"uris": uris[:kept], "left_out": len(uris) - kept}, sort_keys=True)
    return text


def _source_type(path: str) -> str:
    """MLflow's source type for ``path``: its URL scheme (``http`` for HTTPS), else ``local``."""
    scheme, sep, _ = path.partition("://")
    if not sep or scheme == "file":
        return "local"
    return "http" if scheme in ("http", "https") else scheme


def _paths_digest(name: str, shards: list[str]) -> str:
    text = json.dumps({"name": name, "uris": shards}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _share(value: object) -> float | None:
    return None if value is None else float(str(value))
