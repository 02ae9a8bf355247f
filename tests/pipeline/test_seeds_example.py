"""The article's pipeline example (``tests/data/seeds/``), run verbatim over the local corpus."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from pipeline import Dataset, Pipeline, WorkSource

SEEDS = Path(__file__).resolve().parents[1] / "data" / "seeds"
STEPS = 2


class EnoughSteps(Exception):
    """Raised by the test's ``train_step`` to end the example's endless loop."""


def example_code() -> str:
    """The ``pipeline = (Pipeline(source) ...`` block and its loop, as the article prints it."""
    (article,) = sorted(SEEDS.glob("000_*.txt"))
    match = re.search(
        r"^pipeline = \(\n.*?^    train_step\(batch\.to_training\(\)\)\n",
        article.read_text(),
        re.MULTILINE | re.DOTALL,
    )
    assert match, f"no pipeline example in {article}"
    return match.group(0)


def test_the_articles_example_runs_as_written(datasets: list[Dataset]) -> None:
    code = example_code()
    assert ".batch(microbatch_size=8)\n" in code and "io_options" in code  # as printed
    source = WorkSource(datasets, {ds.name: 1.0 for ds in datasets}, calibration_bytes=50_000)
    steps: list[dict[str, torch.Tensor]] = []

    def train_step(batch: dict[str, torch.Tensor]) -> None:
        steps.append(batch)
        if len(steps) == STEPS:
            raise EnoughSteps

    scope = {"Pipeline": Pipeline, "source": source, "train_step": train_step}
    try:
        exec(compile(code, "seeds example", "exec"), scope)
    except EnoughSteps:
        pass
    finally:
        scope["pipeline"].close()
    pipeline = scope["pipeline"]
    # the documented default: one micro-batch per lane and step, whatever the dp size
    assert pipeline.global_batch_size == 8 * pipeline.lane_options.lanes
    assert all(dataset.shard_cache.shared for dataset in source.datasets)  # the IO cache is on
    first = steps[0]
    assert first["input"].shape == (8, 2048) and first["labels"].shape == (8, 2048)
    assert len(steps) == STEPS
