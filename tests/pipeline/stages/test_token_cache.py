"""The token cache in the pipeline: the same batches with no cache, a cold, a half-filled and a
warm one, on every dp size and across a restore; nothing tokenized twice; a changed record
read as its new text; a cache that cannot be written leaves the run as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline import Dataset, WorkSource, load_tokenizer, merge_states
from pipeline.io.token_store import TokenStore
from pipeline.processing import Decontaminator, ProcessChain
from pipeline.stages.encode import TextEncoder
from pipeline.stages.token_cache import TokenCache
from tests.pipeline.test_processed_plan import web_and_code
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.pipelines import make_pipeline

REPO = Path(__file__).resolve().parents[3]
CHAIN = [{"step": "length", "min_chars": 200, "datasets": ["web"]}]
SCORED = [f"scored document {i}: " + "held out evaluation text " * 12 for i in range(6)]
"""An eval set's documents; copies of them sit in ``web`` and are decontaminated."""
STEPS = 12


def scored_source(folder: Path) -> WorkSource:
    """``web`` (with copies of the scored documents) and ``code``, and the eval set."""
    datasets = web_and_code(folder, extra=SCORED * 4)
    scored = Dataset("scored", [str(write_jsonl(folder / "scored.jsonl", SCORED))])
    return WorkSource(
        datasets, {"web": 0.5, "code": 0.5}, seed=3, chunk_tokens=96, eval_sets=[scored]
    )


def pipeline_stats(source: WorkSource, steps: int, **kwargs: object) -> dict:
    """One rank's stats after ``steps`` steps."""
    pipeline = make_pipeline(source, lanes=4, global_batch_size=8, prefetch_steps=0, **kwargs)
    batches = iter(pipeline)
    for _ in range(steps):
        next(batches)
    stats = pipeline.stats()
    batches.close()
    return stats


@pytest.mark.parametrize("process", [(), CHAIN], ids=["decontamination", "chain"])
def test_batches_are_the_same_with_no_cold_half_filled_or_warm_cache(
    tmp_path: Path, process: list
) -> None:
    source = scored_source(tmp_path)
    kwargs = {"lanes": 4, "global_batch_size": 8, "process": process, "overlap_ngram": 4}
    ref = run_ranks(source, 1, STEPS, runner="inline", **kwargs)  # no cache
    cache = str(tmp_path / "tokens")
    half = run_ranks(source, 2, STEPS // 2, token_cache_dir=cache, parallelism=2, **kwargs)
    assert half.digests == ref.digests[: STEPS // 2]  # cold
    for dp in (1, 2, 4):  # half-filled on the first, then warm
        run = run_ranks(source, dp, STEPS, token_cache_dir=cache, parallelism=1, **kwargs)
        assert run.digests == ref.digests, dp
    first = run_ranks(source, 4, 5, token_cache_dir=cache, parallelism=2, **kwargs)
    rest = run_ranks(
        source, 1, STEPS - 5, state=merge_states(first.states), token_cache_dir=cache, **kwargs
    )
    assert first.digests + rest.digests == ref.digests


@pytest.mark.parametrize("process", [(), CHAIN], ids=["decontamination", "chain"])
def test_a_warm_run_tokenizes_nothing_and_counts_what_a_cold_one_counts(
    tmp_path: Path, process: list
) -> None:
    source = scored_source(tmp_path)
    kwargs = {"process": process, "overlap_ngram": 4, "parallelism": 1}
    plain = pipeline_stats(source, STEPS, **kwargs)
    cold = pipeline_stats(source, STEPS, token_cache_dir=str(tmp_path / "tokens"), **kwargs)
    warm = pipeline_stats(source, STEPS, token_cache_dir=str(tmp_path / "tokens"), **kwargs)
    assert cold["tokenize"]["encoded"] == plain["tokenize"]["encoded"] > 0
    assert warm["tokenize"]["encoded"] == 0
    assert warm["removed"]["web"]["decontaminate"] > 0
    for counter in ("removed", "overlapping", "records_read", "label_tokens"):
        assert warm[counter] == cold[counter] == plain[counter], counter
    assert warm["tokenize"]["bytes"] == plain["tokenize"]["bytes"]


def test_a_changed_record_is_read_as_its_new_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "web.jsonl", [f"record {i} " * 20 for i in range(50)])
    store = TokenStore(tmp_path / "tokens", 1 << 30)
    keys = np.arange(50, dtype=np.int64)  # shard 0, rows 0..49
    encoder = TokenCache(TextEncoder("gpt2", ProcessChain([Decontaminator([])])), store)
    encoder.outcomes(Dataset("web", [str(path)], cache_dir=tmp_path / "idx"), keys)
    encoder.close()
    texts = [f"record {i} " * 20 for i in range(50)]
    texts[17] = "an entirely different text now"
    write_jsonl(path, texts)
    changed = Dataset("web", [str(path)], cache_dir=tmp_path / "idx")
    fresh = TokenCache(TextEncoder("gpt2", ProcessChain([Decontaminator([])])), store)
    got = fresh.outcomes(changed, keys)
    tokenizer = load_tokenizer("gpt2")
    assert got.tokens[17].tolist() == tokenizer.encode("an entirely different text now")
    assert got.encoded == 50  # a new shard content is a new entry: nothing old is served
    assert [t.tolist() for t in got.tokens] == [tokenizer.encode(t) for t in texts]


def test_a_cache_that_cannot_be_written_leaves_the_batches_as_they_are(tmp_path: Path) -> None:
    """A file size limit makes every cache write fail as a full disk would: the run warns once,
    trains on the same batches and leaves no temporary file."""
    source_folder = tmp_path / "data"
    source_folder.mkdir()
    web_and_code(source_folder)
    script = f"""
import json, resource, signal, sys, warnings
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from pipeline import Dataset, WorkSource
from tests.support.helpers import run_ranks
folder = Path({str(source_folder)!r})
def source():
    return WorkSource(
        [Dataset(n, [str(folder / f"{{n}}.jsonl")], cache_dir=folder / "cache") for n in ("web", "code")],
        {{"web": 0.5, "code": 0.5}}, seed=3, chunk_tokens=96)
ref = run_ranks(source(), 1, 6, lanes=4, global_batch_size=8)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run = run_ranks(source(), 2, 6, lanes=4, global_batch_size=8, parallelism=1,
                    token_cache_dir={str(tmp_path / "tokens")!r})
print(json.dumps({{"same": run.digests == ref.digests,
                  "warnings": [str(w.message) for w in caught if "token cache" in str(w.message)]}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same"]
    assert result["warnings"] and "cannot write" in result["warnings"][0]
    assert not [p for p in (tmp_path / "tokens").rglob("*") if p.is_file()]
