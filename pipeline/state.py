"""Pipeline state: format, merging across ranks, and checks against a configuration.

A state is JSON-serialisable and independent of the cluster size::

    {"format": "zephon.pipeline-state.v1",
     "contract": {...}, "contract_fingerprint": "<sha256>",
     "step": <steps completed>,
     "tokens_per_byte": {dataset: float},        # calibration, adopted on restore
     "lanes": {"<lane>": {"window": w, "plan": {...}, "delivered": n}, ...}}

Each rank's ``state_dict()`` holds its own lanes; ``merge_states`` joins the
states of all ranks into one that any rank of any allowed dp size can load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.errors import StateError

STATE_FORMAT = "zephon.pipeline-state.v1"


def fingerprint(obj: Any) -> str:
    """SHA-256 of the canonical JSON encoding (sorted keys, no whitespace) of ``obj``."""
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def ordered_fingerprint(parts: list[Any]) -> str:
    """SHA-256 of the JSON of ``parts`` as given (a tag first, then its children's
    fingerprints in their fixed order): the identity of a shard version, a dataset's
    manifest, its numbering and its calibration sample."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def merge_states(states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge per-rank states of the same step into one state holding every rank's lanes."""
    states = list(states)
    if not states:
        raise StateError("merge_states() needs at least one state")
    first = states[0]
    for key in ("format", "contract_fingerprint", "step", "tokens_per_byte"):
        values = {json.dumps(s.get(key), sort_keys=True) for s in states}
        if len(values) > 1:
            raise StateError(
                f"cannot merge states that differ in '{key}' ({sorted(values)}); merge the states "
                "that all ranks saved at the same step of the same run"
            )
    lanes: dict[str, Any] = {}
    for state in states:
        for lane, lane_state in state["lanes"].items():
            if lane in lanes and lanes[lane] != lane_state:
                raise StateError(
                    f"two states disagree about lane {lane}; they come from different runs"
                )
            lanes[lane] = lane_state
    merged = dict(first)
    merged["lanes"] = dict(sorted(lanes.items(), key=lambda item: int(item[0])))
    return merged


def check_state(state: Mapping[str, Any], contract: Mapping[str, Any], owned_lanes: range) -> None:
    """Raise StateError, naming what differs, unless ``state`` can restore ``owned_lanes``."""
    if state.get("format") != STATE_FORMAT:
        raise StateError(
            f"not a Zephon pipeline state (format {state.get('format')!r}, expected {STATE_FORMAT!r})"
        )
    saved = state["contract"]
    if fingerprint(saved) != fingerprint(contract):
        fields = sorted(k for k in set(saved) | set(contract) if saved.get(k) != contract.get(k))
        details = "; ".join(
            f"{k}: saved {saved.get(k)!r}, configured {contract.get(k)!r}" for k in fields
        )
        raise StateError(
            f"the state was saved under another data contract; differing fields: {details}. "
            "Restore it with the original data configuration, or start a new run."
        )
    have = {int(lane) for lane in state["lanes"]}
    missing = sorted(set(owned_lanes) - have)
    if missing:
        raise StateError(
            f"the state lacks lanes {missing} that this rank owns (it holds {sorted(have)}); "
            "save the states of all ranks and combine them with merge_states() before loading"
        )
