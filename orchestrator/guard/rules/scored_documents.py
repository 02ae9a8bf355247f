"""The rule that no run trained on a document it scores (``trained_on_scored``).

Runs made since Zephon removes scored documents from training record how many copies they
removed (``records_read`` and ``removed`` in ``steps.jsonl``): nothing to check. A run made
before recorded neither; if its data are readable here, the rule counts the copies of its
scored documents (its datasets' held-out records) in the shards it read, every dataset's,
but each dataset's own held-out records (which its plan never drew). A copy there is a
record it could have trained on and was scored on: the comparison is refused, naming the
run and the count. Reading costs what the run read, not the corpus.
"""

from __future__ import annotations

import numpy as np

from orchestrator.errors import ExperimentError
from orchestrator.experiment import build_pipeline, load_data_section
from orchestrator.guard.comparison import Refusal, RefusalCode, RunSummary
from pipeline import ZephonError
from pipeline.processing import Decontaminator


def trained_on_scored_refusals(runs: list[RunSummary], label: dict[str, str]) -> list[Refusal]:
    """``trained_on_scored`` for each run made before decontamination whose shards read hold
    copies of the documents it scores (a run whose data cannot be read here is not checked)."""
    refusals = []
    for run in runs:
        if run.records_read or not run.data_config or not run.shards_read:
            continue  # decontaminated (it counted), or nothing to check against
        copies = scored_copies(run)
        if not copies:
            continue
        listed = ", ".join(f"{n} in {d}" for d, n in sorted(copies.items()))
        refusals.append(
            Refusal(
                RefusalCode.TRAINED_ON_SCORED,
                f"{label[run.run_id]} was made before Zephon removed scored documents from "
                f"training, and the shards it read hold {sum(copies.values())} copies of "
                f"documents it scores ({listed}): it may have trained on what it was scored "
                "on. Train it again (zephon run --fresh): runs made now never do.",
                [run.run_id],
                {"copies": copies},
            )
        )
    return refusals


def scored_copies(run: RunSummary) -> dict[str, int] | None:
    """Per dataset, the records of the shards ``run`` read that are copies (normalised text)
    of a document it scores, its own held-out records aside; None if its data cannot be
    read here (moved, changed, or another machine's)."""
    try:
        data = load_data_section(run.data_config)
        pipeline = build_pipeline(
            data, dp_size=1, dp_rank=0, microbatch_size=data.global_batch_size
        )
    except (ExperimentError, ZephonError, OSError):
        return None
    source = pipeline.source
    try:
        scored = Decontaminator(source.never_trained())
        copies: dict[str, int] = {}
        for d, dataset in enumerate(source.datasets):
            held = set(source.heldout_records(d).tolist())
            for shard in sorted(int(s) for s in run.shards_read.get(dataset.name, {})):
                rows = np.arange(dataset.shard_records(shard), dtype=np.int64)
                keys = [k for k in ((shard << 32) | rows).tolist() if k not in held]
                found = sum(scored.apply(t) is None for t in dataset.read_records(keys))
                if found:
                    copies[dataset.name] = copies.get(dataset.name, 0) + found
        return copies
    except (ZephonError, OSError, IndexError):
        return None
    finally:
        pipeline.close()
