"""Real TorchTitan training (torchrun, CPU, gloo) on pre-tokenized data: a Megatron indexed
dataset (written by megatron-core's IndexedDatasetBuilder) and an OLMo-core token file, mixed,
train 3 steps of ``zephon_mini`` on 1 process and on 2, with the same global batch digest at
every step."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.experiment import DataSection, write_data_spec
from orchestrator.experiment.config import PretokenizedSection
from pipeline import Dataset, load_tokenizer
from tests.support.titan_run import corpus, corpus_tokenizer, launch
from tests.support.token_files import write_megatron, write_token_array

STEPS = 3
GLOBAL_BATCH, SEQ_LEN = 8, 128  # zephon_mini


@pytest.fixture(scope="module")
def data_args(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Two domains of the shared corpus tokenized with its BPE: ``code`` as a Megatron
    dataset, ``docs`` as an OLMo-core file; the data spec declaring their tokenizer."""
    work = tmp_path_factory.mktemp("titan-pretokenized")
    domains = corpus(tmp_path_factory.getbasetemp())
    spec = corpus_tokenizer(domains)
    tokenizer = load_tokenizer(spec)
    files = {}
    for name in ("code", "docs"):
        texts = Dataset(name, [str(p) for p in domains[name]], cache_dir=work / "index")
        docs = tokenizer.encode_batch(texts.read_texts(range(min(texts.num_records, 300))))
        if name == "code":
            files[name] = write_megatron(work / name, docs, eos_id=tokenizer.eos_id)
        else:
            files[name] = write_token_array(work / f"{name}.npy", docs, eos_id=tokenizer.eos_id)
    data = DataSection(
        datasets={name: [str(path)] for name, path in files.items()},
        pretokenized=dict.fromkeys(files, PretokenizedSection(tokenizer=spec)),
        mixture={"code": 0.6, "docs": 0.4},
        holdout_bytes=0,
        tokenizer=spec,
        cache_dir=str(work / "index-cache"),
    )
    write_data_spec(work / "data.json", data)
    return work, ["--dataloader.spec", str(work / "data.json"), "--tokenizer.name", spec]


def test_token_files_train_with_the_same_global_batches_at_dp_1_and_2(
    data_args: tuple[Path, list[str]],
) -> None:
    work, args = data_args
    runs = {
        dp: launch(
            work,
            work / f"dp{dp}",
            dp,
            [*args, "--training.steps", str(STEPS), "--training.local-batch-size", str(8 // dp)],
        ).check()
        for dp in (1, 2)
    }
    one, two = runs[1].steps(), runs[2].steps()
    assert sorted(one) == list(range(1, STEPS + 1))
    assert {s["tokens"] for s in one.values()} == {GLOBAL_BATCH * SEQ_LEN}
    assert runs[1].digests() == runs[2].digests()
    assert len(set(runs[1].digests().values())) == STEPS
    assert {s["dp_size"] for s in two.values()} == {2}
