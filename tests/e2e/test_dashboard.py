"""What a user sees in the MLflow UI after a sweep: a real ``mlflow server``, a real sweep into
it, and the UI rendered by a real headless Chromium.

Real: ``mlflow server`` (SQLite store, artifact proxy, one worker, loopback, a free port),
``python -m sweeps.app -m hydra/sweeper=zephon_mix hydra/launcher=zephon tracking=server``
(2 mixes at dp 1, side by side, ``zephon_mini``: a 6.6 M-parameter llama3 on CPU, 2 steps,
evaluated at step 2),
and Chromium (Debian's ``chromium``) loading the MLflow React app over HTTP and running its JavaScript
against the server's REST API (``--dump-dom`` after a virtual-time budget, ``--screenshot``).
Nothing is mocked; the assertions read only the rendered DOM (and the screenshot's pixels),
with the expected names and values taken from the sweep's ``sweep.json``.

Chromium is required, not optional: without it the tests fail and say how to install it.
``ZEPHON_UPDATE_DOCS=1`` copies the screenshot to ``docs/dashboard.png``.
About 2-3 minutes on 2 cores (server ~10 s, corpus and sweep 1-2 min, 9 page loads ~3 s each).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from orchestrator.run.launch import free_port
from orchestrator.tracking.mlflow_names import TAG_KIND, TAG_SWEEP
from sweeps.summary import SWEEP_FILE
from tests.support import REPO
from tests.support.sweeps import mixes_override, multirun, tiny_sweep_overrides
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(900)

SERVER_START_S = 120
"""Limit for ``mlflow server`` to answer /health (about 7-15 s on 2 cores)."""
BUDGETS_MS = (15_000, 30_000, 60_000)
"""Virtual-time budgets tried in turn until a page shows what it must (the first suffices)."""
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- Chromium ----------------------------------------------------------------------------------


NO_CHROMIUM = (
    "chromium is not installed, so the MLflow UI cannot be checked: install it with "
    "`sudo apt-get install -y chromium` (Debian; .ci/run does this)"
)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(NO_CHROMIUM, pytrace=False)
    return path


def test_chromium_is_installed() -> None:
    """Fails (rather than letting the page tests skip) where Chromium is missing."""
    assert shutil.which("chromium"), NO_CHROMIUM


def run_chromium(binary: str, url: str, *args: str, budget_ms: int) -> str:
    """Chromium headless on ``url`` with a fresh profile; its stdout."""
    with tempfile.TemporaryDirectory(prefix="zephon-chromium-") as profile:
        process = subprocess.run(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=profile,
        )
    assert process.returncode == 0, f"chromium failed on {url}:\n{process.stderr[-3000:]}"
    return process.stdout


class _Text(HTMLParser):
    """The visible text of a DOM: text nodes outside script/style/svg, whitespace collapsed."""

    SKIP = frozenset({"script", "style", "svg", "noscript"})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skipping += tag in self.SKIP

    def handle_endtag(self, tag: str) -> None:
        self.skipping -= tag in self.SKIP and self.skipping > 0

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def visible_text(dom: str) -> str:
    parser = _Text()
    parser.feed(dom)
    return " ".join(" ".join(parser.parts).split())


class Page:
    """A page as Chromium rendered it: the DOM and its visible text."""

    def __init__(self, url: str, dom: str) -> None:
        self.url, self.dom, self.text = url, dom, visible_text(dom)

    def __repr__(self) -> str:  # what an assertion failure shows
        return f"<page {self.url}: {self.text[:4000]!r}>"


def render(binary: str, url: str, *must_show: str) -> Page:
    """``url`` rendered by Chromium; re-rendered with longer budgets until every string of
    ``must_show`` is in its text or DOM (the app fetches from the server after it loads)."""
    page = Page(url, "")
    for budget in BUDGETS_MS:
        page = Page(url, run_chromium(binary, url, "--dump-dom", budget_ms=budget))
        if all(s in page.text or s in page.dom for s in must_show):
            break
    return page


# -- the server and the sweep --------------------------------------------------------------


@pytest.fixture(scope="module")
def server(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``mlflow server`` on a free loopback port; its URL. Killed (whole group) after."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--workers",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # no job runner (7 huey consumers, for GenAI features the UI does not need here):
        # starts faster, stops in 2-3 s instead of 15 s, and leaves the 2 cores to the sweep
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert process.poll() is None, (root / "server.log").read_text()[-5000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (
                f"mlflow server not healthy after {SERVER_START_S} s:\n"
                + (root / "server.log").read_text()[-5000:]
            )
            time.sleep(0.5)
        yield url
    finally:  # the server's group (it and its uvicorn worker): TERM, then KILL what is left
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def sweep(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 2-mix sweep tracked on the server; ``sweep.json`` (each job with its MLflow run name,
    ``mlflow_name``, beside its folder's, ``run_name``) plus the experiment id."""
    built = corpus(tmp_path_factory.getbasetemp())
    mixes = mixes_override(sorted(built), (1.0, 1.0, 1.0), (0.0, 1.0, 1.0))
    work = tmp_path_factory.mktemp("dashboard")
    process, sweep_dir = multirun(
        work,
        "dashboard",
        "hydra/launcher=zephon",
        "tracking=server",
        "tracking.experiment=dashboard",
        *tiny_sweep_overrides(built),
        mixes,
        "resources.dp=1",  # both jobs at once, one core each
        env={"MLFLOW_TRACKING_URI": server},
        timeout=600,
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    assert "Comparison accepted" in process.stdout, process.stdout[-3000:]
    summary = json.loads((sweep_dir / SWEEP_FILE).read_text())
    assert len(summary["jobs"]) == 2 and summary["parent_run_id"]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("dashboard")
    assert experiment is not None
    for job in summary["jobs"]:  # MLflow names a run by what it varies; the guard by its folder
        job["mlflow_name"] = client.get_run(job["mlflow_run_id"]).info.run_name
    assert len({job["mlflow_name"] for job in summary["jobs"]}) == 2, summary["jobs"]
    return {**summary, "experiment_id": experiment.experiment_id, "work": work}


def run_url(server: str, sweep: dict[str, Any], run_id: str, tail: str = "") -> str:
    return f"{server}/#/experiments/{sweep['experiment_id']}/runs/{run_id}{tail}"


# -- the pages ---------------------------------------------------------------------------------


def test_experiment_page_lists_the_sweep_and_its_runs_ranked_by_eval(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    experiment = f"{server}/#/experiments/{sweep['experiment_id']}/runs"
    top = render(chromium, experiment, sweep["sweep"], "3 matching runs")
    assert "dashboard" in top.text and "Training runs" in top.text, top
    assert sweep["sweep"] in top.text and "3 matching runs" in top.text, top  # parent + 2 children

    names = [job["mlflow_name"] for job in sweep["jobs"]]
    search = f"tags.`{TAG_SWEEP}` = '{sweep['sweep']}' and tags.`{TAG_KIND}` = 'run'"
    ranked = render(
        chromium,
        f"{experiment}?searchFilter={quote(search)}"
        f"&orderByKey={quote('metrics.`eval/aggregate_bpb`')}&orderByAsc=true",
        *names,
    )
    assert "2 matching runs" in ranked.text and "Sort: eval/aggregate_bpb" in ranked.text, ranked
    assert all(name in ranked.text for name in names), ranked
    mlflow_name = {job["run_name"]: job["mlflow_name"] for job in sweep["jobs"]}
    best_first = [mlflow_name[row["runs"][0]] for row in sweep["comparison"]["rows"]]
    assert sorted(names, key=ranked.text.index) == best_first, ranked  # the guard's ranks


def test_parent_run_page_shows_the_comparison_and_the_child_runs(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    page = render(chromium, run_url(server, sweep, sweep["parent_run_id"]), "Comparison accepted")
    text = page.text
    assert sweep["sweep"] in text and "Comparison accepted" in text, page
    assert "aggregate bpb" in text and "Child runs" in text, page
    assert "zephon.verdict : accepted" in text, page
    for row in sweep["comparison"]["rows"]:  # the guard's table, rendered from the description
        assert f"{row['aggregate_bpb']:.4f}" in text and row["mixture"] in text, page
        assert row["runs"][0] in text, page
    children = text[text.index("Child runs") :]
    assert all(job["mlflow_name"] in children for job in sweep["jobs"]), page


def test_child_run_pages_show_the_eval_metrics(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    for job in sweep["jobs"]:
        page = render(chromium, run_url(server, sweep, job["mlflow_run_id"]), "eval/aggregate_bpb")
        assert job["mlflow_name"] in page.text and f"Parent run {sweep['sweep']}" in page.text, page
        scores = {"aggregate_bpb": job["eval"]["aggregate_bpb"], **job["eval"]["bpb"]}
        for name, value in scores.items():
            metric = "eval/aggregate_bpb" if name == "aggregate_bpb" else f"eval/{name}_bpb"
            assert f"{metric} {value!r}" in page.text, (metric, value, page)


def test_compare_runs_page_puts_the_variants_side_by_side(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    jobs = sweep["jobs"]
    runs = quote(json.dumps([j["mlflow_run_id"] for j in jobs]))
    experiments = quote(json.dumps([sweep["experiment_id"]]))
    page = render(
        chromium,
        f"{server}/#/compare-runs?runs={runs}&experiments={experiments}",
        "eval/aggregate_bpb",
        *(j["mlflow_name"] for j in jobs),
    )
    assert f"Comparing {len(jobs)} Runs from 1 Experiment" in page.text, page
    assert all(j["mlflow_name"] in page.text for j in jobs), page
    metrics = page.text[page.text.index("Metrics Show diff only") :]
    assert "eval/aggregate_bpb" in metrics, page
    # the UI rounds to 4 significant digits, one column per run, in the order asked for
    values = " ".join(f"{j['eval']['aggregate_bpb']:.4g}" for j in jobs)
    assert values in metrics, (values, page)


def test_parent_run_artifacts_show_the_comparison(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    parent = sweep["parent_run_id"]
    listing = render(chromium, run_url(server, sweep, parent, "/artifacts"), "comparison.png")
    assert all(f"comparison.{ext}" in listing.text for ext in ("json", "md", "png")), listing

    markdown = render(
        chromium, run_url(server, sweep, parent, "/artifacts/comparison.md"), "Comparison accepted"
    )
    assert f"Path: mlflow-artifacts:/{sweep['experiment_id']}/{parent}" in markdown.text, markdown
    assert "Comparison accepted" in markdown.text and "aggregate bpb" in markdown.text, markdown
    assert all(job["run_name"] in markdown.text for job in sweep["jobs"]), markdown

    image = render(
        chromium,
        run_url(server, sweep, parent, "/artifacts/comparison.png"),
        'alt="comparison.png"',
    )
    assert f"Path: mlflow-artifacts:/{sweep['experiment_id']}/{parent}" in image.text, image
    assert re.search(r"comparison\.png [\d.]+KB Path:", image.text), image
    # the image itself, fetched by the app from the server's artifact proxy into a blob
    assert re.search(r'<img[^>]*alt="comparison\.png"[^>]*src="blob:', image.dom), image


def test_screenshot_of_the_comparison_plot_in_the_ui(
    chromium: str, server: str, sweep: dict[str, Any]
) -> None:
    url = run_url(server, sweep, sweep["parent_run_id"], "/artifacts/comparison.png")
    shot = sweep["work"] / "dashboard.png"
    for budget in BUDGETS_MS:
        run_chromium(chromium, url, f"--screenshot={shot}", budget_ms=budget)
        if shot.exists() and shot.stat().st_size > 100_000:
            break
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 100_000, len(data)

    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1600, 1000)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 500, len(colours)  # a rendered page, not a blank or error screen
    if os.environ.get("ZEPHON_UPDATE_DOCS") == "1":
        shutil.copyfile(shot, REPO / "docs" / "dashboard.png")
