"""Zephon's lane pipeline: on-the-fly tokenize, pack, shuffle and batch with elastic determinism.

The global batch of every step is a pure function of the data contract, whatever the
number of data-parallel ranks, workers or restarts: rank ``r`` of ``dp`` owns lanes
``[r*L/dp, (r+1)*L/dp)``, so changing ``dp`` only moves whole lanes between ranks.

This package must not import ``orchestrator`` or ``sweeps``.
Design: docs/design/pipeline_overview.md
"""

from pipeline.batch import IGNORE_INDEX, MicroBatch
from pipeline.dataset import BadRecordPolicy, Dataset, ExhaustedPolicy, RecordPointer
from pipeline.digest import DigestChain, global_batch_digest, lane_digest
from pipeline.errors import (
    ConfigError,
    DataError,
    StageError,
    StateError,
    TokenizerError,
    ZephonError,
)
from pipeline.mixture import MixturePhase
from pipeline.order import OrderVersion
from pipeline.pipeline import Pipeline
from pipeline.runners import RunnerKind
from pipeline.source import WorkSource
from pipeline.stages.pack import PackingAlgorithm
from pipeline.state import fingerprint, merge_states
from pipeline.tokenizer import Tokenizer, canonical_tokenizer_spec, load_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "BadRecordPolicy",
    "ConfigError",
    "DataError",
    "Dataset",
    "DigestChain",
    "ExhaustedPolicy",
    "MicroBatch",
    "MixturePhase",
    "OrderVersion",
    "PackingAlgorithm",
    "Pipeline",
    "RecordPointer",
    "RunnerKind",
    "StageError",
    "StateError",
    "Tokenizer",
    "TokenizerError",
    "WorkSource",
    "ZephonError",
    "canonical_tokenizer_spec",
    "fingerprint",
    "global_batch_digest",
    "lane_digest",
    "load_tokenizer",
    "merge_states",
]
