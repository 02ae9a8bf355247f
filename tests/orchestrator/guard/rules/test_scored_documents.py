"""``trained_on_scored``: a run made before decontamination, whose shards read hold copies of
documents it scores, is refused naming it and the count; runs made since are not checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orchestrator.guard.comparison import RefusalCode
from orchestrator.guard.rules import check
from orchestrator.guard.rules.scored_documents import scored_copies
from pipeline import Dataset, WorkSource
from tests.support.guard_runs import make_run
from tests.support.helpers import write_jsonl

SHARD = {"0": {"file": "part.jsonl", "sha256": "x"}}


def union_of_versions(folder: Path) -> dict:
    """A raw corpus and its long half as two datasets of one experiment (the workaround
    that leaked before decontamination)."""
    raw = ["".join(f"doc{i:03d} says part {k}. " for k in range(2 + i % 9)) for i in range(160)]
    write_jsonl(folder / "raw.jsonl", raw)
    write_jsonl(folder / "long.jsonl", [t for t in raw if len(t) > 100])
    return {
        "datasets": {n: [str(folder / f"{n}.jsonl")] for n in ("long", "raw")},
        "holdout_bytes": 4096,
        "holdout_docs": 24,
        "cache_dir": str(folder / "cache"),
    }


def expected_copies(data: dict) -> dict[str, int]:
    """The copies, from the plan's own held-out records: each dataset's held out of the
    other, found among the other's records."""
    datasets = [
        Dataset(n, paths, cache_dir=data["cache_dir"])
        for n, paths in sorted(data["datasets"].items())
    ]
    source = WorkSource(datasets, {"long": 1, "raw": 1}, holdout_bytes=4096, holdout_docs=24)
    held = [set(ds.read_records(source.heldout_records(d))) for d, ds in enumerate(datasets)]
    return {
        "long": len({t for t in held[1] if len(t) > 100} - held[0]),
        "raw": len(held[0] - held[1]),
    }


def test_an_old_run_that_read_copies_of_its_scored_documents_is_refused(tmp_path: Path) -> None:
    data = union_of_versions(tmp_path)
    old = replace(make_run("old"), data_config=data, shards_read={"long": SHARD, "raw": SHARD})
    assert scored_copies(old) == expected_copies(data)
    assert all(n > 0 for n in expected_copies(data).values())
    refused = [r for r in check([old, make_run("b")]) if r.code is RefusalCode.TRAINED_ON_SCORED]
    assert len(refused) == 1 and refused[0].runs == [old.run_id]
    total = sum(expected_copies(data).values())
    assert "old was made before" in refused[0].message and f"{total} copies" in refused[0].message
    # A run made since counted what it read and removed: nothing to check.
    new = replace(old, records_read={"long": 40, "raw": 90})
    assert not [r for r in check([new, make_run("b")]) if r.code is RefusalCode.TRAINED_ON_SCORED]


def test_an_old_run_is_refused_only_for_copies_it_could_read(tmp_path: Path) -> None:
    data = union_of_versions(tmp_path)
    # It read only the long dataset's shard: the raw copies are not counted.
    only_long = replace(make_run("old"), data_config=data, shards_read={"long": SHARD})
    assert scored_copies(only_long) == {"long": expected_copies(data)["long"]}
    # Its data cannot be read here: not checked, not refused.
    moved = replace(only_long, data_config={**data, "datasets": {"long": ["/nowhere/x.jsonl"]}})
    assert scored_copies(moved) is None
