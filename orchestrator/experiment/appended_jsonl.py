"""A JSONL file that a trainer appends to, read from where the last read stopped.

A launch watches its run folder about once a second (progress, tracking) while the trainer
appends a line per step: reading the whole file each time cost a second of CPU a tick
at 100,000 steps (``benchmarks/results/appended_reads.md``). Read here, each line is parsed
once. A file replaced (a rewrite goes through a rename: a new inode), cut short or
rewritten in place (the bytes before the read position changed) is read again whole. No
torch import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TAIL_CHECK_BYTES = 64
"""Bytes before the read position kept to see that the file was not rewritten in place."""


def parse_jsonl(data: bytes) -> list[dict[str, Any]]:
    """The records of whole JSONL lines; a line cut short by a crash is skipped (every
    whole line is kept)."""
    records = []
    for line in data.split(b"\n"):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


class AppendedJsonl:
    """The records of one appended JSONL file, read on from the last position."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: list[dict[str, Any]] = []
        self._inode: int | None = None
        self._offset = 0
        self._tail = b""

    def records(self) -> list[dict[str, Any]]:
        """Every whole line's record, in file order ([] if the file does not exist). A
        line still being written is left for the next call. The list is this object's:
        read it, do not change it."""
        try:
            with self.path.open("rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                if inode == self._inode:
                    f.seek(self._offset - len(self._tail))
                    if f.read(len(self._tail)) != self._tail:  # cut short or rewritten
                        self._restart(inode)
                        f.seek(0)
                else:
                    self._restart(inode)
                data = f.read()
        except FileNotFoundError:
            self._restart(None)
            return self._records
        whole = data.rfind(b"\n") + 1
        if whole:
            self._records.extend(parse_jsonl(data[:whole]))
            self._tail = (self._tail + data[:whole])[-TAIL_CHECK_BYTES:]
            self._offset += whole
        return self._records

    def _restart(self, inode: int | None) -> None:
        self._records, self._inode, self._offset, self._tail = [], inode, 0, b""
