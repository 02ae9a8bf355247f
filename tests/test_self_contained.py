"""A clone with nothing beside it is whole: no file of the code, the configs or the tests
refers to a path outside the repository, and the tests that read tests/data/ pass in a copy
of the checkout that has nothing beside it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from tests.conftest import INNER_SESSION_ENV
from tests.support import REPO
from tests.support.checkout import source_files

pytestmark = pytest.mark.timeout(120)

CHECKED_FOLDERS = (
    "tests",
    "orchestrator",
    "pipeline",
    "sweeps",
    "hydra_plugins",
    "benchmarks",
    "scripts",
    "demo",
    "conf",
)
NOT_REFERENCES = ("benchmarks/results/", "tests/data/")
"""Records of measured runs (the paths those runs had) and third-party data: not read as paths."""
OUTSIDE = {
    "the folder beside the repository": re.compile(
        r"\.\./+shared\b|\b(?:REPO|ROOT)\w*(?:\.parent\b|\s*/\s*['\"]\.\.['\"])"
    ),
    "an absolute path of this machine": re.compile(r"(?<![\w.~])/work/"),
    "the shared data or seeds": re.compile(r"\bshared/(?:data|seeds)\b|/\s*['\"]shared['\"]"),
}
"""What a file must not name, and what it would be reaching for."""
FILE_ANCESTOR = re.compile(
    r"__file__\)(?:\.resolve\(\)|\.absolute\(\))?(?:\.parents\[(\d+)\])?"
    r"((?:\.parent\b)*)((?:\s*/\s*['\"]\.\.['\"])*)"
)
"""``Path(__file__)...``: ``.parents[N]``, then ``.parent``s and ``/ ".."``s, each one up."""
COPY_TESTS = (
    "tests/pipeline/test_seeds_example.py",
    "tests/orchestrator/search/test_observations.py::test_regmix_published_tables_read_whole",
)
"""Tests that read tests/data/ (the seed article, RegMix's published runs)."""


def checked_files() -> list[str]:
    """The checkout's text files under :data:`CHECKED_FOLDERS`, but this one (it names the
    patterns) and :data:`NOT_REFERENCES`."""
    this = Path(__file__).resolve().relative_to(REPO).as_posix()
    return [
        name
        for name in source_files()
        if name.split("/")[0] in CHECKED_FOLDERS
        and not name.startswith(NOT_REFERENCES)
        and name != this
    ]


def outside_references(name: str, text: str) -> list[str]:
    """``name:line: what`` for every place in ``text`` (file ``name``) that reaches out of
    the repository."""
    found = []
    depth = len(PurePosixPath(name).parts)  # the repository is the file's ancestor depth - 1
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{name}:{number}: {what}" for what, p in OUTSIDE.items() if p.search(line)]
        for match in FILE_ANCESTOR.finditer(line):
            ups = match[2].count(".parent") + match[3].count("..")
            ancestor = (int(match[1]) if match[1] else -1) + ups
            if ancestor >= depth:
                found.append(f"{name}:{number}: ancestor {ancestor} of the file is outside")
    return found


def test_no_file_refers_to_a_path_outside_the_repository() -> None:
    found = []
    for name in checked_files():
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text
        found += outside_references(name, text)
    assert found == [], "\n".join(found)


SHARED = "shared"
"""The folder beside the repository, named once: the examples below are built from it, so no
line of this file reads as a path out of the repository to a search for one."""


@pytest.mark.parametrize(
    ("line", "reaches_out"),
    [
        ('SEEDS = Path(__file__).resolve().parents[1] / "data" / "seeds"', False),
        (f'SEEDS = Path(__file__).resolve().parents[3] / "{SHARED}" / "seeds"', True),
        ("ROOT = Path(__file__).parent.parent.parent", False),
        ('SEEDS = Path(__file__).resolve().parents[2].parent / "seeds"', True),
        ('DATA = Path(__file__).resolve().parents[2] / ".." / "data"', True),
        ('SEEDS = Path(__file__).resolve().parents[2] / "seeds"', False),
        ("ROOT = Path(__file__).parent.parent.parent.parent", True),
        (f'DATA = REPO / ".." / "{SHARED}"', True),
        ("DATA = REPO_ROOT.parent / 'corpora'", True),
        ('data = tmp_path / "a" / ".." / "c.txt"', False),
        (f"see {SHARED}/data/README", True),
        (f"see ../{SHARED}/seeds", True),
        ("cache = '/work/main/.zephon'", True),
        ("cache = Path('~/.cache/zephon')", False),
    ],
)
def test_the_check_tells_a_path_inside_from_one_outside(line: str, reaches_out: bool) -> None:
    """For a file three folders deep (tests/a/b.py): parents[2] is the repository."""
    assert bool(outside_references("tests/a/b.py", line)) == reaches_out


def test_the_tests_of_tests_data_pass_in_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    copy = tmp_path / "zephon"
    for name in source_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zephon"]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    where = subprocess.run(
        [sys.executable, "-c", "import orchestrator, pipeline, tests; print(tests.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(copy), "the copy's own modules are not used"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *COPY_TESTS],
        cwd=copy,
        env={
            **env,
            "PYTEST_ADDOPTS": f"--basetemp={tmp_path / 'basetemp'}",
            INNER_SESSION_ENV: "1",
        },
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0 and f"{len(COPY_TESTS)} passed" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-3000:]
    )


def test_no_file_of_tests_data_is_ignored_by_git() -> None:
    """What the tests read from tests/data/ reaches a clone: a pattern of .gitignore that
    catches it (``runs/`` caught the previous release's runs once) keeps it out of the repo."""
    ignored = subprocess.run(
        ["git", "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "tests/data"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    assert [n for n in ignored if n and "__pycache__" not in n] == []
