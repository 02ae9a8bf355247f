"""``data.compared``: what an experiment's variants differ in, and how it splits the data
contract into what stays fixed between compared runs and what names a variant.

* ``mixture`` (the default): the token shares; the contract and fingerprints of every run made
  before axes existed.
* ``dataset:NAME``: dataset NAME's content (its shards, text field and end policy) may differ;
  the variant is named by that dataset's content fingerprint and paths.
* ``processing``: the processing chain (``data.process``) may differ.

Design: docs/curation.md, docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

AXIS_FIELD = "compared"
"""The contract's record of a declared axis (absent for ``mixture``)."""
PATHS = "paths"
"""A dataset version's paths in :attr:`Variation.varied`: they name it, its content is it."""


class AxisKind(StrEnum):
    """The kinds of ``data.compared``."""

    MIXTURE = "mixture"
    DATASET = "dataset"
    PROCESSING = "processing"


@dataclass(frozen=True)
class VariantAxis:
    """One ``data.compared`` value."""

    kind: AxisKind
    dataset: str | None = None
    """The dataset whose versions are compared (``dataset:NAME`` only)."""

    def __str__(self) -> str:
        return f"{self.kind}:{self.dataset}" if self.kind is AxisKind.DATASET else str(self.kind)

    @property
    def setting(self) -> str | None:
        """The experiment setting that may differ besides the mixture."""
        if self.kind is AxisKind.DATASET:
            return f"data.datasets.{self.dataset}"
        return "data.process" if self.kind is AxisKind.PROCESSING else None


def parse_axis(text: str) -> VariantAxis:
    """``mixture``, ``dataset:NAME`` or ``processing``; ValueError saying the valid forms."""
    kind, sep, dataset = text.partition(":")
    if kind == AxisKind.DATASET and sep and dataset:
        return VariantAxis(AxisKind.DATASET, dataset)
    if not sep and kind in (AxisKind.MIXTURE, AxisKind.PROCESSING):
        return VariantAxis(AxisKind(kind))
    raise ValueError(
        f"data.compared={text!r}: use mixture, processing or dataset:NAME (NAME one of "
        "data.datasets)"
    )


def split_varied(
    contract: dict[str, Any], axis: VariantAxis, paths: dict[str, list[str]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The contract without what the axis lets differ, and that part (``{"data.datasets.web":
    {...its contract entry, "paths": [...]}}`` or ``{"data.process": [...steps]}``; empty
    for ``mixture``: the contract is then what it always was)."""
    if axis.kind is AxisKind.MIXTURE:
        return contract, {}
    fixed = {**contract, AXIS_FIELD: str(axis)}
    if axis.kind is AxisKind.PROCESSING:
        process = fixed.pop("process", None)
        return fixed, {"data.process": [] if process is None else process["steps"]}
    entries = fixed["datasets"]
    entry = next(e for e in entries if e["name"] == axis.dataset)
    fixed["datasets"] = [{"name": e["name"]} if e is entry else e for e in entries]
    version = {k: v for k, v in entry.items() if k != "name"}
    if "tokens_per_byte" in fixed:  # measured on the version's own records
        measured = dict(fixed["tokens_per_byte"])
        version["tokens_per_byte"] = measured.pop(str(axis.dataset))
        fixed["tokens_per_byte"] = measured
    return fixed, {f"data.datasets.{axis.dataset}": {**version, PATHS: paths[axis.dataset]}}


def varied_identity(varied: dict[str, Any]) -> dict[str, Any]:
    """What identifies a variant in ``varied``: a dataset version's content, not its paths."""
    return {
        key: {k: v for k, v in value.items() if k != PATHS} if isinstance(value, dict) else value
        for key, value in varied.items()
    }


def varied_label(varied: dict[str, Any]) -> str:
    """A short, readable name of what a variant varies: ``web@3f2a9c1b (/d/filtered/*.jsonl)``
    or ``process: length, gopher_quality`` ("" for a mixture)."""
    parts = []
    for key, value in sorted(varied.items()):
        if key == "data.process":
            steps = [str(s.get("step")) for s in value] or ["none"]
            parts.append(f"process: {', '.join(steps)}")
        else:
            name = key.rsplit(".", 1)[-1]
            fp = str(value.get("fingerprint", ""))[:8]
            parts.append(f"{name}@{fp} ({', '.join(value.get(PATHS, []))})")
    return "; ".join(parts)
