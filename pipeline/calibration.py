"""Calibration: a dataset's tokens per byte, measured on its order's calibration sample.

A pure function of the dataset's calibration identity, its text field, the tokenizer and
the sample's size (docs/design/pipeline_plan.md): measured once per process, and stored
beside the shard indexes so that other processes and later launches read it back.
"""

from __future__ import annotations

import hashlib
import json
import threading

from pipeline.dataset import Dataset
from pipeline.errors import DataError
from pipeline.io import atomic_write
from pipeline.order import DatasetOrder
from pipeline.order.base import CALIBRATION_STREAM
from pipeline.tokenizer import Tokenizer

MAX_CALIBRATION_RECORDS = 4096
"""Records of a calibration sample, at most."""
_CALIBRATION_VERSION = 1
"""Part of the on-disk calibration key: bump it when the sample or the measure changes."""
_MEASURED: dict[tuple[str, str, str, str, int], float] = {}
"""Tokens per byte measured in this process, by (name, calibration identity, text field,
tokenizer fingerprint, sample bytes)."""
_MEASURED_LOCK = threading.Lock()


def measure_tokens_per_byte(
    order: DatasetOrder, tokenizer: Tokenizer, calibration_bytes: int
) -> float:
    """Tokens per byte of ``order``'s dataset on its calibration sample of
    ``calibration_bytes``: from this process's memory, the machine's cache, or measured.

    A pre-tokenized dataset's "text bytes" are its records' token counts, so its tokens per
    byte is exactly 1 and its costs are its token counts; its declared tokenizer must be
    ``tokenizer`` (ConfigError before any record is read)."""
    ds = order.dataset
    if ds.tokens is not None:
        ds.tokens.check_tokenizer(ds.name, tokenizer)
    identity = order.calibration_identity()
    if len(order.calibration_keys()) == 0:  # the same (empty) identity for any such dataset
        raise _no_usable_records(ds)
    if ds.pretokenized:
        return 1.0
    key = (ds.name, identity, ds.field, tokenizer.fingerprint, calibration_bytes)
    with _MEASURED_LOCK:
        if key in _MEASURED:
            return _MEASURED[key]
    # Every rank of every launch plans the same contract: measured once per machine and
    # stored beside the shard indexes, not tokenized again by each process (a pure
    # function of the key, so the stored value is exactly the measured one).
    stored = ds.cache_dir / "calibration" / _calibration_file(key)
    try:
        measured = float(json.loads(stored.read_text())["tokens_per_byte"])
    except (OSError, ValueError, KeyError, TypeError):  # missing or damaged: measure
        sample = order.calibration_keys()
        tokens = sum(len(ids) for ids in tokenizer.encode_batch(ds.read_records(sample)))
        measured = tokens / max(1, int(ds.record_text_bytes(sample).sum()))
        record = json.dumps({"key": list(key), "tokens_per_byte": measured}).encode()
        atomic_write(stored, lambda out: out.write(record))
    with _MEASURED_LOCK:
        _MEASURED[key] = measured
    return measured


def _no_usable_records(ds: Dataset) -> DataError:
    """The dataset ``ds`` has no record to train on in the files read so far (its calibration
    sample is drawn from them): what they held instead."""
    report = ds.report()
    found = ", ".join(f"{n} {reason}" for reason, n in sorted(report["skipped"].items()))
    held = f" ({found}; e.g. {report['examples']})" if found else ""
    return DataError(
        f"dataset {ds.name!r}: no usable record in the {report['shards_indexed']} file(s) "
        f"read{held}; check the files and data.text_field ({ds.field!r})"
    )


def _calibration_file(key: tuple[str, str, str, str, int]) -> str:
    """The on-disk calibration entry of ``key``."""
    text = json.dumps([*key, CALIBRATION_STREAM, MAX_CALIBRATION_RECORDS, _CALIBRATION_VERSION])
    return f"{hashlib.sha256(text.encode()).hexdigest()}.json"
