"""A checkpoint's manifest: the size and SHA-256 of each of its files, written once it is whole.

DCP writes a checkpoint's ``.metadata`` last, so a kill while it is written leaves no
``.metadata`` and TorchTitan passes over it. A checkpoint whose files were damaged
afterwards (a disk error, a copy cut short, a file overwritten) still has its
``.metadata``; TorchTitan would load it and fail, or load wrong weights. The trainer
writes this manifest beside ``.metadata`` when a save ends (``orchestrator/titan/trainer.py``),
and a resume checks the newest checkpoint against it before it starts
(``orchestrator/run/checkpoint_recovery.py``). A checkpoint without a manifest (a run of an
earlier release, or one killed between the two files) is taken as whole, as before.

No torch import: the resume checks without it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orchestrator.experiment.runfolder import write_json_atomic

MANIFEST_FILE = ".zephon-manifest.json"


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(checkpoint: Path) -> list[Path]:
    return sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)


def write_manifest(checkpoint: Path) -> None:
    """Record each file of the whole ``checkpoint`` folder (written through a rename)."""
    files = {
        p.relative_to(checkpoint).as_posix(): [p.stat().st_size, _digest(p)]
        for p in _files(checkpoint)
    }
    write_json_atomic(checkpoint / MANIFEST_FILE, {"files": files})


def damage(checkpoint: Path) -> str | None:
    """What is wrong with ``checkpoint`` against its manifest (a file missing, of another
    size or other bytes, or an unreadable manifest), or None: whole, or no manifest."""
    path = checkpoint / MANIFEST_FILE
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return f"its manifest {MANIFEST_FILE} is unreadable"
    for name, (size, digest) in sorted(recorded.items()):
        file = checkpoint / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} when it was written"
        if _digest(file) != digest:
            return f"{name} holds other bytes than when it was written"
    return None
