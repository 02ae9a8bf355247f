"""How the job service reads its Slurm jobs' states (:func:`orchestrator.service.slurm_jobs.states`):
``squeue`` for the jobs the controller still holds, ``sacct`` for those it has forgotten.

The test cluster (:class:`tests.support.slurm.LocalSlurm`) has no accounting database
(slurmdbd needs a MySQL server), so ``sacct`` there always fails and the e2e tests never
reach the accounting path. Here ``squeue`` and ``sacct`` are small scripts on ``PATH``
that answer as Slurm 23's do (their output and error text): the one stand-in of this file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.service.slurm_jobs import SlurmUnavailable, states


def fake(folder: Path, name: str, *, out: str = "", err: str = "", code: int = 0) -> None:
    """An executable ``name`` in ``folder`` printing ``out`` / ``err`` and exiting ``code``;
    it records its arguments in ``name.args``."""
    script = folder / name
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{folder / name}.args"\n'
        f"printf '%s' '{out}'\n"
        f"printf '%s' '{err}' >&2\n"
        f"exit {code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_jobs_squeue_forgot_are_read_from_sacct(bin_dir: Path) -> None:
    fake(bin_dir, "squeue", out="101|RUNNING\n")
    fake(bin_dir, "sacct", out="102|CANCELLED by 0\n103|COMPLETED\n")
    assert states(["101", "102", "103"]) == {
        "101": "RUNNING",
        "102": "CANCELLED",
        "103": "COMPLETED",
    }
    assert (bin_dir / "sacct.args").read_text().split()[-1] == "--jobs=102,103"  # only those


def test_when_squeue_forgot_every_job_sacct_answers_alone(bin_dir: Path) -> None:
    fake(bin_dir, "squeue", err="slurm_load_jobs error: Invalid job id specified\n", code=1)
    fake(bin_dir, "sacct", out="7|FAILED\n")
    assert states(["7"]) == {"7": "FAILED"}


def test_without_accounting_a_forgotten_job_has_no_state(bin_dir: Path) -> None:
    fake(bin_dir, "squeue", out="101|PENDING\n")
    fake(bin_dir, "sacct", err="Slurm accounting storage is disabled\n", code=1)
    assert states(["101", "102"]) == {"101": "PENDING"}


def test_sacct_is_not_asked_when_squeue_knows_every_job(bin_dir: Path) -> None:
    fake(bin_dir, "squeue", out="101|REQUEUED\n102|COMPLETING\n")
    fake(bin_dir, "sacct", code=1)
    assert states(["101", "102"]) == {"101": "REQUEUED", "102": "COMPLETING"}
    assert not (bin_dir / "sacct.args").exists()


def test_a_controller_that_does_not_answer_is_unavailable_not_forgetful(bin_dir: Path) -> None:
    fake(
        bin_dir,
        "squeue",
        err="slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        code=1,
    )
    fake(bin_dir, "sacct", out="101|COMPLETED\n")
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        states(["101"])
