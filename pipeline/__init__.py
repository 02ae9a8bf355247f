"""Zephon's lane pipeline: on-the-fly tokenize, pack, shuffle and batch with elastic determinism.

The global batch of every step is a pure function of the data contract,
whatever the number of data-parallel ranks, workers or restarts::

    Dataset(s) ──► WorkSource (plan: mixture, permutations, lanes) ──► work chunks per lane
                                                                          │
             ┌────────────────────────── LaneStream (one per owned lane) ─┘
             │  Runner: stateless tokenize workers, results re-ordered by chunk number
             │  WrapPacker ─► ShuffleBuffer   (accumulators; flushed every K chunks)
             ▼
    Pipeline: G/L sequences per lane per step, lanes in order ─► MicroBatch ─► to_training()
             └─ lane digests ─► global_batch_digest ─► DigestChain (data fingerprint)

Rank ``r`` of ``dp`` owns lanes ``[r*L/dp, (r+1)*L/dp)``; changing ``dp`` only
moves whole lanes between ranks. ``state_dict()`` records, per lane, the plan
position at the last flush point and how many sequences were delivered since;
``merge_states`` joins the ranks' states so any dp size can resume.

This package must not import ``orchestrator`` or ``sweeps``.
"""

from pipeline.batch import IGNORE_INDEX, MicroBatch
from pipeline.dataset import Dataset, RecordPointer
from pipeline.digest import DigestChain, global_batch_digest, lane_digest
from pipeline.errors import (
    ConfigError,
    DataError,
    StageError,
    StateError,
    TokenizerError,
    ZephonError,
)
from pipeline.pipeline import Pipeline
from pipeline.source import WorkSource
from pipeline.state import fingerprint, merge_states
from pipeline.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "ConfigError",
    "DataError",
    "Dataset",
    "DigestChain",
    "MicroBatch",
    "Pipeline",
    "RecordPointer",
    "StageError",
    "StateError",
    "Tokenizer",
    "TokenizerError",
    "WorkSource",
    "ZephonError",
    "fingerprint",
    "global_batch_digest",
    "lane_digest",
    "load_tokenizer",
    "merge_states",
]
