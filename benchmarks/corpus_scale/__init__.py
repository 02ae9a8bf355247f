"""Corpus scale: what reaching the first batch costs as the corpus grows, order v1 against v2.

``python -m benchmarks.corpus_scale [--quick] [--scales 1M,10M,100M]`` (or ``bash
scripts/bench.sh --corpus-scale [ARGS]``) generates synthetic JSONL corpora of 1M, 10M and
100M short records (~50 bytes of text) and 1M long ones (~2 KB), in 16 to 1,000 shards, plus
a probe of 100,000 shards, cached under ``--data-dir`` and reused by later runs. For each
corpus and each record order (``order="v1"``: one permutation of every record, every shard
indexed; ``order="v2"``: shards permuted per epoch, records within windows of 64+ shards),
a fresh child process builds the lane ``Pipeline`` and takes its first batch, cold (the
order's cache dir emptied first) and then warm (the same cache dir again). Reported: time
from the child's start to the first batch, peak RSS and RSS above the post-import baseline,
bytes read, shards indexed; the goals; an extrapolation to 1B records in 100,000 shards.
Results: ``benchmarks/results/corpus_scale.{json,md}`` (``--quick``:
``corpus_scale-quick.{json,md}``).
"""
