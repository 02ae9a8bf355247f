"""A processing chain in the pipeline: elastic determinism kept, token shares held on the
tokens that survive, and no scored document ever trained on."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline import Dataset, WorkSource, load_tokenizer, merge_states
from pipeline.stages.pack import PackedSequence
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.pipelines import make_pipeline

LANES = 4
HALF = [{"step": "length", "min_chars": 200, "datasets": ["web"]}]
"""Drops web's short half (its records alternate short and long)."""


def web_and_code(
    folder: Path, *, exhausted: str = "repeat", extra: list[str] = ()
) -> list[Dataset]:
    """``web``: 400 records, every other one under 200 characters; ``code``: 200 records."""
    rng = random.Random(0)
    words = [
        "data",
        "model",
        "train",
        "token",
        "batch",
        "lane",
        "shard",
        "mixture",
        "filter",
        "corpus",
    ]

    def sentence(i: int) -> str:
        return f"web{i:03d} " + " ".join(rng.choice(words) for _ in range(8)) + ". "

    web = [
        (sentence(i) * (1 if i % 2 else rng.randint(5, 9)))[: 150 if i % 2 else None]
        for i in range(400)
    ]
    code = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" * (1 + i % 3) for i in range(200)]
    write_jsonl(folder / "web.jsonl", web + list(extra))
    write_jsonl(folder / "code.jsonl", code)
    cache = folder / "cache"
    return [
        Dataset("web", [str(folder / "web.jsonl")], cache_dir=cache, exhausted=exhausted),
        Dataset("code", [str(folder / "code.jsonl")], cache_dir=cache, exhausted=exhausted),
    ]


def label_tokens(seq: PackedSequence) -> np.ndarray:
    """Dataset index of each label token of a sequence."""
    ends = np.append(seq.doc_starts[1:], seq.num_valid - 1)
    return np.repeat(seq.doc_sources, np.maximum(ends - seq.doc_starts, 0))


def test_processing_keeps_global_batches_identical_across_layouts(tmp_path: Path) -> None:
    source = WorkSource(web_and_code(tmp_path), {"web": 0.5, "code": 0.5}, seed=3, chunk_tokens=96)
    kwargs = {"lanes": LANES, "global_batch_size": 8, "process": HALF}
    ref = run_ranks(source, 1, 12, runner="inline", **kwargs)
    for dp, runner, parallelism in ((2, "threads", 3), (4, "inline", 0), (4, "threads", 2)):
        run = run_ranks(source, dp, 12, runner=runner, parallelism=parallelism, **kwargs)
        assert run.digests == ref.digests, (dp, runner, parallelism)
    # A restore on another dp size continues the same batches, across a flush window.
    first = run_ranks(source, 2, 5, parallelism=2, **kwargs)
    rest = run_ranks(source, 4, 7, state=merge_states(first.states), parallelism=1, **kwargs)
    assert first.digests + rest.digests == ref.digests
    # ... and the chain is part of the contract: another chain's batches differ.
    other = run_ranks(source, 1, 12, process=[{"step": "length", "min_chars": 100}], lanes=LANES)
    assert other.digests != ref.digests


def test_processing_runs_in_process_workers(tmp_path: Path) -> None:
    source = WorkSource(web_and_code(tmp_path), {"web": 0.5, "code": 0.5}, seed=3, chunk_tokens=96)
    kwargs = {"lanes": LANES, "global_batch_size": 8, "process": HALF}
    ref = run_ranks(source, 1, 4, runner="inline", **kwargs)
    assert run_ranks(source, 2, 4, runner="processes", parallelism=2, **kwargs).digests == (
        ref.digests
    )


def test_token_shares_hold_on_the_tokens_that_survive(tmp_path: Path) -> None:
    """A filter drops half of web's records; every lane's label tokens over every window of
    50 steps stay within 2% of the 50/50 mixture."""
    source = WorkSource(web_and_code(tmp_path), {"web": 0.5, "code": 0.5}, seed=5, chunk_tokens=256)
    pipeline = make_pipeline(
        source, lanes=LANES, global_batch_size=16, max_length=128, shuffle_buffer=4,
        flush_every=4, process=HALF,
    )  # fmt: skip
    steps = 120
    per_step = np.zeros((steps, LANES, 2))
    for batch in pipeline:
        if batch.step >= steps:
            break
        for lane, seq in zip(batch.lanes, batch.sequences, strict=True):
            per_step[batch.step, lane] += np.bincount(label_tokens(seq), minlength=2)
    stats = pipeline.stats()
    pipeline.close()
    # Every other web record is short: the filter dropped about as many as web gave.
    kept_web = per_step[..., 0].sum() / np.mean([len(t) for t in _web_tokens(tmp_path)])
    assert 0.7 < stats["removed"]["web"]["length"] / kept_web < 1.4
    window = np.lib.stride_tricks.sliding_window_view(per_step, 50, axis=0).sum(axis=-1)
    shares = window[..., 0] / window.sum(axis=-1)  # web's share, per window and lane
    assert np.abs(shares - 0.5).max() < 0.02, shares.round(3)


def _web_tokens(folder: Path) -> list[list[int]]:
    """Tokens (with EOS) of web's records the filter keeps."""
    tokenizer = load_tokenizer("gpt2")
    kept = [t for t in Dataset("web", [str(folder / "web.jsonl")]).read_texts(range(400))]
    return [[*tokenizer.encode(t), 0] for t in kept if len(t) >= 200]


def _decoded(batches: list[np.ndarray]) -> list[str]:
    tokenizer = load_tokenizer("gpt2")
    return [tokenizer.decode(row.tolist()) for step in batches for row in step]


@pytest.mark.parametrize("process", [[], HALF], ids=["plain", "processed"])
def test_a_planted_eval_document_is_never_trained_on(tmp_path: Path, process: list) -> None:
    """An evaluation document planted five times (other case and whitespace too) in web."""
    planted = "planted eval doc: the quick brown fox jumps over the lazy dog. " * 5
    copies = [planted, planted.upper(), planted.replace(" ", "\n"), planted, "  " + planted]
    datasets = web_and_code(tmp_path, exhausted="stop", extra=copies)
    eval_set = Dataset("fixed", [str(write_jsonl(tmp_path / "eval.jsonl", [planted, "other"]))])
    source = WorkSource(
        datasets, {"web": 0.5, "code": 0.5}, seed=1, chunk_tokens=128, eval_sets=[eval_set]
    )
    pipeline = make_pipeline(
        source, lanes=LANES, global_batch_size=8, process=process, shuffle_buffer=0
    )
    with pytest.warns(UserWarning, match="data exhausted"):
        batches = [b.tokens() for b in pipeline]
    rows = [row.casefold() for row in _decoded(batches)]
    assert any("web000" in row for row in rows)  # the check sees a training record
    assert not any("lazy dog" in row for row in rows)
    assert pipeline.stats()["removed"]["web"]["decontaminate"] == 5


def test_held_out_documents_of_one_dataset_are_not_trained_on_in_another(tmp_path: Path) -> None:
    """Two versions of one corpus side by side (raw, and its long half): the documents held
    out from either are removed from the other's training stream too. Every sentence of a
    document names it, so a leaked document shows in some training row whole."""
    raw = ["".join(f"doc{i:03d} says part {k}. " for k in range(2 + i % 9)) for i in range(160)]
    write_jsonl(tmp_path / "raw.jsonl", raw)
    write_jsonl(tmp_path / "long.jsonl", [t for t in raw if len(t) > 100])
    cache = tmp_path / "cache"
    datasets = [
        Dataset(n, [str(tmp_path / f"{n}.jsonl")], cache_dir=cache, exhausted="stop")
        for n in ("long", "raw")
    ]
    source = WorkSource(
        datasets, {"long": 1, "raw": 1}, seed=2, chunk_tokens=128, holdout_bytes=4096,
        holdout_docs=24,
    )  # fmt: skip
    held_long, held_raw = (
        set(ds.read_records(source.heldout_records(d))) for d, ds in enumerate(datasets)
    )
    held = held_long | held_raw
    held_ids = {t.split()[0] for t in held}
    pipeline = make_pipeline(source, lanes=LANES, global_batch_size=8, shuffle_buffer=0)
    with pytest.warns(UserWarning, match="data exhausted"):
        rows = _decoded([b.tokens() for b in pipeline])
    trained_ids = {i for row in rows for i in re.findall(r"doc\d{3}", row)}
    leaked = held_ids & trained_ids
    assert not leaked, sorted(leaked)
    assert len(trained_ids) > 100  # the check sees what was trained on
    removed = pipeline.stats()["removed"]
    # Every training record is read once: each copy of a document held out of the other
    # dataset is removed, and counted where it was.
    assert removed["raw"]["decontaminate"] == len(held_long - held_raw) > 0
    assert removed["long"]["decontaminate"] == len(
        {t for t in held_raw if len(t) > 100} - held_long
    )


@pytest.mark.parametrize("process", [[], HALF], ids=["plain", "processed"])
def test_near_copies_of_eval_documents_are_counted_not_removed(
    tmp_path: Path, process: list
) -> None:
    """A copy with one word changed is no exact copy: trained on, and with overlap_ngram=13
    counted as sharing a 13-gram with the scored document (as GPT-3 and DCLM report)."""
    scored = "the evaluation text says that every lane keeps its own order of records " * 3
    near = scored.replace("every lane", "each lane", 1)
    datasets = web_and_code(tmp_path, exhausted="stop", extra=[near, near])
    eval_set = Dataset("fixed", [str(write_jsonl(tmp_path / "eval.jsonl", [scored, "other"]))])
    source = WorkSource(
        datasets, {"web": 1, "code": 1}, seed=4, chunk_tokens=128, eval_sets=[eval_set]
    )
    counted = {}
    for ngram in (0, 13):
        pipeline = make_pipeline(
            source, lanes=LANES, global_batch_size=8, process=process, overlap_ngram=ngram
        )
        with pytest.warns(UserWarning, match="data exhausted"):
            for _ in pipeline:
                pass
        stats = pipeline.stats()
        assert "decontaminate" not in stats["removed"].get("web", {})
        counted[ngram] = stats["overlapping"]
    assert counted == {0: {}, 13: {"web": 2}}
