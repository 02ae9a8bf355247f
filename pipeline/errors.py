"""Errors raised by the lane pipeline.

Every error says what is wrong and what to change. Configuration errors are
raised before any record is read; data errors name the stage, the dataset and
the record pointer involved.
"""

from __future__ import annotations

import pickle


class ZephonError(Exception):
    """Base class of all errors raised by Zephon."""


class ConfigError(ZephonError, ValueError):
    """The configuration cannot work; raised before any work starts."""


class DataError(ZephonError):
    """The data on disk is missing, unreadable or changed since it was indexed."""


class TokenizerError(ZephonError):
    """The tokenizer files are missing or corrupt."""


class StateError(ZephonError, ValueError):
    """A saved pipeline state does not fit the configured pipeline."""


class StageError(ZephonError):
    """A worker of a stage failed on a record.

    Attributes name the stage, the dataset and the record pointer
    ``(dataset, shard, record)`` so the failing input can be found.
    """

    def __init__(
        self, stage: str, dataset: str, pointer: tuple[str, int, int], cause: BaseException
    ):
        self.stage = stage
        self.dataset = dataset
        self.pointer = pointer
        self.cause = cause
        super().__init__(
            f"stage '{stage}' failed on dataset '{dataset}', record pointer {pointer}: "
            f"{type(cause).__name__}: {cause}"
        )

    def __reduce__(self) -> tuple:
        # Process workers send errors back pickled; keep the cause if it pickles.
        try:
            pickle.dumps(self.cause)
            cause = self.cause
        except Exception:
            cause = RuntimeError(f"{type(self.cause).__name__}: {self.cause}")
        return (type(self), (self.stage, self.dataset, self.pointer, cause))
