"""Shared fixtures: a real multi-domain corpus built from local text, and a plan over it;
the files that train run first."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from demo.local_corpus import build_local_corpus
from orchestrator.run.cpu_env import trainer_import_env
from pipeline import Dataset, WorkSource
from tests.support import REPO

TRAINING_FILES_FIRST = (
    "tests/e2e/test_slurm.py",
    "tests/test_docs_commands.py",
    "tests/e2e/test_search_e2e.py",
    "tests/e2e/test_sweeps_e2e.py",
    "tests/e2e/test_service.py",
    "tests/e2e/test_slurm_service.py",
    "tests/orchestrator/tracking/test_team_server.py",
    "tests/e2e/",
    "tests/test_gpu_check.py",
    "tests/orchestrator/titan/",
    "tests/orchestrator/run/test_warm_start.py",
    "tests/benchmarks/",
)
"""Where the files that take minutes lie (they launch trainings, clusters or servers), in
the order they start: the longest first (each 2.5 to 6.5 min of one worker in a run on
2026-12-05), so that no long file starts near the end."""


def pytest_configure() -> None:
    """Tests that import the trainer (torch makes its compile cache's folder on import) keep
    that folder where Zephon's processes keep theirs, not in the system's temporary folder."""
    os.environ.update(trainer_import_env())


EXPECTED_LEFTOVERS = (
    ".venv",
    "__pycache__",
    ".ruff_cache",
    ".hypothesis",
    ".pytest_cache",
    "pytest-of-",
)
"""Path parts a session may leave: caches, and pytest's own temporary folders (it keeps the
last three sessions' and removes older ones)."""
BEFORE = pytest.StashKey[set[str]]()


def checkout_and_temp_entries() -> set[str]:
    """The checkout's untracked, ignored and changed paths (``git status --porcelain
    --ignored``) and this user's entries of the temporary folder, as ``tmp: <name>``."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True
    ).stdout.splitlines()
    temp = Path(tempfile.gettempdir())
    mine = {f"tmp: {entry.name}" for entry in temp.iterdir() if _owned(entry)}
    return {line[3:] for line in status} | mine


def _owned(entry: Path) -> bool:
    try:
        return entry.lstat().st_uid == os.getuid()
    except OSError:  # removed while listed
        return False


def left_behind(before: set[str], after: set[str]) -> list[str]:
    """What ``after`` has that ``before`` had not, less :data:`EXPECTED_LEFTOVERS`."""
    return sorted(
        entry for entry in after - before if not any(part in entry for part in EXPECTED_LEFTOVERS)
    )


INNER_SESSION_ENV = "ZEPHON_INNER_TEST_SESSION"
"""Set by a test that runs pytest itself (tests/test_self_contained.py): that session skips
the check, since the outer suite's workers write the temporary folder meanwhile and the
outer session checks what both leave."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note what the checkout and the temporary folder hold (the controller's session only:
    under pytest-xdist a worker's session ends before the others' tests do)."""
    inner = os.environ.get(INNER_SESSION_ENV) == "1"
    if not hasattr(session.config, "workerinput") and not inner:
        session.config.stash[BEFORE] = checkout_and_temp_entries()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session when it left something new in the checkout or the temporary folder
    (another process of this user writing there meanwhile is reported too)."""
    if BEFORE not in session.config.stash:
        return
    left = left_behind(session.config.stash[BEFORE], checkout_and_temp_entries())
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "left behind by the tests", red=True)
            for entry in left:
                reporter.write_line(entry)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`TRAINING_FILES_FIRST` first, then the rest in collection order.

    The suite's workers take whole files (``--dist loadfile --no-loadscope-reorder``,
    scripts/test.sh) in collection order. A training file started last kept one worker
    busy for minutes while the other, done, waited; started first, the short files fill
    the end instead (longest first).
    """

    def start_rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        ranks = [i for i, prefix in enumerate(TRAINING_FILES_FIRST) if path.startswith(prefix)]
        return ranks[0] if ranks else len(TRAINING_FILES_FIRST)

    items.sort(key=start_rank)  # stable: each file's tests keep their order


@pytest.fixture(scope="session")
def zephon_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cache dir for shard indexes, so tests never share state with the user's."""
    return tmp_path_factory.mktemp("zephon-cache")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The three real domains of ``demo.local_corpus`` (code, docs and unicode), 3 MB each at
    most (code 3.0 MB, docs 2.3 MB and unicode 0.5 MB: all there is)."""
    return build_local_corpus(tmp_path_factory.mktemp("corpus"), max_bytes_per_domain=3_000_000)


@pytest.fixture(scope="session")
def datasets(corpus: dict[str, list[Path]], zephon_cache: Path) -> list[Dataset]:
    """One Dataset per corpus domain."""
    return [
        Dataset(name, [str(p) for p in paths], cache_dir=zephon_cache)
        for name, paths in sorted(corpus.items())
    ]


@pytest.fixture(scope="session")
def source(datasets: list[Dataset]) -> WorkSource:
    """A calibrated three-domain plan with small chunks, so flush windows pass often."""
    names = [ds.name for ds in datasets]
    weights = dict(zip(names, (0.5, 0.3, 0.2), strict=False))
    return WorkSource(datasets, weights, seed=7, chunk_tokens=512, calibration_bytes=200_000)
