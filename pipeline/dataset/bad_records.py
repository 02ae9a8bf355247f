"""Bad records: a dataset skips and counts them, warning once, or fails at the first."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from pipeline.errors import DataError
from pipeline.formats import MAX_EXAMPLES, SkipReason


class BadRecordPolicy(StrEnum):
    """What a dataset does with a record it cannot use (``on_bad_record``)."""

    SKIP = "skip"
    """Skip and count it (``Dataset.report()``), with one warning per dataset."""
    ERROR = "error"
    """Fail indexing its shard, naming the file, the line and the reason."""


class SkipCounts(Protocol):
    """The skips of one shard: counts by reason, and the first lines (rows) of each."""

    @property
    def skipped(self) -> dict[str, int]: ...

    @property
    def examples(self) -> dict[str, list[int]]: ...


def skip_summary(
    shards: Sequence[tuple[Path | str, SkipCounts]],
) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Skips by reason over ``(shard source, its skips)``, with up to three ``"path:line"``
    examples per reason."""
    skipped: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for source, counts in shards:
        for reason, n in counts.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
            kept = examples.setdefault(reason, [])
            kept.extend(
                f"{source}:{line}" for line in counts.examples[reason][: MAX_EXAMPLES - len(kept)]
            )
    return skipped, examples


class BadRecordCheck:
    """Applies a dataset's ``BadRecordPolicy`` to each shard as it is indexed."""

    def __init__(self, dataset: str, field: str, policy: BadRecordPolicy) -> None:
        self.dataset = dataset
        self.field = field
        self.policy = policy
        self._warned = False

    def check(self, source: Path | str, counts: SkipCounts) -> None:
        """Fail on a bad record of the shard at ``source`` (``BadRecordPolicy.ERROR``), or
        warn of them, once per dataset. Blank lines are neither."""
        bad = {str(r): n for r, n in counts.skipped.items() if r != SkipReason.BLANK_LINE}
        if not bad:
            return
        if self.policy is BadRecordPolicy.ERROR:
            raise self._first_bad_record_error(source, counts, sum(bad.values()))
        if not self._warned:
            # Skipping is allowed, but never silent: once per dataset, the rest is counted.
            self._warned = True
            _, examples = skip_summary([(source, counts)])
            warnings.warn(
                f"dataset {self.dataset!r}: skipped {sum(bad.values())} bad records {bad} in "
                f"{source}, e.g. {examples}; Dataset.report() counts them over every "
                "shard read",
                stacklevel=4,
            )

    def _first_bad_record_error(
        self, source: Path | str, counts: SkipCounts, bad_records: int
    ) -> DataError:
        line, reason = min(
            (lines[0], reason)
            for reason, lines in counts.examples.items()
            if reason != SkipReason.BLANK_LINE
        )
        return DataError(
            f"dataset {self.dataset!r}: {source}:{line}: {SkipReason(reason).description} "
            f"(reason '{reason}', field {self.field!r}; {bad_records - 1} more bad records in "
            "this file); fix or remove the record, or pass on_bad_record='skip'"
        )
