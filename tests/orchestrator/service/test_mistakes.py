"""Generated mistakes given to the job service's ``submit`` in process: ``zephon submit``
(``-c`` file or ``--spec`` JSON, ``--kind``, ``--fresh``, ``--key``, a damaged
``service.json``) and the client API (:func:`orchestrator.service.client.submit`). Each is
refused with its documented exit code and kind, a message naming the key, file or value,
no traceback, no queue row and nothing written under the service's folder.

``pytest -s`` prints how many inputs each face was given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import EXIT_BUSY, ErrorKind, QueueError
from orchestrator.service import client
from orchestrator.service.config import SERVICE_FILE, ServiceConfig, load_service
from orchestrator.service.queue import MAX_NAME_LEN
from tests.support.mistakes import (
    FEW,
    MANY,
    TRIED,
    assert_names,
    broken_experiment_texts,
    mistakes,
    nothing_written,
    queued,
    refused_by_zephon,
    spec_with_a_mistake,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where ``zephon submit`` runs: a service root ``svc`` whose queue holds one job (key
    ``taken``), and its data root ``data`` with one dataset."""
    base = tmp_path_factory.mktemp("submit")
    (base / "data").mkdir()
    (base / "data" / "web.jsonl").write_text('{"text": "hello there"}\n' * 20)
    service = ServiceConfig(root=str(base / "svc"), data_roots=(str(base / "data"),))
    service.save()
    queue_one(service, good_spec(base), "taken")
    yield base
    print(f"\nmistakes tried by face: {dict(sorted(TRIED.items()))}")


def good_spec(folder: Path) -> dict[str, Any]:
    """An experiment the service of ``folder`` admits."""
    return {"data": {"datasets": {"web": [str(folder / "data" / "web.jsonl")]}}}


def queue_one(service: ServiceConfig, spec: dict[str, Any], key: str) -> None:
    """Queue ``spec`` under ``key`` in ``service``'s queue, and close it (:func:`queued`)."""
    queue = service.queue()
    try:
        queue.submit(spec, key=key, submitter=client.caller())
    finally:
        queue.close()


def submit_refused(
    face: str,
    folder: Path,
    *options: str,
    code: int = 2,
    kind: str = ErrorKind.INVALID,
    names: str | tuple[str, ...] = (),
    root: str = "svc",
) -> None:
    """``zephon submit OPTIONS --root ROOT --json`` in ``folder`` refused by the rules
    (:func:`tests.support.mistakes.refused_by_zephon`), the queue's rows unchanged."""
    before = queued(folder / root) if (folder / root / "queue.db").exists() else None
    argv = ("submit", *options, "--root", root)
    refused_by_zephon(face, folder, *argv, code=code, kind=kind, names=names)
    after = queued(folder / root) if (folder / root / "queue.db").exists() else None
    assert before == after, f"a refused submit queued a job: {before} -> {after} rows"


@MANY
@given(
    mistake=mistakes(), via=st.sampled_from(["-c", "--spec"]), kind=st.sampled_from(["run", "plan"])
)
def test_a_spec_with_a_mistake(mistake: tuple[str, Any], via: str, kind: str, folder: Path) -> None:
    spec, names = spec_with_a_mistake(good_spec(folder), *mistake)
    if via == "-c":
        (folder / "bad.yaml").write_text(yaml.safe_dump(spec))
        given_as = ("-c", "bad.yaml")
    else:
        given_as = ("--spec", json.dumps(spec))
    submit_refused(f"submit {via}", folder, *given_as, "--key", "k", "--kind", kind, names=names)


@FEW
@given(text=broken_experiment_texts(), suffix=st.sampled_from([".yaml", ".json"]))
def test_a_spec_file_that_does_not_parse(text: str, suffix: str, folder: Path) -> None:
    name = f"broken{suffix}"
    (folder / name).write_text(text)
    submit_refused(
        "submit -c unparsable", folder, "-c", name, "--key", "k", names=(name, "experiment")
    )


@FEW
@given(
    options=st.sampled_from(
        [
            (["--spec", "{"], "--spec"),
            (["--spec", "[1, 2"], "--spec"),
            (["--spec", "'data'"], "--spec"),
            (["--spec", "{}", "-c", "x.yaml"], "--spec"),
            ([], "--spec"),
            (["-c", "missing.yaml"], "missing.yaml"),
            (["--spec", "{}", "--kind", "train"], "--kind"),
            (["--spec", "{}", "--kind", ""], "--kind"),
            (["--spec", '{"data": 1}'], "data"),
            (["--spec", '{"fresh": "yes"}'], "fresh"),
        ]
    )
)
def test_options_that_name_no_spec(options: tuple[list[str], str], folder: Path) -> None:
    argv, names = options
    submit_refused("submit options", folder, *argv, "--key", "k", names=names)


@FEW
@given(kind=st.sampled_from(["plan", "verify"]))
def test_fresh_asked_of_a_job_that_does_not_train(kind: str, folder: Path) -> None:
    spec = good_spec(folder) if kind == "plan" else {"experiment": good_spec(folder)}
    options = ("--spec", json.dumps(spec), "--key", "k", "--kind", kind, "--fresh")
    submit_refused("submit --fresh", folder, *options, names=("fresh", "verify"))


@FEW
@given(
    sizes=st.fixed_dictionaries(
        {},
        optional={
            "first_dp": st.sampled_from([0, -1, 3, True, "2", 1.5, None]),
            "second_dp": st.sampled_from([0, 5, "x", [2]]),
            "split_step": st.sampled_from([-1, 0, 99, "half", 1.5]),
            "extra": st.just(1),
        },
    ),
    with_experiment=st.booleans(),
)
def test_a_verify_spec_that_cannot_run(
    sizes: dict[str, Any], with_experiment: bool, folder: Path
) -> None:
    spec = {**({"experiment": good_spec(folder)} if with_experiment else {}), **sizes}
    options = ("--spec", json.dumps(spec), "--key", "k", "--kind", "verify")
    names = ("first_dp", "second_dp", "split_step", "experiment")
    submit_refused("submit --kind verify", folder, *options, names=names)


@FEW
@given(
    key=st.one_of(
        st.just(""),
        st.text(min_size=MAX_NAME_LEN + 1, max_size=MAX_NAME_LEN + 20),
        st.builds(lambda a, b: f"{a}\n{b}", st.text(max_size=5), st.text(max_size=5)),
        st.sampled_from(["a\tb", "\x00", "key\x1b[0m"]),
    ),
    new_root=st.booleans(),
)
def test_a_key_the_queue_cannot_take(key: str, new_root: bool, folder: Path) -> None:
    """Refused before the queue is opened: a service root without one gets none."""
    root = "new-svc" if new_root else "svc"
    options = ("--spec", json.dumps(good_spec(folder)), "--key", key)
    submit_refused("submit --key", folder, *options, names="key", root=root)


@FEW
@given(spec=st.builds(lambda steps: {"train": {"steps": steps}}, st.integers(1, 10**6)))
def test_a_key_already_used_for_another_spec(spec: dict[str, Any], folder: Path) -> None:
    options = ("--spec", json.dumps(good_spec(folder) | spec), "--key", "taken")
    submit_refused("submit --key", folder, *options, names="'taken'")


SERVICE_FILES = [
    "",
    "{",
    "[1]",
    "null",
    '{"nope": 1}',
    '{"limits": [1]}',
    '{"limits": {"max_step": 5}}',
    '{"budgets": [2]}',
    '{"budgets": {"users": [1]}}',
    '{"budgets": {"default": "x"}}',
    '{"budgets": {"default": {"runs_per_day": -1}}}',
    '{"slurm": 3}',
    '{"slurm": {"queue": "x"}}',
    '{"launcher": "k8s"}',
    '{"device": "tpu"}',
]


@FEW
@given(
    text=st.one_of(
        st.sampled_from(SERVICE_FILES), st.binary(min_size=1, max_size=8).map(lambda b: b"\xff" + b)
    )
)
def test_a_damaged_service_file(text: str | bytes, folder: Path) -> None:
    damaged = folder / "damaged"
    damaged.mkdir(exist_ok=True)
    path = damaged / SERVICE_FILE
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    options = ("--spec", json.dumps(good_spec(folder)), "--key", "k")
    submit_refused("submit --root", folder, *options, names=SERVICE_FILE, root="damaged")


@FEW
@given(key=st.from_regex(r"[a-z]{1,12}", fullmatch=True))
def test_a_full_queue_is_busy(key: str, folder: Path) -> None:
    """A submitter at its limit of pending jobs: exit 5, ``queue_full``, try again later."""
    full = folder / "full"
    if not full.exists():
        service = ServiceConfig(
            root=str(full), data_roots=(str(folder / "data"),), max_queued_per_submitter=1
        )
        service.save()
        queue_one(service, good_spec(folder), "the-one")
    spec = good_spec(folder) | {"train": {"steps": 7}}
    options = ("--spec", json.dumps(spec), "--key", f"k-{key}")
    submit_refused(
        "submit busy",
        folder,
        *options,
        code=EXIT_BUSY,
        kind=ErrorKind.QUEUE_FULL,
        names="limit",
        root="full",
    )


@FEW
@given(
    kind=st.sampled_from([3, None, "Run", "train", ["run"]]),
    key=st.sampled_from([3, None, b"k", ["k"]]),
    which=st.sampled_from(["kind", "key"]),
)
def test_the_client_api_refuses_a_bad_kind_or_key(
    kind: Any, key: Any, which: str, folder: Path
) -> None:
    """:func:`client.submit` called with a kind or key of the wrong value: QueueError (exit 2,
    ``invalid``) naming it, no row."""
    TRIED["client submit"] += 1
    service = load_service(folder / "svc")
    arguments = {"kind": kind, "key": "k"} if which == "kind" else {"kind": "run", "key": key}
    before = queued(service.path)
    with nothing_written(folder), pytest.raises(QueueError) as refusal:
        client.submit(service, good_spec(folder), **arguments)
    assert (refusal.value.exit_code, refusal.value.kind) == (2, ErrorKind.INVALID)
    assert_names(str(refusal.value), (which, repr(arguments[which])))
    assert queued(service.path) == before


@pytest.mark.parametrize(
    "argv",
    [["jobs"], ["status", "j-1"], ["cancel", "j-1"], ["logs", "j-1"], ["wait", "j-1"]],
)
def test_a_command_that_reads_a_root_that_is_no_service_writes_nothing(
    argv: list[str], tmp_path: Path
) -> None:
    refused_by_zephon(
        "reads of no service", tmp_path, *argv, "--root", "typo", names="is no job service"
    )
