"""The job service's client side: submit, status, wait, cancel, logs, list; the datasets.

Jobs go to a *service root* folder and wait in its queue until ``zephon serve`` starts
them; every function returns plain JSON-able data for the CLI and the MCP server. The
submitter of a job is :func:`caller`, the OS user running the calling process, never a
field of the request.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from orchestrator.errors import QueueError
from orchestrator.service.admission import FRESH_KEY, admit_job
from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import FINAL, JobKind, JobState, to_kind
from orchestrator.service.queue import JobQueue, check_name
from pipeline.errors import ConfigError
from pipeline.formats import COMPRESSIONS, detect_format


def caller() -> str:
    """Who is calling: the name of the OS user running this process (its real uid's, not
    ``$USER``, which the caller sets)."""
    return psutil.Process().username()


def submit(
    service: ServiceConfig,
    spec: Any,
    *,
    key: str,
    kind: JobKind | str = JobKind.RUN,
    fresh: bool = False,
) -> dict[str, Any]:
    """Queue ``spec`` once per ``key`` as a job of :func:`caller`: a retry returns the same job.

    A ``run`` job whose experiment already trained (under another key, or by ``zephon
    run``) is answered from that run; ``fresh`` trains a new one (stored as the spec's
    ``fresh`` key, so a retry must say it again).

    ``kind``: ``run`` (an experiment), ``plan`` (its dry run) or ``verify`` (an elasticity
    check, :func:`orchestrator.service.admission.verify_request`). The spec is admitted
    first (:func:`orchestrator.service.admission.admit_job`): a refused spec raises
    ExperimentError listing every reason, and nothing is queued; QueueFull when the
    caller already has its limit of pending jobs; OverBudget when it used up its daily
    budget (:mod:`orchestrator.service.daily_budgets`).
    """
    kind = to_kind(kind)
    check_name("key", key)  # before the queue is opened: a new root's would be made
    if fresh and isinstance(spec, dict):
        spec = {**spec, FRESH_KEY: True}
    admit_job(kind, spec, service.rules())
    job, created = service.queue().submit(spec, key=key, submitter=caller(), kind=kind)
    return {"job": job.to_dict(), "created": created}


def status(service: ServiceConfig, job_id: str) -> dict[str, Any]:
    """The job, its state history and, once finished, its result; each submitter's
    budget usage today (:func:`usage`)."""
    queue = service.existing_queue()
    job = queue.get(job_id)
    return {
        "job": job.to_dict(),
        "events": [e.to_dict() for e in queue.events(job_id)],
        "usage": _usage_of(queue),
    }


def wait(
    service: ServiceConfig, job_id: str, *, timeout_s: float = 3600, poll_s: float = 1.0
) -> dict[str, Any]:
    """:func:`status` once the job is final, or at ``timeout_s`` (``"timed_out": true``)."""
    queue = service.existing_queue()
    deadline = time.monotonic() + timeout_s
    while queue.get(job_id).state not in FINAL and time.monotonic() < deadline:
        time.sleep(poll_s)
    report = status(service, job_id)
    report["timed_out"] = report["job"]["state"] not in FINAL
    return report


def cancel(service: ServiceConfig, job_id: str) -> dict[str, Any]:
    """Cancel a queued job now, or ask the scheduler to stop a running one; only the job's
    submitter (:func:`caller`) may."""
    queue = service.existing_queue()
    owner, me = queue.get(job_id).submitter, caller()
    if owner != me:
        raise QueueError(
            f"job {job_id} was submitted by {owner!r}, not {me!r}: only they can cancel it"
        )
    return {"job": queue.request_cancel(job_id).to_dict()}


def logs(service: ServiceConfig, job_id: str, *, tail: int = 50) -> dict[str, Any]:
    """The last ``tail`` lines of the job's training log and of its process's stderr."""
    job = service.existing_queue().get(job_id)

    def last(path: Path) -> list[str]:
        if not path.is_file():
            return []
        return path.read_text(errors="replace").splitlines()[-tail:]

    job_dir = service.job_dir(job_id)
    stderr = sorted(job_dir.glob("attempt-*.log"))
    return {
        "job_id": job_id,
        "state": job.state,
        "training_log": last(Path(job.run_folder) / "launch.log") if job.run_folder else [],
        "stderr": last(stderr[-1]) if stderr else [],
    }


def list_jobs(
    service: ServiceConfig,
    *,
    states: list[JobState | str] | None = None,
    submitter: str | None = None,
    kind: JobKind | str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Jobs, oldest first, filtered; with the count per state of the whole queue and each
    submitter's budget usage today (:func:`usage`)."""
    if not 1 <= limit <= 10_000:
        raise QueueError(f"limit must be in [1, 10000], got {limit}")
    queue = service.existing_queue()
    jobs = queue.list(states=states, submitter=submitter, kind=kind, limit=limit)
    return {
        "jobs": [j.to_dict() for j in jobs],
        "counts": queue.counts(),
        "usage": _usage_of(queue),
    }


def usage(service: ServiceConfig, submitter: str | None = None) -> list[dict[str, Any]]:
    """Today's budget usage (UTC day) of ``submitter``, or of every submitter who used
    anything today or has a budget of its own: runs and device-hours, each ``used``,
    ``limit`` and ``left`` (None: no limit), and ``renews_at``."""
    return _usage_of(service.existing_queue(), submitter)


def _usage_of(queue: JobQueue, submitter: str | None = None) -> list[dict[str, Any]]:
    return [u.to_dict() for u in queue.usage(submitter)]


TEXT_SUFFIXES = (".txt",)
"""Plain-text files :func:`list_datasets` lists. The pipeline reads any other file as one
text document too, but a listing of every README and checksum file would mislead."""


def list_datasets(service: ServiceConfig, *, max_files_per_dataset: int = 1000) -> dict[str, Any]:
    """The datasets under the service's data roots, for ``data.datasets`` of a spec.

    A dataset is a folder directly in a data root (its data files, at any depth) or a data
    file directly in one; data files are those the pipeline reads (JSONL, optionally .gz or
    .zst, Parquet, .txt), hidden ones left out. Each is listed with its files (absolute
    paths, as a spec names them; at most ``max_files_per_dataset``, ``truncated`` says when
    more were left out of the list), their sizes in bytes and their total. Roots that do
    not exist are listed in ``missing_roots``. Symlinks are followed only while they stay
    inside the data roots (admission refuses files outside them); the others, and folders
    reached twice through symlinks, are listed in ``skipped`` with the reason.
    ``object_store_prefixes`` names the URL prefixes a spec may also use (not listed).
    """
    if max_files_per_dataset < 1:
        raise ConfigError(f"max_files_per_dataset must be >= 1, got {max_files_per_dataset}")
    roots = service.rules().data_roots
    walk = _DataRootWalk([Path(os.path.realpath(root)) for root in roots])
    missing = [root for root in roots if not os.path.isdir(root)]
    datasets = []
    for root in (r for r in roots if r not in missing):
        for entry, real in walk.entries(Path(root)):
            if entry.is_dir():
                name, files = entry.name, list(walk.data_files(entry))
            elif entry.is_file() and (data_format := _data_format(entry.name)):
                name, files = (
                    _dataset_name(entry.name),
                    [(entry, data_format, _read_file_size(real))],
                )
            else:
                continue
            if files:
                datasets.append(
                    {
                        "name": name,
                        "root": root,
                        "path": str(entry),
                        "files": [
                            {"path": str(path), "format": data_format, "bytes": size}
                            for path, data_format, size in files[:max_files_per_dataset]
                        ],
                        "file_count": len(files),
                        "total_bytes": sum(size for _, _, size in files),
                        "truncated": len(files) > max_files_per_dataset,
                    }
                )
    return {
        "data_roots": list(roots),
        "object_store_prefixes": list(service.object_store_prefixes),
        "missing_roots": missing,
        "datasets": datasets,
        "total_bytes": sum(d["total_bytes"] for d in datasets),
        "skipped": walk.skipped,
    }


class _DataRootWalk:
    """A walk of data roots that never leaves them (:func:`list_datasets`)."""

    def __init__(self, real_roots: list[Path]) -> None:
        self.real_roots = real_roots
        self.skipped: list[dict[str, str]] = []

    def entries(self, folder: Path) -> Iterator[tuple[Path, str]]:
        """The visible entries of ``folder`` in name order, each with its real path; those
        whose real path lies outside every data root are skipped (and recorded)."""
        try:
            children = sorted(folder.iterdir())
        except OSError as e:  # unreadable: report it, list the rest
            self.skipped.append({"path": str(folder), "reason": f"unreadable: {e.strerror}"})
            return
        for entry in children:
            if entry.name.startswith("."):  # hidden: temporary files, caches, VCS folders
                continue
            real = Path(os.path.realpath(entry))
            if not any(real == root or root in real.parents for root in self.real_roots):
                self.skipped.append(
                    {"path": str(entry), "reason": "a symlink leaving the data roots"}
                )
                continue
            yield entry, str(real)

    def data_files(
        self, folder: Path, visited: set[str] | None = None
    ) -> Iterator[tuple[Path, str, int]]:
        """(path, format, size in bytes) of every data file under ``folder``, depth first;
        ``visited``: the real paths of the folders of this dataset walked so far."""
        visited = set() if visited is None else visited
        real_folder = os.path.realpath(folder)
        if real_folder in visited:  # a symlink loop, or a folder linked twice in one dataset
            self.skipped.append({"path": str(folder), "reason": "a folder already listed"})
            return
        visited.add(real_folder)
        for entry, real in self.entries(folder):
            if entry.is_dir():
                yield from self.data_files(entry, visited)
            elif entry.is_file() and (data_format := _data_format(entry.name)):
                yield entry, data_format, _read_file_size(real)


def _data_format(filename: str) -> str | None:
    """The format the pipeline reads ``filename`` in (``jsonl``, ``jsonl.zst``, ``parquet``,
    ``text``, ...: :func:`pipeline.formats.detect_format`); None for a file not listed."""
    try:
        data_format, compression = detect_format(filename)
    except ConfigError:  # compressed, but not JSONL: the pipeline refuses it
        return None
    if data_format == "text" and not filename.lower().endswith(TEXT_SUFFIXES):
        return None
    return f"{data_format}.{compression}" if compression else data_format


def _dataset_name(filename: str) -> str:
    """A one-file dataset's name: its file name without the data suffixes (``web.jsonl.zst``:
    ``web``)."""
    stem, suffix = os.path.splitext(filename)
    if suffix.lower() in COMPRESSIONS:
        stem = os.path.splitext(stem)[0]
    return stem or filename


def _read_file_size(path: str) -> int:
    return os.stat(path).st_size
