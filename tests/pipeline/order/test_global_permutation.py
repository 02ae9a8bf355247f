"""Order v1 is kept as it was: runs made with it resume and compare with their fingerprints."""

from __future__ import annotations

from pathlib import Path

from pipeline import Dataset, OrderVersion, WorkSource
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.pipelines import make_pipeline

# Made by the code before orders had versions (commit bb905f3) on ``v1_corpus``: the data
# contract's fingerprint and the first four global batch digests of a 2-rank run.
V1_CONTRACT = "d813621c1677b0a4d11812d6326d4322e5bc72ecfe6aafb576ad31a93b8dcbf8"
V1_DIGESTS = [
    "fe72b24ca98974f2437cfb4aa29c92dad81059b98d9b7fd2e9960fbc6efdf60e",
    "3d4c365f0012b57c498467af2e92065a8b53cda829412987a0955b2ef7b27abb",
    "79add090e7cdbeaf10f3b7ba7981b041ce281caa25dcadb8d0e3de5ef0d9d106",
    "0ff36063693a32030106021b7d9a587ccb54a8647f7850f3fdba191ef5af9191",
]


def v1_corpus(root: Path) -> WorkSource:
    """Three shards of prose and one of code, with held-out documents."""
    for shard in range(3):
        texts = [f"record {shard}-{i} " * (1 + (7 * i + shard) % 9) for i in range(40 + shard)]
        write_jsonl(root / f"web-{shard}.jsonl", texts)
    write_jsonl(root / "code.jsonl", [f"def f{i}(x):\n    return x * {i}\n" for i in range(30)])
    cache = root / "cache"
    datasets = [
        Dataset("web", str(root / "web-*.jsonl"), cache_dir=cache),
        Dataset("code", str(root / "code.jsonl"), cache_dir=cache),
    ]
    return WorkSource(
        datasets,
        {"web": 0.7, "code": 0.3},
        seed=5,
        chunk_tokens=64,
        holdout_bytes=400,
        holdout_docs=4,
        order=OrderVersion.V1,
    )


def test_order_v1_keeps_its_contract_and_batches(tmp_path: Path) -> None:
    source = v1_corpus(tmp_path)
    assert "order" not in source.contract()  # the contract as it was before versions
    assert make_pipeline(source).contract_fingerprint() == V1_CONTRACT
    assert run_ranks(source, 2, 4).digests == V1_DIGESTS
