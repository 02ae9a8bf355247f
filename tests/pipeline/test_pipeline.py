"""Pipeline behaviour a trainer relies on: tensors, validation, states, errors, token shares."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import (
    IGNORE_INDEX,
    ConfigError,
    Dataset,
    Pipeline,
    StateError,
    WorkSource,
    load_tokenizer,
    merge_states,
)
from tests.support import REPO
from tests.support.pipelines import make_pipeline


def first_step(pipeline: Pipeline) -> list:
    batches = iter(pipeline)
    micro = [next(batches)]
    while not micro[-1].is_last:
        micro.append(next(batches))
    return micro


def test_to_training_tensors(source: WorkSource) -> None:
    pipeline = make_pipeline(source, microbatch_size=4, max_length=64)
    mb = first_step(pipeline)[0]
    batch = mb.to_training()
    assert batch["input"].shape == batch["labels"].shape == batch["positions"].shape == (4, 64)
    assert batch["input"].dtype == batch["labels"].dtype == torch.int64
    tokens = mb.tokens()
    for row, seq in enumerate(mb.sequences):
        valid_labels = seq.num_valid - 1
        assert (
            batch["labels"][row, :valid_labels].tolist()
            == tokens[row, 1 : 1 + valid_labels].tolist()
        )
        assert (batch["labels"][row, valid_labels:] == IGNORE_INDEX).all()
        starts = batch["document_starts"][row].tolist()
        assert starts[0] == 0
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else 64
            assert batch["positions"][row, start:end].tolist() == list(range(end - start))
    eos = load_tokenizer("gpt2").eos_id
    # Every document start after position 0 follows an EOS of the previous document.
    for row, seq in enumerate(mb.sequences):
        for start in seq.doc_starts[1:]:
            assert tokens[row, start - 1] == eos


def test_padding_appears_only_at_flush_points(source: WorkSource) -> None:
    pipeline = make_pipeline(source, global_batch_size=8, max_length=64, shuffle_buffer=0)
    batches = iter(pipeline)
    padded = [s for _ in range(200) for s in next(batches).sequences if s.num_valid < 65]
    batches.close()
    assert padded, "with flush_every=2 and small chunks some windows end in a padded tail"
    for s in padded:
        assert s.num_valid >= 2
        assert (s.tokens[s.num_valid :] == load_tokenizer("gpt2").eos_id).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"lanes": 6, "dp_size": 4, "global_batch_size": 12},
            r"lanes \(L=6\) must be a multiple of dp_size \(4\)",
        ),
        (
            {"lanes": 8, "global_batch_size": 12},
            r"global_batch_size \(G=12\) must be a positive multiple of lanes",
        ),
        (
            {"lanes": 8, "dp_size": 2, "global_batch_size": 16, "microbatch_size": 3},
            r"must divide the local batch",
        ),
    ],
)
def test_layout_errors_are_raised_before_any_work(
    source: WorkSource, kwargs: dict, message: str
) -> None:
    pipeline = make_pipeline(source, **kwargs)
    with pytest.raises(ConfigError, match=message):
        iter(pipeline).__next__()
    assert pipeline._runner is None  # nothing started


def test_missing_stage_and_unknown_option(source: WorkSource) -> None:
    with pytest.raises(ConfigError, match=r"lacks stage\(s\) \['pack_flat', 'batch'\]"):
        next(iter(Pipeline(source).tokenize()))
    with pytest.raises(ConfigError, match="unknown option"):
        Pipeline(source).options(lane=8)


def test_field_must_match_datasets(source: WorkSource) -> None:
    pipeline = make_pipeline(source)
    pipeline.tokenize(field="body")
    with pytest.raises(ConfigError, match="reads field 'text'"):
        pipeline.validate()


def test_state_from_another_contract_is_refused_naming_fields(source: WorkSource) -> None:
    pipeline = make_pipeline(source)
    first_step(pipeline)
    state = pipeline.state_dict()
    pipeline.close()
    with pytest.raises(StateError, match="max_length: saved 64, configured 32"):
        make_pipeline(source, max_length=32).load_state_dict(state)
    with pytest.raises(StateError, match="lanes: saved 8, configured 4"):
        make_pipeline(source, lanes=4).load_state_dict(state)
    # A configuration changed after loading is checked again when iteration starts.
    moved = make_pipeline(source)
    moved.load_state_dict(state)
    moved.pack_flat(max_length=32)
    with pytest.raises(StateError, match="max_length: saved 64, configured 32"):
        next(iter(moved))


def test_state_of_one_rank_cannot_restore_another_ranks_lanes(source: WorkSource) -> None:
    rank0 = make_pipeline(source, dp_rank=0, dp_size=2)
    first_step(rank0)
    state = rank0.state_dict()
    rank0.close()
    with pytest.raises(StateError, match=r"lacks lanes \[4, 5, 6, 7\].*merge_states"):
        make_pipeline(source, dp_rank=1, dp_size=2).load_state_dict(state)


def test_state_mid_step_is_refused(source: WorkSource) -> None:
    pipeline = make_pipeline(source, microbatch_size=4)
    batches = iter(pipeline)
    next(batches)
    with pytest.raises(StateError, match="middle of step 0"):
        pipeline.state_dict()
    batches.close()


def test_merge_refuses_states_of_different_steps(source: WorkSource) -> None:
    a = make_pipeline(source, dp_rank=0, dp_size=2)
    b = make_pipeline(source, dp_rank=1, dp_size=2)
    ia, ib = iter(a), iter(b)
    next(ia), next(ib), next(ib)
    with pytest.raises(StateError, match="differ in 'step'"):
        merge_states([a.state_dict(), b.state_dict()])
    ia.close(), ib.close()


def test_resume_does_not_re_measure_calibration(
    source: WorkSource, datasets: list[Dataset]
) -> None:
    pipeline = make_pipeline(source)
    first_step(pipeline)
    state = json.loads(json.dumps(pipeline.state_dict()))
    pipeline.close()
    state["tokens_per_byte"] = {k: v * 1.01 for k, v in state["tokens_per_byte"].items()}
    fresh = WorkSource(
        datasets,
        dict(zip([d.name for d in datasets], (0.5, 0.3, 0.2), strict=False)),
        seed=7,
        chunk_tokens=512,
        calibration_bytes=200_000,
    )
    resumed = make_pipeline(fresh)
    resumed.load_state_dict(state)
    next(iter(resumed))
    assert fresh.tokens_per_byte == state["tokens_per_byte"]
    resumed.close()


def test_early_stop_shuts_workers_down(source: WorkSource) -> None:
    before = threading.active_count()
    pipeline = make_pipeline(source, parallelism=3)
    batches = iter(pipeline)
    next(batches)
    assert threading.active_count() > before
    batches.close()
    assert threading.active_count() == before


def test_realised_token_shares_within_one_point(
    source: WorkSource, datasets: list[Dataset]
) -> None:
    names = [d.name for d in datasets]
    tpb = source.calibrate(load_tokenizer("gpt2"))
    assert max(tpb.values()) / min(tpb.values()) >= 2, (
        f"domains should differ >= 2x in bytes/token: {tpb}"
    )
    targets = dict(zip(names, (0.5, 0.3, 0.2), strict=False))
    mix = WorkSource(datasets, targets, seed=11)
    pipeline = (
        Pipeline(mix)
        .options(lanes=8)
        .tokenize(parallelism=2)
        .pack_flat(max_length=512)
        .shuffle(buffer_size=16)
        .batch(microbatch_size=64, global_batch_size=64)
    )
    for _ in pipeline:
        if sum(pipeline.stats()["label_tokens"].values()) >= 2_000_000:
            break
    counts = pipeline.stats()["label_tokens"]
    total = sum(counts.values())
    assert total >= 2_000_000
    for name, target in targets.items():
        assert abs(counts[name] / total - target) < 0.01, (name, counts[name] / total, target)


def test_explain_describes_stages_and_lanes(source: WorkSource) -> None:
    text = make_pipeline(source, dp_rank=1, dp_size=4, parallelism=2).explain()
    assert "rank 1 owns lanes [2, 4)" in text
    assert "parallelism=2" in text and "max_length=64" in text and "G=16 -> 2/lane/step" in text


def test_pipeline_package_does_not_import_the_orchestrator() -> None:
    import ast

    root = REPO / "pipeline"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in {"orchestrator", "sweeps"}, (
                    f"{path} imports {name}"
                )


def test_tokens_are_within_vocab(source: WorkSource) -> None:
    mb = first_step(make_pipeline(source))[0]
    assert int(np.max(mb.tokens())) < load_tokenizer("gpt2").vocab_size


def test_finite_data_ends_with_a_report_not_a_hang(tmp_path: Path) -> None:
    from tests.support.helpers import two_datasets

    datasets = two_datasets(tmp_path, "stop")
    source = WorkSource(datasets, {"a": 0.6, "b": 0.4}, chunk_tokens=32)
    tokenizer = load_tokenizer("gpt2")
    total = sum(
        len(ids) + 1
        for ds in datasets
        for ids in tokenizer.encode_batch(ds.read_texts(range(ds.num_records)))
    )
    pipeline = make_pipeline(source, lanes=2, global_batch_size=2, max_length=16, parallelism=2)
    with pytest.warns(UserWarning, match="data exhausted before step"):
        steps = sum(1 for mb in pipeline if mb.is_last)
    stats = pipeline.stats()
    assert steps == stats["steps"] > 0
    delivered = sum(stats["label_tokens"].values())
    # Every token is a label except the first of each flush window (about 10 here), a lone
    # tail token, and the sequences left over in lanes that outlast the first one to end.
    assert total - 16 * stats["undelivered_at_end"] - 25 <= delivered < total
