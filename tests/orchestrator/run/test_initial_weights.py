"""A run's initial weights (orchestrator.run.initial_weights): one seed checkpoint per
recipe, made once under a lock however many jobs ask at once, found again by its key,
hashed by content (making a real one, TorchTitan on one CPU process, is in
tests/e2e/test_orchestrator_e2e.py); and a user's checkpoint, real DCP and safetensors
folders checked at plan time against the model's shapes and identified by the digest of
their files (training from one is in tests/e2e/test_anneal.py)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

from orchestrator.errors import ExperimentError
from orchestrator.experiment import load_experiment
from orchestrator.experiment.run_record import InitCheckpoint
from orchestrator.experiment.validation import validate
from orchestrator.run import initial_weights
from orchestrator.run.initial_weights import (
    STATES_NOT_RESTORED,
    CheckpointFormat,
    check_init_from,
    checkpoint_format,
    initial_load_flags,
)
from orchestrator.run.recipe import Recipe


def fake_recipe(key: str = "k" * 64) -> Recipe:
    return Recipe({"debug": {"seed": 1}}, "f" * 64, {"debug": {"seed": 1}}, key)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(initial_weights, "zephon_home", lambda: tmp_path)
    return tmp_path


def counting_create(calls: list[int], content: bytes = b"weights"):
    def create(config: object, build: Path) -> Path:
        calls.append(1)
        time.sleep(0.3)  # long enough for every other job to be waiting on the lock
        checkpoint = build / "checkpoint" / "step-0"
        checkpoint.mkdir(parents=True)
        (checkpoint / "__0_0.distcp").write_bytes(content)
        (checkpoint / ".metadata").write_bytes(b"meta")
        return checkpoint

    return create


def test_concurrent_jobs_make_one_checkpoint(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(initial_weights, "_create_seed_checkpoint", counting_create(calls))
    config, recipe = load_experiment({}), fake_recipe()
    results: list[InitCheckpoint] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(initial_weights.ensure_init_checkpoint(config, recipe))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 4 and len(set(results)) == 1
    made = results[0]
    assert Path(made.path) == initial_weights.init_checkpoint_path(config, recipe)
    assert (Path(made.path) / "__0_0.distcp").read_bytes() == b"weights"
    assert [p.name for p in (home / "init").iterdir() if p.is_dir()] == [recipe.init_key]


def test_checkpoint_is_found_again_and_hashed_by_content(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(initial_weights, "_create_seed_checkpoint", counting_create(calls))
    config = load_experiment({})
    first = initial_weights.ensure_init_checkpoint(config, fake_recipe("a" * 64))
    again = initial_weights.ensure_init_checkpoint(config, fake_recipe("a" * 64))
    assert again == first and len(calls) == 1
    monkeypatch.setattr(
        initial_weights, "_create_seed_checkpoint", counting_create(calls, b"other weights")
    )
    other = initial_weights.ensure_init_checkpoint(config, fake_recipe("b" * 64))
    assert len(calls) == 2 and other.sha256 != first.sha256


VOCAB = 100
TITAN = {"tok_embeddings.weight": [VOCAB, 8], "layers.0.w.weight": [8, 8], "norm.weight": [8]}
HF = {"model.embed_tokens.weight": [VOCAB, 8], "model.layers.0.w.weight": [8, 8]}


def recipe(hf: dict[str, list[int]] | None = HF) -> Recipe:
    shapes = {"titan": TITAN, "hf": hf}
    return Recipe({}, "f" * 64, {}, "k" * 64, shapes)


def config_from(path: Path, *, optimizer: bool = False):
    return load_experiment({"train": {"init_from": str(path), "init_optimizer": optimizer}})


def write_dcp(folder: Path, shapes: dict[str, list[int]], *, optimizer: bool = False) -> Path:
    state = {name: torch.zeros(shape) for name, shape in shapes.items()}
    if optimizer:
        state["optimizer.state.norm.weight.exp_avg"] = torch.zeros(8)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder)), no_dist=True)
    return folder


def write_hf(folder: Path, shapes: dict[str, list[int]]) -> Path:
    folder.mkdir(parents=True)
    save_file({n: torch.zeros(s) for n, s in shapes.items()}, str(folder / "model.safetensors"))
    return folder


def test_a_dcp_checkpoint_of_the_model_passes(tmp_path: Path) -> None:
    path = write_dcp(tmp_path / "step-4", TITAN)
    check_init_from(config_from(path), recipe().parameter_shapes, VOCAB)
    assert checkpoint_format(path) is CheckpointFormat.DCP
    assert initial_load_flags(config_from(path)) == []


def test_a_mismatched_tensor_is_named_with_both_shapes(tmp_path: Path) -> None:
    path = write_dcp(tmp_path / "step-4", {**TITAN, "layers.0.w.weight": [8, 16]})
    with pytest.raises(
        ExperimentError,
        match=r"layers\.0\.w\.weight has shape \[8, 16\] but "
        r"the model needs \[8, 8\]",
    ):
        check_init_from(config_from(path), recipe().parameter_shapes, VOCAB)


def test_a_missing_tensor_is_named(tmp_path: Path) -> None:
    shapes = {k: v for k, v in TITAN.items() if k != "norm.weight"}
    path = write_dcp(tmp_path / "step-4", shapes)
    with pytest.raises(ExperimentError, match=r"no tensor norm\.weight \(shape \[8\]\)"):
        check_init_from(config_from(path), recipe().parameter_shapes, VOCAB)


def test_a_vocabulary_smaller_than_the_tokenizer_is_refused(tmp_path: Path) -> None:
    path = write_dcp(tmp_path / "step-4", {**TITAN, "tok_embeddings.weight": [50, 8]})
    with pytest.raises(
        ExperimentError,
        match=r"vocabulary has 50 rows .* fewer than the "
        r"tokenizer's 100 tokens; use the tokenizer",
    ):
        check_init_from(config_from(path), recipe().parameter_shapes, VOCAB)


def test_missing_and_unknown_folders_say_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match=r"no such folder; give a TorchTitan checkpoint"):
        check_init_from(config_from(tmp_path / "nowhere"), recipe().parameter_shapes, VOCAB)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExperimentError, match=r"neither a DCP checkpoint"):
        check_init_from(config_from(tmp_path / "empty"), recipe().parameter_shapes, VOCAB)


def test_the_optimizer_is_restored_only_from_a_full_dcp_checkpoint(tmp_path: Path) -> None:
    model_only = write_dcp(tmp_path / "model-only", TITAN)
    with pytest.raises(ExperimentError, match=r"holds no optimizer state"):
        check_init_from(config_from(model_only, optimizer=True), recipe().parameter_shapes, VOCAB)
    full = write_dcp(tmp_path / "full", TITAN, optimizer=True)
    check_init_from(config_from(full, optimizer=True), recipe().parameter_shapes, VOCAB)
    flags = initial_load_flags(config_from(full, optimizer=True))
    # The run keeps its own data order, schedule and step: only weights and moments load.
    assert flags == [
        "--checkpoint.no-initial-load-model-only",
        "--checkpoint.exclude-from-loading",
        ",".join(STATES_NOT_RESTORED),
    ]
    with pytest.raises(ExperimentError, match=r"init_optimizer needs train.init_from"):
        validate(load_experiment({"train": {"init_optimizer": True}}))


def test_a_hugging_face_folder_is_checked_by_its_hugging_face_names(tmp_path: Path) -> None:
    path = write_hf(tmp_path / "hf", HF)
    check_init_from(config_from(path), recipe().parameter_shapes, VOCAB)
    assert initial_load_flags(config_from(path)) == ["--checkpoint.initial-load-in-hf"]
    with pytest.raises(ExperimentError, match=r"no TorchTitan state-dict adapter"):
        check_init_from(config_from(path), recipe(hf=None).parameter_shapes, VOCAB)
    with pytest.raises(ExperimentError, match=r"holds no optimizer state"):
        check_init_from(config_from(path, optimizer=True), recipe().parameter_shapes, VOCAB)
    bad = write_hf(tmp_path / "bad", {**HF, "model.embed_tokens.weight": [VOCAB, 4]})
    with pytest.raises(ExperimentError, match=r"model\.embed_tokens\.weight has shape"):
        check_init_from(config_from(bad), recipe().parameter_shapes, VOCAB)


def test_the_digest_follows_content_not_path_and_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(initial_weights, "zephon_home", lambda: tmp_path / "home")
    monkeypatch.setattr(initial_weights, "RACY_NS", 0)  # the files were written just now
    base = write_dcp(tmp_path / "base", TITAN)
    copy = Path(shutil.copytree(base, tmp_path / "elsewhere" / "step-4"))
    digest = initial_weights.checkpoint_digest(base)
    assert initial_weights.checkpoint_digest(copy) == digest

    # A second plan stats the files instead of reading them: the remembered answer is used.
    entries = (tmp_path / "home" / "cache" / "checkpoint_digests").glob("*.json")
    (entry,) = [e for e in entries if json.loads(e.read_text())["folder"] == str(base)]
    remembered = json.loads(entry.read_text())
    entry.write_text(json.dumps({**remembered, "sha256": "remembered"}))
    assert initial_weights.checkpoint_digest(base) == "remembered"

    state = {name: torch.zeros(shape) for name, shape in TITAN.items()}
    state["norm.weight"][3] = 1.0  # one changed value: another initialisation
    changed = tmp_path / "changed"
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(changed)), no_dist=True)
    assert initial_weights.checkpoint_digest(changed) != digest
