"""Admission of dataset URLs (orchestrator.service.admission): only under the object-store
prefixes of the service's configuration, with no way out of them and no credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.service.admission import Rules, admit, admit_job
from orchestrator.service.client import list_datasets
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.job import JobKind

PREFIX = "s3://corpus/shared/"


def rules(tmp_path: Path, *prefixes: str) -> Rules:
    return Rules(
        (str(tmp_path / "data"),),
        str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        object_store_prefixes=prefixes,
    )


def spec(*urls: str, **data: object) -> dict:
    return {"data": {"datasets": {"web": list(urls)}, "mixture": {"web": 1.0}, **data}}


def refusal(spec: dict, rules: Rules) -> str:
    with pytest.raises(ExperimentError) as refused:
        admit(spec, rules)
    return "\n".join(refused.value.problems)


def test_urls_are_admitted_only_under_the_configured_prefixes(tmp_path: Path) -> None:
    url = f"{PREFIX}web/*.parquet"
    assert admit(spec(url), rules(tmp_path, PREFIX)).data.datasets["web"] == [url]
    none_allowed = refusal(spec(url), rules(tmp_path))
    assert "accepts URLs only under its object-store prefixes" in none_allowed
    assert "--object-store-prefix" in none_allowed
    elsewhere = refusal(spec("s3://corpus/private/a.parquet"), rules(tmp_path, PREFIX))
    assert f"['{PREFIX}']" in elsewhere and "'s3://corpus/private/a.parquet'" in elsewhere
    climbing = refusal(spec(f"{PREFIX}../private/a.parquet"), rules(tmp_path, PREFIX))
    assert "object-store prefixes" in climbing


def test_credentials_and_cache_folders_are_refused(tmp_path: Path) -> None:
    with_key = refusal(spec("s3://KEYID:s3cr3t@corpus/shared/a.parquet"), rules(tmp_path, PREFIX))
    assert "credentials in a URL are refused" in with_key and "s3cr3t" not in with_key
    cache_dir = spec(f"{PREFIX}a.parquet", io_options={"cache": {"enabled": True, "dir": "/tmp"}})
    assert "data.io_options.cache.dir is chosen by the job service" in refusal(
        cache_dir, rules(tmp_path, PREFIX)
    )


def test_the_prefixes_are_kept_in_the_service_configuration(tmp_path: Path) -> None:
    service = ServiceConfig(root=str(tmp_path / "svc"), object_store_prefixes=(PREFIX,))
    service.save()
    assert load_service(tmp_path / "svc").rules().object_store_prefixes == (PREFIX,)
    assert list_datasets(service)["object_store_prefixes"] == [PREFIX]  # told to agents


def test_fresh_is_a_run_jobs_choice_beside_the_experiment(tmp_path: Path) -> None:
    url_spec = spec(f"{PREFIX}a.parquet")
    allowed = rules(tmp_path, PREFIX)
    assert admit_job(JobKind.RUN, {**url_spec, "fresh": True}, allowed).fresh is True
    assert admit_job(JobKind.RUN, url_spec, allowed).fresh is False
    for kind, value in ((JobKind.RUN, "yes"), (JobKind.PLAN, True)):
        with pytest.raises(ExperimentError, match="only a run job trains"):
            admit_job(kind, {**url_spec, "fresh": value}, allowed)


def test_eval_sets_are_admitted_only_under_the_data_roots(tmp_path: Path) -> None:
    """An evaluation set is read like a dataset: outside the data roots, refused, naming it."""
    url = f"{PREFIX}web/*.parquet"
    (tmp_path / "data").mkdir()
    inside = tmp_path / "data" / "eval.jsonl"
    inside.write_text('{"text": "a fixed evaluation document"}\n')
    outside = tmp_path / "secrets.jsonl"
    outside.write_text('{"text": "private"}\n')
    admitted = admit(spec(url, eval_sets={"fixed": [str(inside)]}), rules(tmp_path, PREFIX))
    assert admitted.data.eval_sets == {"fixed": [str(inside)]}
    problems = refusal(spec(url, eval_sets={"leak": [str(outside)]}), rules(tmp_path, PREFIX))
    assert "data.eval_sets.leak" in problems and "outside the data roots" in problems


def test_a_checkpoint_and_a_task_folder_are_admitted_only_under_the_data_roots(
    tmp_path: Path,
) -> None:
    """``train.init_from`` and ``eval.task_dir`` are read like datasets (a task YAML can name
    Python code): absolute, under a data root, and the checkpoint a checkpoint folder."""
    url, allowed = f"{PREFIX}web/*.parquet", rules(tmp_path, PREFIX)
    checkpoint = tmp_path / "data" / "step-10"
    checkpoint.mkdir(parents=True)
    (checkpoint / ".metadata").write_bytes(b"")
    assert admit(spec(url) | {"train": {"init_from": str(checkpoint)}}, allowed)
    refused = {
        "train.init_from: 'step-10': give an absolute path": {"train": {"init_from": "step-10"}},
        f"train.init_from: '{tmp_path}' is outside the data roots": {
            "train": {"init_from": str(tmp_path)}
        },
        f"eval.task_dir: '{tmp_path}' is outside the data roots": {
            "eval": {"task_dir": str(tmp_path)}
        },
    }
    for problem, section in refused.items():
        assert problem in refusal(spec(url) | section, allowed), section
    missing = refusal(
        spec(url) | {"train": {"init_from": str(checkpoint.parent / "step-20")}}, allowed
    )
    assert "no such folder; give a TorchTitan checkpoint step folder" in missing
