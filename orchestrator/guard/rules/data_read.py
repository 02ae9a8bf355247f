"""Rules on the data the runs read: replicates saw the same batches (``diverged_data``) and
every run read the same content for a shard (``shard_changed``)."""

from __future__ import annotations

import json

from orchestrator.experiment.variant_axis import varied_identity
from orchestrator.guard.comparison import SHORT, Refusal, RefusalCode, RunSummary
from pipeline.dataset import ShardIdentity


def diverged_data_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str]
) -> Refusal | None:
    """``diverged_data`` if two runs of one variant saw different data, else None."""
    a, b = label[ref.run_id], label[run.run_id]
    common = sorted(set(ref.digests) & set(run.digests))
    if not common:
        return Refusal(
            RefusalCode.DIVERGED_DATA,
            f"{a} and {b} are the same variant but have no common steps "
            f"({a}: steps {_step_span(ref.digests)}, {b}: steps {_step_span(run.digests)}), so "
            "their data cannot be cross-checked; let both run past a common step, or leave one "
            "out.",
            [ref.run_id, run.run_id],
            {"step": None, "reason": "no common steps"},
        )
    for step in common:
        if ref.digests[step] != run.digests[step]:
            da, db = ref.digests[step][:SHORT], run.digests[step][:SHORT]
            return Refusal(
                RefusalCode.DIVERGED_DATA,
                f"{a} and {b} are the same variant but their data differs from step {step} on "
                f"(global batch digest {da} vs {db}): the infrastructure changed the data, which "
                "the contract forbids — check the dataset files and the zephon version of both "
                "runs, then re-run one of them.",
                [ref.run_id, run.run_id],
                {"step": step, "digests": {a: ref.digests[step], b: run.digests[step]}},
            )
    return None


def _step_span(digests: dict[int, str]) -> str:
    """``"1-10"``: the first and last step with a digest, or ``"none"``."""
    return f"{min(digests)}-{max(digests)}" if digests else "none"


def shard_changed_refusals(runs: list[RunSummary], label: dict[str, str]) -> list[Refusal]:
    """``shard_changed`` for each run that read a shard with other content than the first run
    (in run order) that read it: the file was edited between the runs. A dataset whose
    versions are compared (``data.compared=dataset:NAME``) is checked within each version."""
    first: dict[tuple[str, str, str], tuple[RunSummary, dict[str, str]]] = {}
    refusals = []
    for run in runs:
        versions = varied_identity(run.varied)
        for name, shards in sorted(run.shards_read.items()):
            version = json.dumps(versions.get(f"data.datasets.{name}"), sort_keys=True)
            for shard, entry in sorted(shards.items(), key=lambda item: int(item[0])):
                ref, seen = first.setdefault((name, shard, version), (run, entry))
                if seen.get("sha256") == entry.get("sha256"):
                    continue
                a, b = label[ref.run_id], label[run.run_id]
                identities = {a: _shard_identity(seen), b: _shard_identity(entry)}
                if identities[a] != identities[b]:
                    cause = (
                        f"One run hashed the file's bytes, the other read it by range and "
                        f"identified it by its server's ETag ({identities}), so their "
                        "contents cannot be compared; re-run one of them with the other's "
                        "io_options['remote_read']."
                    )
                else:
                    cause = (
                        "The file was changed between the runs; restore it and re-run the run "
                        "made on the changed file, or compare only runs made on one version of "
                        "the data."
                    )
                refusals.append(
                    Refusal(
                        RefusalCode.SHARD_CHANGED,
                        f"{a} and {b} read different content for shard {entry.get('file')} "
                        f"(#{shard}) of dataset {name!r}: sha256 "
                        f"{str(seen.get('sha256'))[:SHORT]} ({a}) vs "
                        f"{str(entry.get('sha256'))[:SHORT]} ({b}). {cause}",
                        [ref.run_id, run.run_id],
                        {
                            "dataset": name,
                            "shard": int(shard),
                            "file": entry.get("file"),
                            "sha256": {a: seen.get("sha256"), b: entry.get("sha256")},
                        },
                    )
                )
                break  # one refusal per run and dataset names the first changed shard
    return refusals


def _shard_identity(entry: dict[str, str]) -> str:
    """What a recorded shard fingerprint hashes (runs before range reads recorded content)."""
    return entry.get("identity", str(ShardIdentity.CONTENT))
