"""``data.pretokenized``: an experiment's token files (Megatron, OLMo-core) declare their
tokenizer, the plan records it in the contract, and a wrong or missing declaration or a
damaged file is refused by the plan (``fingerprints``, what ``zephon plan`` runs) naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import fingerprints, load_experiment, validate
from pipeline.errors import ConfigError, DataError
from tests.support.token_files import gpt2_documents, write_megatron, write_token_array
from tests.support.tokenizers import GPT_NEOX

GPT2_EOS = 50256


@pytest.fixture()
def experiment(tmp_path: Path) -> dict:
    docs = gpt2_documents()
    return {
        "data": {
            "datasets": {
                "megatron": [str(write_megatron(tmp_path / "m", docs[:60]))],
                "olmo": [str(write_token_array(tmp_path / "o.npy", docs[60:], eos_id=GPT2_EOS))],
            },
            "pretokenized": {"megatron": {"tokenizer": "gpt2"}, "olmo": {"dtype": "uint16"}},
            "holdout_docs": 4,
            "cache_dir": str(tmp_path / "cache"),
        }
    }


def test_the_contract_records_the_declared_tokenizer_and_exact_costs(experiment: dict) -> None:
    prints = fingerprints(load_experiment(experiment))
    entries = {d["name"]: d for d in prints.contract["datasets"]}
    assert entries["megatron"]["tokens"]["tokenizer"] == "gpt2"
    assert entries["olmo"]["tokens"]["dtype"] == "uint16"
    assert (
        entries["megatron"]["tokens"]["fingerprint"] == prints.contract["tokenizer"]["fingerprint"]
    )
    assert prints.contract["tokens_per_byte"] == {"megatron": 1.0, "olmo": 1.0}
    del experiment["data"]["pretokenized"]["olmo"]["dtype"]  # inferred: the same ids
    other = fingerprints(load_experiment(experiment))
    assert other.contract_fingerprint != prints.contract_fingerprint  # the declaration is contract


def test_a_declaration_that_cannot_work_is_refused_before_any_work(experiment: dict) -> None:
    experiment["data"]["pretokenized"]["olmo"]["dtype"] = "int7"
    experiment["data"]["pretokenized"]["nope"] = {"tokenizer": "gpt2"}
    experiment["data"]["pretokenized"]["megatron"]["tokenizer"] = str(GPT_NEOX)
    with pytest.raises(ExperimentError) as caught:
        validate(load_experiment(experiment))
    text = "\n".join(caught.value.problems)
    assert "data.pretokenized.olmo.dtype='int7': use one of uint8, uint16" in text
    assert "data.pretokenized.nope: no dataset or eval set is named 'nope'" in text
    assert f"data.pretokenized.megatron.tokenizer='{GPT_NEOX}' is not data.tokenizer" in text


def test_token_files_without_a_declaration_are_refused_by_the_plan(experiment: dict) -> None:
    del experiment["data"]["pretokenized"]["megatron"]
    with pytest.raises(ConfigError, match=r"'megatron' is pre-tokenized .*pretokenized\.megatron"):
        fingerprints(load_experiment(experiment))


@pytest.mark.parametrize("name", ["megatron", "olmo"])
def test_a_damaged_file_is_refused_by_the_plan_naming_it(experiment: dict, name: str) -> None:
    path = Path(experiment["data"]["datasets"][name][0])
    path.write_bytes(path.read_bytes()[:-1])  # cut inside its last id
    with pytest.raises(DataError, match=rf"dataset '{name}': {path}: .*bytes"):
        fingerprints(load_experiment(experiment))
