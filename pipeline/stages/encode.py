"""``TextEncoder``: what becomes of each record of one dataset, from its text.

A record is read, passed through the processing chain (the decontamination first) and, if
the chain keeps it, tokenized: its :class:`RecordOutcomes`. Both workers (``tokenize`` and
``process``) get their records' outcomes from an :class:`Encoder`: this one, or the token
cache in front of it (:mod:`pipeline.stages.token_cache`), which answers what it has and asks
this one for the rest. A pre-tokenized dataset's records are their ids as read; where chain
steps apply to it, they decide on the ids decoded to text, and may drop a record but not
change it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StageError
from pipeline.processing import KEPT, Decontaminator, ProcessChain
from pipeline.state import ordered_fingerprint
from pipeline.tokenizer import Tokenizer, load_tokenizer


@dataclass(slots=True)
class RecordOutcomes:
    """What becomes of each of some records of one dataset, in the order asked for."""

    tokens: list[np.ndarray | None]
    """Per record: its token ids (uint32, no EOS), or None if the chain dropped it."""
    dropped_by: np.ndarray
    """int16 per record: the index of the chain step that dropped it, or ``KEPT``."""
    overlapping: np.ndarray
    """bool per record: kept, and sharing a word n-gram with a scored document."""
    text_bytes: int
    """UTF-8 bytes of the records' texts (read, or answered from the token cache)."""
    encoded: int
    """Records whose text was read and tokenized here (the rest came from the cache)."""


class Encoder(Protocol):
    """Gives the outcomes of records of one dataset (picklable: process workers get one)."""

    tokenizer_id: str

    def outcomes(self, dataset: Dataset, keys: np.ndarray) -> RecordOutcomes:
        """The outcomes of records ``keys`` of ``dataset``, in order; StageError naming
        the record that failed."""
        ...

    def tokenizer(self) -> Tokenizer:
        """The tokenizer, loaded once per process."""
        ...

    def close(self) -> None:
        """Write what is pending (the cache's buffered entries); nothing for this one."""
        ...


class TextEncoder:
    """Reads, processes and tokenizes records (see the module docstring)."""

    def __init__(self, tokenizer_id: str, chain: ProcessChain) -> None:
        self.tokenizer_id = tokenizer_id
        self.chain = chain
        """Decontamination first, then the processing steps."""
        decontaminator = next((s for s in chain.steps if isinstance(s, Decontaminator)), None)
        counts_overlaps = decontaminator is not None and bool(decontaminator.ngrams)
        self._overlaps = decontaminator.overlaps if counts_overlaps else None
        self._overlap_ngram = decontaminator.overlap_ngram if counts_overlaps else 0
        self._chain_fingerprints: dict[str, str] = {}
        # A chain of one decontaminator without scored documents drops nothing: skip it.
        self._trivial = all(isinstance(s, Decontaminator) and not len(s) for s in chain.steps)
        self._tokenizer: Tokenizer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def tokenizer(self) -> Tokenizer:
        """The tokenizer, loaded by id (from its provisioned file) once per process."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_id)
        return self._tokenizer

    def chain_fingerprint(self, dataset: str) -> str:
        """SHA-256 of what the chain does to a record of ``dataset``: each step that applies
        to it, by index, with its contract (a user function's source hash included), and the
        n-gram length of the overlap count."""
        found = self._chain_fingerprints.get(dataset)
        if found is None:
            steps = [
                [i, step.contract()]
                for i, (step, only) in enumerate(
                    zip(self.chain.steps, self.chain.only, strict=True)
                )
                if only is None or dataset in only
            ]
            found = ordered_fingerprint(["zephon-chain-v1", steps, self._overlap_ngram])
            self._chain_fingerprints[dataset] = found
        return found

    def outcomes(self, dataset: Dataset, keys: np.ndarray) -> RecordOutcomes:
        """Read, process and tokenize records ``keys`` of ``dataset``."""
        if dataset.pretokenized:
            return self._token_outcomes(dataset, keys)
        texts, text_bytes = read_dataset(dataset, keys)
        dropped_by = np.full(len(texts), KEPT, dtype=np.int16)
        overlapping = np.zeros(len(texts), dtype=bool)
        kept = texts
        if not self._trivial:
            kept = []
            for i, (text, key) in enumerate(zip(texts, keys.tolist(), strict=True)):
                try:
                    result, step = self.chain.apply(text, dataset.name)
                except Exception as exc:  # a step failed on this record: name it and the step
                    raise StageError(
                        "process", dataset.name, dataset.pointer(key).as_tuple(), exc
                    ) from exc
                dropped_by[i] = step
                if result is not None:
                    kept.append(result)
                    overlapping[i] = self._overlaps is not None and self._overlaps(result)
        try:
            encoded = self.tokenizer().encode_arrays(kept)
        except Exception as exc:  # the encoder gives no finer detail: name the first record
            raise StageError(
                "tokenize", dataset.name, dataset.pointer(int(keys[0])).as_tuple(), exc
            ) from exc
        it = iter(encoded)
        tokens = [next(it) if step == KEPT else None for step in dropped_by.tolist()]
        return RecordOutcomes(tokens, dropped_by, overlapping, text_bytes, len(texts))

    def _token_outcomes(self, dataset: Dataset, keys: np.ndarray) -> RecordOutcomes:
        """The records ``keys`` of a pre-tokenized ``dataset``: their ids, each dropped or kept
        by the chain's steps that apply to the dataset, on its ids decoded with the run's
        tokenizer (the declared one: checked by the plan)."""
        ids_read, read_bytes = _named_read(dataset, keys, dataset.read_record_tokens)
        tokens: list[np.ndarray | None] = list(ids_read)
        dropped_by = np.full(len(tokens), KEPT, dtype=np.int16)
        overlapping = np.zeros(len(tokens), dtype=bool)
        applies = any(only is None or dataset.name in only for only in self.chain.only)
        if not self._trivial and applies:
            for i, (ids, key) in enumerate(zip(ids_read, keys.tolist(), strict=True)):
                text = self.tokenizer().decode(ids.tolist())
                try:
                    result, step = self.chain.apply(text, dataset.name)
                    if result is not None and result != text:
                        raise ConfigError(
                            "a processing step changed the text of a record of the "
                            f"pre-tokenized dataset {dataset.name!r}: steps that transform text "
                            "cannot apply to token files (only filters and decontamination); "
                            "limit the step to other datasets (datasets: [...])"
                        )
                except Exception as exc:  # a step failed on this record: name it
                    raise StageError(
                        "process", dataset.name, dataset.pointer(key).as_tuple(), exc
                    ) from exc
                dropped_by[i] = step
                if result is None:
                    tokens[i] = None
                else:
                    overlapping[i] = self._overlaps is not None and self._overlaps(result)
        return RecordOutcomes(tokens, dropped_by, overlapping, read_bytes, len(tokens))

    def close(self) -> None:
        """Nothing is pending here."""


def read_dataset(ds: Dataset, records: np.ndarray) -> tuple[list[str], int]:
    """Texts and UTF-8 bytes of ``records`` of one dataset; a failure names its record."""
    return _named_read(ds, records, ds.read_records_and_bytes)


_Read = TypeVar("_Read")


def _named_read(
    ds: Dataset, records: np.ndarray, read: Callable[[np.ndarray], tuple[_Read, int]]
) -> tuple[_Read, int]:
    """``read(records)`` of one dataset (texts or token ids, and bytes); a failure names
    its record."""
    try:
        return read(records)
    except Exception as exc:
        raise StageError("read", ds.name, _failing_pointer(ds, records.tolist()), exc) from exc


def _failing_pointer(ds: Dataset, records: Sequence[int]) -> tuple[str, int, int]:
    """Find the first record of a failed batched read by reading them one at a time."""
    for record in records:
        try:
            ds.read_records([record])
        except Exception:
            return ds.pointer(record).as_tuple()
    return ds.pointer(records[0]).as_tuple()
