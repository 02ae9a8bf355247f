"""Generated mistakes given to the MCP tools in process (``ServiceTools``, what FastMCP
calls): each is refused by an error of the orchestrator (``ZephonError``, exit code and kind
of the CLI's table) or a ``ValueError`` of an argument, whose message names the key or value;
no traceback, nothing queued, nothing written under the service root.

``pytest -s`` prints how many inputs each face was given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.mcp.tools import ServiceTools
from orchestrator.service.config import ServiceConfig
from pipeline import ZephonError
from tests.support.mistakes import (
    FEW,
    MANY,
    TRIED,
    assert_names,
    mistakes,
    nothing_written,
    queued,
    spec_with_a_mistake,
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A service root with its queue, and one dataset under its data root."""
    base = tmp_path_factory.mktemp("svc")
    (base / "data" / "web").mkdir(parents=True)
    (base / "data" / "web" / "part-0.jsonl").write_text('{"text": "hello there"}\n' * 20)
    service = ServiceConfig(root=str(base / "svc"), data_roots=(str(base / "data"),))
    service.save()
    queued(service.path)  # the queue exists, as under a running service
    yield service.path
    print(f"\nmistakes tried by face: {dict(sorted(TRIED.items()))}")


def refused(face: str, root: Path, call: Any, *, names: tuple[str, ...], code: int = 2) -> None:
    """``call()`` refused by the rules: a ZephonError of exit ``code`` (or a ValueError of an
    argument), naming one of ``names``; nothing queued or written."""
    TRIED[face] += 1
    with nothing_written(root), pytest.raises((ZephonError, ValueError)) as refusal:
        call()
    error = refusal.value
    assert getattr(error, "exit_code", 2) == code, (type(error), error)
    assert_names(str(error), names)
    assert queued(root) == 0


def good_spec(root: Path) -> dict[str, Any]:
    return {"data": {"datasets": {"web": [str(root.parent / "data" / "web" / "part-0.jsonl")]}}}


@MANY
@given(mistake=mistakes(), kind=st.sampled_from(["run", "plan"]))
def test_submit_a_spec_with_a_mistake(mistake: tuple[str, Any], kind: str, root: Path) -> None:
    spec, names = spec_with_a_mistake(good_spec(root), *mistake)
    tools = ServiceTools(str(root))
    refused("mcp submit", root, lambda: tools.submit(spec, "k", kind=kind), names=names)


@FEW
@given(
    spec=st.one_of(
        st.sampled_from([[], "spec", 3, None, {"data": "x"}, {"tracking": "x"}, {"tracking": [1]}]),
        st.just({"name": "${oc.env:HOME}"}),
    )
)
def test_submit_a_spec_of_the_wrong_shape(spec: Any, root: Path) -> None:
    tools = ServiceTools(str(root))
    names = ("spec", "data", "tracking", "interpolation", "${")
    refused("mcp submit", root, lambda: tools.submit(spec, "k"), names=names)


@FEW
@given(
    dp=st.sampled_from([0, -1, 3, True, "2", 1.5]),
    resume_dp=st.sampled_from([1, 2, 0, 5]),
    split_step=st.sampled_from([None, 0, 20, 99, -1, "half"]),
)
def test_verify_elastic_with_sizes_that_cannot_run(
    dp: Any, resume_dp: int, split_step: Any, root: Path
) -> None:
    tools = ServiceTools(str(root))
    call = lambda: tools.verify_elastic(  # noqa: E731
        good_spec(root), dp=dp, resume_dp=resume_dp, key="v", split_step=split_step
    )
    refused("mcp verify_elastic", root, call, names=("dp", "split_step"))


@FEW
@given(job=st.text(min_size=1, max_size=12), tool=st.sampled_from(["status", "cancel"]))
def test_a_job_that_is_not_there(job: str, tool: str, root: Path) -> None:
    tools = ServiceTools(str(root))
    refused(f"mcp {tool}", root, lambda: getattr(tools, tool)(job), names=(repr(job), job))


RUNS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.sampled_from(["r1", 3, None]),
            "mixture": st.sampled_from([{"a": 1.0}, {"a": -1.0}, "a", [1], {}, {"a": "x"}]),
            "scores": st.sampled_from([{"loss": 1.0}, {}, {"loss": "bad"}, 7, {"other": 1.0}]),
        },
    ),
    min_size=0,
    max_size=4,
)


@FEW
@given(runs=RUNS, tool=st.sampled_from(["fit", "propose"]))
def test_fit_and_propose_on_tables_that_cannot_be_fitted(
    runs: list[dict[str, Any]], tool: str, root: Path
) -> None:
    tools = ServiceTools(str(root))
    call = lambda: getattr(tools, tool)(targets=["loss"], runs=runs or [{}])  # noqa: E731
    refused(f"mcp {tool}", root, call, names=("runs", "mixture", "scores", "id", "loss", "observ"))
