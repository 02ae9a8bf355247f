"""Deduplication in the stream (exact and MinHash): the first copy in the dataset's order is
trained on, later copies never, the same at any dp size and across a resume; and what a run
read again (epochs past the first) and ran out of is counted."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from pipeline import Dataset, WorkSource, load_tokenizer, merge_states
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.pipelines import make_pipeline

LANES = 4


def _words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice("abcdefghijklmnop") for _ in range(6)) for _ in range(n)]


def corpus_with_copies(folder: Path, exhausted: str = "stop") -> tuple[list[Dataset], int]:
    """``web``: 120 documents, 40 of them also present 1-3 more times (other case and
    whitespace; or its last word changed: a near copy), shuffled; ``code``: 60 records. Returns
    the datasets and the number of exact copies."""
    rng = random.Random(7)
    originals = [f"doc{i:03d} " + " ".join(_words(rng, 60)) for i in range(120)]
    web, exact = list(originals), 0
    for i in range(0, 120, 3):
        for k in range(1 + i % 3):
            exact += 1
            web.append(originals[i].upper() if k % 2 else originals[i].replace(" ", "\n  "))
    near = [t.rsplit(" ", 1)[0] + " changed" for t in originals[1:40:3]]  # Jaccard 56/58
    rng.shuffle(web)
    write_jsonl(folder / "web.jsonl", web + near)
    write_jsonl(folder / "code.jsonl", [f"def f{i}(x):\n    return x + {i}\n" for i in range(60)])
    cache = folder / "cache"
    datasets = [
        Dataset(n, [str(folder / f"{n}.jsonl")], cache_dir=cache, exhausted=exhausted)
        for n in ("web", "code")
    ]
    return datasets, exact


def _trained_ids(pipeline) -> list[str]:
    tokenizer = load_tokenizer("gpt2")
    with pytest.warns(UserWarning, match="data exhausted"):
        rows = [tokenizer.decode(r.tolist()) for b in pipeline for r in b.tokens()]
    return [i.casefold() for row in rows for i in re.findall(r"doc\d{3}", row, re.IGNORECASE)]


@pytest.mark.parametrize(
    ("step", "near_removed"), [("dedup", False), ("minhash_dedup", True)], ids=["exact", "minhash"]
)
def test_every_copy_after_the_first_is_removed(
    tmp_path: Path, step: str, near_removed: bool
) -> None:
    datasets, exact = corpus_with_copies(tmp_path)
    source = WorkSource(datasets, {"web": 2, "code": 1}, seed=1, chunk_tokens=128)
    undeduplicated = _trained_ids(make_pipeline(source, lanes=LANES, global_batch_size=8))
    assert max(undeduplicated.count(i) for i in undeduplicated) > 1  # the check can fail
    pipeline = make_pipeline(
        source, lanes=LANES, global_batch_size=8, process=[{"step": step, "datasets": ["web"]}]
    )
    trained = _trained_ids(pipeline)
    assert len(set(trained)) > 100  # the check sees what was trained on
    near_ids = {f"doc{i:03d}" for i in range(1, 40, 3)}  # trained twice if not removed
    twice = {i for i in trained if trained.count(i) > 1}
    assert twice <= (set() if near_removed else near_ids), sorted(twice)
    removed = pipeline.stats()["removed"]
    assert "code" not in removed  # the step is limited to web
    near = 13  # the last word changed: a near copy MinHash finds and the exact rule does not
    assert removed["web"][step] == exact + (near if near_removed else 0)


def test_deduplication_is_the_same_at_every_dp_size_and_across_a_resume(tmp_path: Path) -> None:
    datasets, _ = corpus_with_copies(tmp_path, exhausted="repeat")
    source = WorkSource(datasets, {"web": 1, "code": 1}, seed=2, chunk_tokens=96)
    kwargs = {"lanes": LANES, "global_batch_size": 8, "process": ["dedup"]}
    ref = run_ranks(source, 1, 14, runner="inline", **kwargs)
    assert run_ranks(source, 4, 14, parallelism=2, **kwargs).digests == ref.digests
    first = run_ranks(source, 2, 6, parallelism=2, **kwargs)
    rest = run_ranks(source, 4, 8, state=merge_states(first.states), parallelism=1, **kwargs)
    assert first.digests + rest.digests == ref.digests
    assert run_ranks(source, 1, 14, lanes=LANES, global_batch_size=8).digests != ref.digests


@pytest.mark.parametrize("process", [[], ["dedup"]], ids=["plain", "processed"])
def test_records_read_again_and_datasets_ran_out_are_counted(tmp_path: Path, process: list) -> None:
    """``code`` (60 records, repeating) is read about three times over; ``web`` stops after
    one epoch in every lane. A dataset is not deduplicated against its own earlier epochs."""
    write_jsonl(tmp_path / "code.jsonl", [f"def f{i}(x):\n    return x + {i}\n" for i in range(60)])
    write_jsonl(tmp_path / "web.jsonl", [f"web{i:03d} " + "text " * 40 for i in range(40)])
    datasets = [
        Dataset("code", [str(tmp_path / "code.jsonl")], cache_dir=tmp_path / "c"),
        Dataset("web", [str(tmp_path / "web.jsonl")], cache_dir=tmp_path / "c", exhausted="stop"),
    ]
    source = WorkSource(datasets, {"code": 1, "web": 1}, seed=3, chunk_tokens=64)
    pipeline = make_pipeline(source, lanes=LANES, global_batch_size=8, process=process)
    for batch in pipeline:
        if batch.step >= 60:
            break
    stats = pipeline.stats()
    pipeline.close()
    read, repeated = stats["records_read"]["code"], stats["repeated"]["code"]
    assert read > 2 * 60 and read - repeated == 60  # every record once, then again
    assert stats["ran_out"] == {"web": LANES}
    assert "web" not in stats["repeated"] and stats["records_read"]["web"] == 40
    assert "code" not in stats["removed"]  # epoch 2 repeats epoch 1: no copy within an epoch
