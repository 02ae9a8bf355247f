"""Anneals from a user's checkpoint end to end: real TorchTitan training (``zephon_mini``,
CPU, dp 1), the embedded MLflow store and the guard.

Runs: ``base`` trains variant A for 4 steps (a checkpoint at every step). From its step-2
checkpoint, 2 steps each: ``ann-a`` (variant A), ``ann-b`` (variant B, from a copy of the
checkpoint at another path), ``ann-changed`` (variant B, from a copy with one value
changed), ``ann-optim`` (variant A, optimizer state restored too), and ``ann-hf`` (variant
A, from a Hugging Face safetensors folder that TorchTitan's own state-dict adapter wrote
from the same weights); ``ann-lr`` (variant A) from its step-3 checkpoint, at the learning
rate the base had there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

from orchestrator.errors import ExperimentError
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api
from orchestrator.titan.runlog import METRICS_FILE, RUN_SUBDIR, read_jsonl
from tests.support import REPO
from tests.support.cli import zephon_in_process
from tests.support.experiments import scored_experiment
from tests.support.titan_run import Run, corpus

pytestmark = pytest.mark.timeout(1800)

MIX_A = {"code": 0.5, "docs": 0.3, "unicode": 0.2}
MIX_B = {"code": 0.0, "docs": 0.5, "unicode": 0.5}


def experiment(domains: dict[str, list[Path]], mixture: dict[str, float], **train: Any) -> dict:
    """2 steps (unless ``train`` says otherwise) on one core."""
    config = scored_experiment(domains, mixture, steps=2)
    config["train"].update(train)
    config["resources"]["max_procs"] = 1
    return config


def model_state(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model tensors of a DCP checkpoint (optimizer and counters left out)."""
    metadata = dcp.FileSystemReader(str(checkpoint)).read_metadata()
    state = {
        name: torch.empty(entry.size, dtype=entry.properties.dtype)
        for name, entry in metadata.state_dict_metadata.items()
        if hasattr(entry, "size")
        and not name.startswith(("optimizer.", "lr_scheduler"))
        and name != "train_state.step"
    }
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(checkpoint)), no_dist=True)
    return state


def write_hf_copy(checkpoint: Path, folder: Path) -> Path:
    """The checkpoint's weights as Hugging Face safetensors, converted by TorchTitan's own
    llama3 state-dict adapter for the ``zephon_mini`` model."""
    from orchestrator.titan.configs import zephon_mini

    config = zephon_mini()
    model_config = config.model_spec.model
    adapter = config.model_spec.state_dict_adapter(model_config, None)
    folder.mkdir(parents=True)
    hf_state = adapter.to_hf(model_state(checkpoint))
    save_file({k: v.contiguous() for k, v in hf_state.items()}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("anneal-e2e")


@pytest.fixture(scope="module")
def runs(work: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, api.RunResult]:
    domains = corpus(tmp_path_factory.getbasetemp())
    cwd = os.getcwd()
    os.chdir(work)  # the embedded store is ./mlflow.db
    try:
        every_step = {"steps": 4, "checkpoint_interval": 1, "keep_checkpoints": 0}
        base = api.run(experiment(domains, MIX_A, **every_step), dp=1, run_name="base")
        step2 = RunFolder(base.folder).titan_dir / "checkpoint" / "step-2"
        step3 = step2.with_name("step-3")
        copy = Path(shutil.copytree(step2, work / "elsewhere" / "step-2"))
        changed = work / "changed" / "step-2"
        state = model_state(step2)
        state["norm.weight"][0] += 0.5  # one value of one tensor
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(changed)), no_dist=True)
        hf = write_hf_copy(step2, work / "hf")
        plans = {
            "ann-a": experiment(domains, MIX_A, init_from=str(step2)),
            "ann-b": experiment(domains, MIX_B, init_from=str(copy)),
            "ann-changed": experiment(domains, MIX_B, init_from=str(changed)),
            "ann-optim": experiment(domains, MIX_A, init_from=str(step2), init_optimizer=True),
            "ann-hf": experiment(domains, MIX_A, init_from=str(hf)),
            "ann-lr": experiment(
                domains, MIX_A, init_from=str(step3), lr_from_init=True, warmup_steps=0
            ),
        }
        results = {"base": base}
        results |= {name: api.run(config, dp=1, run_name=name) for name, config in plans.items()}
    finally:
        os.chdir(cwd)
    return results


def compare(work: Path, *results: api.RunResult) -> tuple[int, dict[str, Any]]:
    cli = zephon_in_process(work, "compare", *(r.mlflow_run_id or "" for r in results), "--json")
    return cli.returncode, json.loads(cli.stdout)


def losses(result: api.RunResult) -> dict[int, float]:
    return Run(RunFolder(result.folder).titan_dir, result.returncode, "").losses()


def init_sha256(result: api.RunResult) -> str:
    return RunFolder(result.folder).experiment().init_sha256


def test_anneals_train_from_the_checkpoint(runs: dict[str, api.RunResult]) -> None:
    for name, result in runs.items():
        assert result.status == "succeeded", (name, result.messages)
    # The anneal's step 1 is the base's step 1 (the same contract: the same batch); from the
    # recipe's own initial weights it would give the same loss too, from the loaded ones not.
    base, anneal = (Run(RunFolder(runs[n].folder).titan_dir, 0, "") for n in ("base", "ann-a"))
    assert anneal.digests()[1] == base.digests()[1]
    assert anneal.losses()[1] != pytest.approx(base.losses()[1], abs=1e-4)


def test_the_same_checkpoint_under_another_path_is_the_same_init(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    assert init_sha256(runs["ann-a"]) == init_sha256(runs["ann-b"])
    code, report = compare(work, runs["ann-a"], runs["ann-b"])
    assert code == 0, report["refusals"]


def test_a_changed_tensor_is_another_init(work: Path, runs: dict[str, api.RunResult]) -> None:
    code, report = compare(work, runs["ann-a"], runs["ann-changed"])
    assert code == 3
    (refusal,) = report["refusals"]
    assert refusal["code"] == "init_mismatch"
    a, changed = init_sha256(runs["ann-a"]), init_sha256(runs["ann-changed"])
    assert a[:12] in refusal["message"] and changed[:12] in refusal["message"]


def test_an_anneal_and_a_run_from_scratch_have_other_recipes(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    code, report = compare(work, runs["base"], runs["ann-b"])
    assert code == 3
    assert "recipe_mismatch" in [r["code"] for r in report["refusals"]]


def test_hugging_face_weights_give_the_scores_of_the_dcp_original(
    runs: dict[str, api.RunResult],
) -> None:
    dcp_scores, hf_scores = (runs[n].eval["bpb"] for n in ("ann-a", "ann-hf"))
    assert dcp_scores.keys() == hf_scores.keys() and dcp_scores
    for name, score in dcp_scores.items():
        assert hf_scores[name] == pytest.approx(score, abs=1e-5), name
    assert losses(runs["ann-hf"]) == pytest.approx(losses(runs["ann-a"]), abs=1e-5)


def test_the_optimizer_state_changes_the_training(runs: dict[str, api.RunResult]) -> None:
    """Adam's moments restored: the same data and weights (the same first loss), another
    update (another second loss)."""
    assert losses(runs["ann-optim"])[1] == pytest.approx(losses(runs["ann-a"])[1], abs=1e-5)
    assert losses(runs["ann-optim"])[2] != pytest.approx(losses(runs["ann-a"])[2], abs=1e-4)


def test_a_checkpoint_of_another_model_is_refused_before_launch(
    work: Path, runs: dict[str, api.RunResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real recipe's shapes: a 3-layer model cannot start from the 2-layer base."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the recipe resolver imports tests.support
    config = RunFolder(runs["ann-a"].folder).experiment().config
    config["model"] = {"module": "tests.support.titan_configs", "config": "zephon_mini_deep"}
    with pytest.raises(ExperimentError, match=r"no tensor layers\.2\.\S+ \(shape \[.*which"):
        api.plan(config, dp=1)


def test_the_peak_learning_rate_is_the_bases_at_the_checkpoints_step(
    runs: dict[str, api.RunResult],
) -> None:
    """The base (warmup 2, then linear decay to 0 over its last 2 of 4 steps) trained its
    step 4 at half its peak: the anneal from step 3 starts there, and records it."""
    peak = 8e-4  # zephon_mini's
    recipe = RunFolder(runs["ann-lr"].folder).experiment().recipe
    assert recipe["optimizer"]["param_groups"][0]["optimizer_kwargs"]["lr"] == pytest.approx(
        peak / 2
    )
    titan = RunFolder(runs["ann-lr"].folder).titan_dir
    first = next(r for r in read_jsonl(titan / RUN_SUBDIR / METRICS_FILE) if "lr/AdamW" in r)
    assert first["step"] == 1 and first["lr/AdamW"] == pytest.approx(peak / 2)
