"""A wheel install works: the wheel built from this checkout, installed into a fresh venv,
runs ``zephon-run``, ``zephon`` and ``zephon-train`` from a folder outside the repository.

The fresh venv gets Zephon from the wheel alone; its dependencies are this venv's, made
visible by a ``.pth`` file naming this venv's site-packages (a plain path line: the ``.pth``
files inside that folder, among them the editable install of Zephon, are not processed).
Every plan is of the mini llama3 (``zephon_mini``): one recipe, resolved once (about 12 s)
in the cache ``$ZEPHON_HOME`` the other tests share.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.checkout import source_files

pytestmark = pytest.mark.timeout(300)

CONFIG_PACKAGE = "zephon_conf"
"""What ``conf/`` is installed as (pyproject.toml's package-dir)."""
NOT_SHIPPED = ("tests", "benchmarks", "scripts", "docs")
"""Top-level folders of the repository that the wheel leaves out."""


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in ``cwd``, without this checkout on PYTHONPATH; output captured."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built from a copy of its files (an in-place build would
    leave ``build/`` in the shared working tree, and stale files in it would be shipped)."""
    root = tmp_path_factory.mktemp("wheel")
    for name in source_files():
        (root / "source" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / "source" / name)
    built = run(
        *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
        *("--no-index", "-w", root / "dist", root / "source"),
        cwd=root,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (found,) = (root / "dist").glob("zephon-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """A fresh venv holding the wheel; this venv's packages visible through a ``.pth``."""
    venv = wheel.parent.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    installed = run(
        *(sys.executable, "-m", "pip", "--python", python, "install"),
        *("--no-deps", "--no-index", wheel),
        cwd=venv,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    site = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    Path(site, "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working folder outside the repository."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    return tmp_path


def test_the_wheel_holds_every_module_and_config(wheel: Path) -> None:
    """Packages are listed in pyproject.toml: a new one left out would be missing here."""
    expected = {
        CONFIG_PACKAGE + name.removeprefix("conf") if name.startswith("conf/") else name
        for name in source_files()
        if name.endswith((".py", ".yaml")) and name.split("/")[0] not in NOT_SHIPPED
    }
    assert f"{CONFIG_PACKAGE}/train/smoke.yaml" in expected
    assert sorted(expected - set(zipfile.ZipFile(wheel).namelist())) == []


def test_the_fresh_venv_imports_zephon_from_the_wheel(venv: Path, outside: Path) -> None:
    modules = ["orchestrator", "pipeline", "sweeps", "demo", "hydra_plugins.zephon"]
    probe = run(
        venv / "bin" / "python",
        "-c",
        "import importlib, json, sys; "
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))",
        *modules,
        CONFIG_PACKAGE,
        "torch",
        cwd=outside,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    files = {name: Path(file).resolve() for name, file in json.loads(probe.stdout).items()}
    for name in [*modules, CONFIG_PACKAGE]:
        assert files[name].is_relative_to(venv.resolve()), (name, files[name])
    assert not files["torch"].is_relative_to(venv.resolve())  # a dependency, from this venv


def test_zephon_run_plans_with_its_packaged_configs(venv: Path, outside: Path) -> None:
    planned = run(
        venv / "bin" / "zephon-run", "dry_run=true", "model=mini", "train=smoke", cwd=outside
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert plan["steps"] == 4  # conf/train/smoke.yaml
    assert len(plan["mixture"]) == 3  # conf/data/stdlib.yaml: the local three-domain corpus
    assert Path(plan["run_folder"]).parent == outside / "runs"  # conf/config.yaml's runs_root


def test_zephon_run_sweeps_with_the_packaged_plugins(venv: Path, outside: Path) -> None:
    swept = run(
        *(venv / "bin" / "zephon-run", "-m", "hydra/sweeper=zephon_mix", "hydra/launcher=zephon"),
        *("dry_run=true", "model=mini", "train=smoke", "hydra.sweeper.mix.explicit=[{code:1.0}]"),
        cwd=outside,
    )
    assert swept.returncode == 0, swept.stderr[-3000:]
    (summary,) = outside.glob("multirun/*/*/sweep.json")
    jobs = json.loads(summary.read_text())["jobs"]
    assert [job["status"] for job in jobs] == ["succeeded"]


def test_zephon_plans_an_experiment_file(venv: Path, outside: Path) -> None:
    from pydoc_data.topics import topics  # real text wherever Python is installed

    with (outside / "topics.jsonl").open("w") as out:
        out.writelines(json.dumps({"text": text}) + "\n" for text in topics.values())
    (outside / "exp.yaml").write_text(
        "model: {config: zephon_mini}\n"
        "data: {datasets: {topics: [topics.jsonl]}, seq_len: 128, global_batch_size: 8}\n"
        "train: {steps: 3}\n"
    )
    planned = run(venv / "bin" / "zephon", "plan", "-c", "exp.yaml", "--json", cwd=outside)
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert plan["steps"] == 3 and plan["mixture"] == {"topics": "1.000000"}


def test_zephon_and_zephon_train_start(venv: Path, outside: Path) -> None:
    helped = run(venv / "bin" / "zephon", "--help", cwd=outside)
    assert helped.returncode == 0 and "verify-elastic" in helped.stdout, helped.stderr
    trainer = run(venv / "bin" / "zephon-train", "--config", "zephon_mini", "--help", cwd=outside)
    assert trainer.returncode == 0, trainer.stderr[-3000:]
    assert "--dataloader.spec" in trainer.stdout  # Zephon's data loader, from the wheel
