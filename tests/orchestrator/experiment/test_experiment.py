"""Experiments before launch: schema, validation (all problems at once), fingerprints,
dp choice from free devices, the dry run and the CLI's JSON errors and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    fingerprints,
    load_experiment,
    validate,
)
from orchestrator.machine.devices import Devices, choose_dp
from orchestrator.machine.precision import resolve_precision
from orchestrator.run import api
from tests.support import REPO


@pytest.fixture(scope="module")
def base(corpus: dict[str, list[Path]], zephon_cache: Path) -> dict:
    return {
        "data": {
            "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
            "mixture": dict.fromkeys(corpus, 1.0),
            "cache_dir": str(zephon_cache),
        }
    }


def problems(config: dict, overrides: list[str], dp: int | None = None) -> list[str]:
    with pytest.raises(ExperimentError) as caught:
        validate(load_experiment(config, overrides), dp)
    return caught.value.problems


def test_schema_refuses_unknown_keys_and_wrong_types(base: dict) -> None:
    with pytest.raises(ExperimentError, match=r"data\.bogus: Key 'bogus' not in"):
        load_experiment(base, ["data.bogus=1"])
    with pytest.raises(ExperimentError, match=r"train\.steps: Value 'many'"):
        load_experiment(base, ["train.steps=many"])
    with pytest.raises(ExperimentError, match="not of the form key=value"):
        load_experiment(base, ["train.steps"])
    with pytest.raises(ExperimentError, match="does not exist"):
        load_experiment("/nonexistent/experiment.yaml")


def test_every_problem_is_reported_at_once(base: dict) -> None:
    found = problems(
        base,
        ["data.mixture.web=1", "data.lanes=3", "data.datasets.extra=[/no/such/*.jsonl]"],
        dp=2,
    )
    text = "\n".join(found)
    assert "unknown datasets ['web']" in text
    assert "global_batch_size (8) must be a multiple of data.lanes (3)" in text
    assert "'/no/such/*.jsonl' matches no file" in text
    assert "gives no weight to datasets ['extra']" in text
    assert "dp=2 does not divide data.lanes=3" in text
    assert len(found) == 5


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.mixture.code=-1", "must be finite and >= 0"),
        ("data.mixture.code=nan", "must be finite and >= 0"),
        ("data.holdout_bytes=0", "eval.enable needs held-out data"),
        ("resources.launcher=kubernetes", "use one of local, multinode, slurm"),
        ("resources.launcher=multinode", "needs resources.rdzv_endpoint"),
        ("train.steps=0", "train.steps must be >= 1"),
        ("train.keep_checkpoints=1", r"keep_checkpoints must be 0 \(keep all\) or >= 2"),
        ("train.precision=fp16", "use one of auto, float32, bfloat16"),
        (
            "model.args=[--training.mixed-precision-param,float32]",
            r"sets --training.mixed-precision-param, .* set train.precision \(float32",
        ),
        ("model.args=[--dataloader.spec,other.json]", r"sets --dataloader.spec, .* data\.\*"),
        ("model.args=['--training.steps=30']", "sets --training.steps, .* set train.steps instead"),
        ("model.args=['--debug.seed=3']", "sets --debug.seed, .* set train.seed instead"),
        ("model.args=[--checkpoint.interval,5]", "set train.checkpoint_interval"),
        ("model.args=[--tokenizer.name,o200k]", "set data.tokenizer instead"),
    ],
)
def test_bad_values_are_refused_with_what_to_change(
    base: dict, override: str, message: str
) -> None:
    config = load_experiment(base, [override])
    validate(load_experiment(base))  # the base itself is valid
    with pytest.raises(ExperimentError, match=message):
        validate(config)


def test_zero_weights_are_refused(base: dict) -> None:
    zero = [f"data.mixture.{name}=0" for name in base["data"]["datasets"]]
    assert problems(base, zero) == [
        "data.mixture weights sum to zero; give at least one dataset a share"
    ]


def test_the_mixture_weighs_exactly_the_datasets(base: dict) -> None:
    """A mixture written for other datasets (a preset, a renamed domain) is refused before
    anything starts, saying what to change; an empty one means equal shares."""
    *named, left_out = sorted(base["data"]["datasets"])

    def with_mixture(mixture: dict[str, float]) -> dict:
        return {**base, "data": {**base["data"], "mixture": mixture}}

    assert problems(with_mixture(dict.fromkeys(named, 1.0)), []) == [
        f"data.mixture gives no weight to datasets ['{left_out}']: give every dataset a weight "
        f"(0 leaves it out, e.g. data.mixture.{left_out}=0) or leave data.mixture empty for "
        "equal shares"
    ]
    renamed = problems(with_mixture({**dict.fromkeys(named, 1.0), "i18n": 1.0}), [])
    assert [p.split(":")[0] for p in renamed] == [
        "data.mixture names unknown datasets ['i18n']; known",
        f"data.mixture gives no weight to datasets ['{left_out}']",
    ]
    validate(load_experiment(with_mixture({})))
    validate(load_experiment(with_mixture({**dict.fromkeys(named, 1.0), left_out: 0.0})))


def test_fingerprints_separate_the_mixture_from_the_contract(base: dict) -> None:
    names = sorted(base["data"]["datasets"])
    a = fingerprints(load_experiment(base))
    scaled = fingerprints(load_experiment(base, [f"data.mixture.{n}=3" for n in names]))
    other_mix = fingerprints(load_experiment(base, [f"data.mixture.{names[0]}=2"]))
    other_seed = fingerprints(load_experiment(base, ["data.seed=1"]))
    other_dp = fingerprints(load_experiment(base), dp=2)
    assert scaled.variant == a.variant  # equal shares, however written
    assert other_mix.contract_fingerprint == a.contract_fingerprint
    assert other_mix.variant != a.variant
    assert other_seed.contract_fingerprint != a.contract_fingerprint
    assert other_dp.variant == a.variant  # dp is not part of the data
    assert set(a.contract["tokens_per_byte"]) == set(names)
    assert "mixture" not in a.contract


@pytest.mark.parametrize("order", ["v1", "v2"])
def test_fingerprint_follows_dataset_content(
    tmp_path: Path, zephon_cache: Path, order: str
) -> None:
    """v1's contract hashes every shard's content; v2's holds each shard's size, and the
    content of the shards a run reads is recorded for the guard (``shard_changed``)."""
    shard = tmp_path / "a.jsonl"
    shard.write_text("".join(json.dumps({"text": f"record {i} " * 40}) + "\n" for i in range(64)))
    config = {
        "data": {"datasets": {"a": [str(shard)]}, "cache_dir": str(zephon_cache), "order": order}
    }
    before = fingerprints(load_experiment(config)).contract_fingerprint
    shard.write_text(shard.read_text().replace("record 7 ", "record 8 "))  # the same size
    same_size = fingerprints(load_experiment(config)).contract_fingerprint
    assert (same_size != before) == (order == "v1")
    shard.write_text(shard.read_text().replace("record 8 ", "record 10 "))
    assert fingerprints(load_experiment(config)).contract_fingerprint != before


def test_dp_choice_follows_free_devices(base: dict) -> None:
    config = load_experiment(base, ["data.lanes=8", "train.microbatch_size=1"])
    assert choose_dp(config, Devices("cpu", 2, "cpu")) == 2
    assert choose_dp(config, Devices("cpu", 6, "cpu")) == 4  # largest divisor of 8 that fits
    assert choose_dp(config, Devices("cuda", 8, "H100", tuple(range(8)))) == 8
    with pytest.raises(ExperimentError, match="needs 4 cpu devices but 2 are free"):
        choose_dp(config, Devices("cpu", 2, "cpu"), 4)
    oversubscribed = load_experiment(base, ["data.lanes=8", "resources.oversubscribe=true"])
    assert choose_dp(oversubscribed, Devices("cpu", 2, "cpu"), 4) == 4
    with pytest.raises(ExperimentError, match="needs 4 cuda devices but 2 are free"):
        choose_dp(oversubscribed, Devices("cuda", 2, "A100", (0, 1)), 4)


def test_dry_run_plans_lanes_steps_and_tokens(base: dict) -> None:
    planned = api.plan_summary(api.plan(base, dp=2, overrides=["train.steps=30"]))
    assert planned["dp_size"] == 2
    assert planned["lanes_per_rank"] == {0: [0, 1], 1: [2, 3]}
    assert planned["tokens"] == 30 * 8 * 128
    assert planned["micro_batches_per_step"] == 2
    assert planned["command"][1:4] == ["-m", "torch.distributed.run", planned["command"][3]]
    assert "--nproc-per-node=2" in planned["command"]
    assert not Path(planned["run_folder"]).exists()  # a dry run creates nothing


@pytest.mark.parametrize("requested", ["auto", "float32", "bfloat16"])
def test_the_plan_resolves_the_precision_and_hands_it_to_the_trainer(
    base: dict, requested: str
) -> None:
    planned = api.plan_summary(api.plan(base, dp=1, overrides=[f"train.precision={requested}"]))
    expected = resolve_precision(requested, "cuda" if planned["device"] != "cpu" else "cpu")
    assert planned["precision"] == planned["config"]["train"]["precision"] == expected
    flag = planned["command"].index("--training.mixed-precision-param")
    assert planned["command"][flag + 1] == expected


def zephon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def partly_junk(folder: Path) -> Path:
    """A JSON-lines file of twenty records and three whose text is a number (bad records,
    skipped)."""
    path = folder / "junk.jsonl"
    texts = [f"record {n} " * 50 for n in range(20)] + [0, 1, 2]
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def test_cli_plan_json_and_exit_codes(base: dict, tmp_path: Path) -> None:
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(base))
    ok = zephon("plan", "-c", str(path), "--dp", "1", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    planned = json.loads(ok.stdout)
    assert planned["dp_size"] == 1 and planned["recipe"]["training"]["steps"] > 0
    text = zephon("plan", "-c", str(path), "--dp", "1", cwd=tmp_path)
    lines = text.stdout.splitlines()
    assert f"recipe_fingerprint: {planned['recipe_fingerprint']}" in lines
    assert max(map(len, lines)) < 1000  # a person reads it: the recipe is in --json
    skipping = json.loads(json.dumps(base))
    skipping["data"]["datasets"]["junk"] = [str(partly_junk(tmp_path))]
    skipping["data"]["mixture"]["junk"] = 1.0
    path.write_text(json.dumps(skipping))
    warned = zephon("plan", "-c", str(path), "--dp", "1", "--json", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr.startswith("zephon: warning: dataset 'junk': skipped 3 bad records")
    assert len(warned.stderr.splitlines()) == 1  # no line of Zephon's source under it
    path.write_text(json.dumps(base))
    bad = zephon("plan", "-c", str(path), "--json", "data.mixture.web=1", "--dp", "3", cwd=tmp_path)
    assert bad.returncode == 2
    error = json.loads(bad.stdout)["error"]
    assert error["kind"] == "invalid" and len(error["problems"]) == 2
    dead = zephon("run", "-c", str(path), "--json", "tracking.uri=http://127.0.0.1:9", cwd=tmp_path)
    assert dead.returncode == 4, dead.stdout + dead.stderr
    assert "offline_ok" in json.loads(dead.stdout)["error"]["message"]
    assert not (tmp_path / "runs").exists()  # refused before anything was written
