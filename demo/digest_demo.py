"""The main job for now: show elastic determinism on a real corpus, in separate processes.

Builds a real multi-domain corpus from local text, then streams the same data
contract with several data-parallel layouts, each rank in its own OS process
that hashes only its own lanes:

* dp=2 (2 processes) and dp=4 (4 processes), steps 0..N-1;
* dp=4 for the first half, state saved by every rank and merged, then resumed
  on dp=1 for the second half.

Ranks exchange only 32-byte lane digests; the parent combines them into each
step's global batch digest and checks that all layouts agree.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from demo.local_corpus import build_local_corpus
from pipeline import Dataset, Pipeline, WorkSource, global_batch_digest, merge_states
from pipeline.paths import zephon_home

MIX = (0.5, 0.3, 0.2)


@dataclass(frozen=True)
class DemoConfig:
    """The data contract of the demo and its layout-independent settings."""

    corpus: dict[str, list[str]]
    """Domain -> shard paths."""
    lanes: int = 8
    """Lanes L (a common multiple of the dp sizes shown)."""
    global_batch_size: int = 32
    """Sequences per step G."""
    max_length: int = 512
    """Sequence length T."""
    steps: int = 8
    """Steps to stream per layout."""


def build_pipeline(config: DemoConfig, dp_rank: int, dp_size: int) -> Pipeline:
    """The demo's pipeline for one rank."""
    datasets = [Dataset(name, paths) for name, paths in sorted(config.corpus.items())]
    mixture = dict(zip([d.name for d in datasets], MIX, strict=True))
    local = config.global_batch_size // dp_size
    return (
        Pipeline(WorkSource(datasets, mixture, seed=42))
        .options(lanes=config.lanes, dp_rank=dp_rank, dp_size=dp_size)
        .tokenize(tokenizer_id="gpt2", field="text", parallelism=1)
        .pack_flat(max_length=config.max_length, algorithm="wrap")
        .shuffle(buffer_size=64, seed=42)
        .batch(microbatch_size=min(4, local), global_batch_size=config.global_batch_size)
    )


def run_rank(
    config: DemoConfig,
    *,
    dp_rank: int,
    dp_size: int,
    first_step: int,
    last_step: int,
    state: dict | None,
) -> tuple[list[dict[int, bytes]], dict[str, Any]]:
    """Stream steps ``[first_step, last_step)`` on one rank; return its lane digests and state."""
    pipeline = build_pipeline(config, dp_rank, dp_size)
    if state is not None:
        pipeline.load_state_dict(state)
    digests: list[dict[int, bytes]] = []
    batches = iter(pipeline)
    for micro in batches:
        if micro.is_last:
            digests.append(micro.lane_digests)
            if first_step + len(digests) == last_step:
                break
    result = pipeline.state_dict()
    batches.close()
    return digests, result


def run_layout(
    config: DemoConfig,
    dp_size: int,
    *,
    first_step: int,
    last_step: int,
    state: dict | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Run every rank of ``dp_size`` in its own process; return global digests and merged state."""
    with ProcessPoolExecutor(max_workers=dp_size, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                run_rank,
                config,
                dp_rank=rank,
                dp_size=dp_size,
                first_step=first_step,
                last_step=last_step,
                state=state,
            )
            for rank in range(dp_size)
        ]
        results = [f.result() for f in futures]
    steps = last_step - first_step
    digests = [
        global_batch_digest({k: v for lanes, _ in results for k, v in lanes[s].items()})
        for s in range(steps)
    ]
    return digests, merge_states(state for _, state in results)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``zephon-demo``; exit code 0 when every layout gives the same batches."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-dir", type=Path, default=zephon_home() / "corpus")
    parser.add_argument("--max-mb", type=float, default=8.0, help="cap per domain, in MB of text")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)

    began = time.perf_counter()
    corpus = build_local_corpus(args.corpus_dir, max_bytes_per_domain=int(args.max_mb * 1e6))
    config = DemoConfig(
        corpus={k: [str(p) for p in v] for k, v in corpus.items()}, steps=args.steps
    )
    print(build_pipeline(config, 0, 2).explain(), "\n", flush=True)

    half = config.steps // 2
    dp2, _ = run_layout(config, 2, first_step=0, last_step=config.steps)
    dp4, _ = run_layout(config, 4, first_step=0, last_step=config.steps)
    first, state = run_layout(config, 4, first_step=0, last_step=half)
    resumed, _ = run_layout(config, 1, first_step=half, last_step=config.steps, state=state)
    elastic = first + resumed

    print(f"{'step':>4}  {'dp=2':<18}{'dp=4':<18}{'dp=4 -> dp=1 @' + str(half):<20}same")
    all_same = True
    for step in range(config.steps):
        same = dp2[step] == dp4[step] == elastic[step]
        all_same &= same
        print(
            f"{step:>4}  {dp2[step][:16]:<18}{dp4[step][:16]:<18}{elastic[step][:16]:<20}{'yes' if same else 'NO'}"
        )
    tokens = config.steps * config.global_batch_size * config.max_length
    verdict = "identical" if all_same else "DIFFERENT"
    print(
        f"\nGlobal batches of {config.steps} steps ({tokens:,} tokens) are {verdict} across layouts "
        f"({time.perf_counter() - began:.1f} s)."
    )
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
