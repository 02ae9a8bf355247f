"""``zephon fit`` and ``zephon propose`` on tables: one JSON object, the documented fields."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator import cli
from tests.support.search_truths import DOMAINS, observed


@pytest.fixture
def tables(tmp_path: Path) -> tuple[Path, Path]:
    data = observed(16, seed=8, noise=0.002)
    mixtures, scores = tmp_path / "m.csv", tmp_path / "s.csv"
    mixtures.write_text(
        "id,"
        + ",".join(DOMAINS)
        + "\n"
        + "".join(
            f"{i}," + ",".join(map(str, m)) + "\n"
            for i, m in zip(data.ids, data.mixtures, strict=True)
        )
    )
    scores.write_text(
        "id,"
        + ",".join(data.targets)
        + ",other\n"
        + "".join(
            f"{i}," + ",".join(map(str, s)) + ",0\n"
            for i, s in zip(data.ids, data.scores, strict=True)
        )
    )
    return mixtures, scores


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def table_args(tables: tuple[Path, Path]) -> list[str]:
    targets = ",".join(f"heldout_{d}" for d in DOMAINS)
    return ["--mixtures", str(tables[0]), "--scores", str(tables[1]), "--target", targets]


def test_fit_reports_each_models_out_of_sample_figures_and_predicts_in_row_order(
    tables: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = tmp_path / "p.csv"
    wanted.write_text("id,a,b,c,d\nfirst,1,0,0,0\nsecond,1,1,1,1\n")
    code, payload = run(["fit", *table_args(tables), "--predict", str(wanted)], capsys)
    assert code == 0
    assert {m["name"] for m in payload["models"]} == {"mixing_law", "gaussian_process", "lightgbm"}
    assert all({"cv_spearman", "cv_regret"} <= m.keys() for m in payload["models"])
    assert [p["id"] for p in payload["predictions"]] == ["first", "second"]
    first, second = payload["predictions"]
    assert second["score"] < first["score"]  # the uniform mix is near the optimum, a corner far
    assert first["interval"][0] <= first["score"] <= first["interval"][1]


def test_propose_gives_proposals_a_recommendation_and_a_stop_signal(
    tables: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["propose", *table_args(tables), "--n", "3", "--max", "a=0.3", "--seed", "5"]
    code, payload = run(argv, capsys)
    assert code == 0
    assert len(payload["proposals"]) == 3
    assert all(p["mixture"]["a"] <= 0.3 for p in payload["proposals"])
    assert {"mixture", "predicted", "interval"} <= payload["recommended"].keys()
    assert isinstance(payload["stop"]["stop"], bool) and payload["stop"]["reason"]
    assert payload["model"] in {m["name"] for m in payload["models"]}
    assert run(argv, capsys)[1]["proposals"] == payload["proposals"]  # same seed, same mixtures
    mixture = np.array([list(p["mixture"].values()) for p in payload["proposals"]])
    np.testing.assert_allclose(mixture.sum(axis=1), 1.0)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--max", "a=x"], "write DOMAIN=NUMBER"),
        (["--budget", "100"], "needs both --tokens"),
        (["--min", "a=0.7", "--min", "b=0.7"], "minimums sum to"),
    ],
)
def test_propose_refuses_bad_options_with_exit_2(
    tables: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    code, payload = run(["propose", *table_args(tables), *extra], capsys)
    assert code == 2 and says in payload["error"]["message"]


def test_tables_without_a_target_are_refused(
    tables: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, payload = run(["fit", "--mixtures", str(tables[0]), "--scores", str(tables[1])], capsys)
    assert code == 2 and "--target" in payload["error"]["message"]


def test_fit_predicts_at_a_size_from_a_params_column(
    tables: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same mixtures at two sizes (the larger 20% lower, plus a mixture-dependent part);
    --at-size predicts between them and beyond."""
    mixtures, scores = tables
    rows = scores.read_text().splitlines()
    sized = tmp_path / "sized.csv"
    larger = []
    for line in rows[1:]:
        cells = line.split(",")
        values = [float(c) for c in cells[1:-1]]
        larger.append(",".join([f"{cells[0]}-big", *(str(0.8 * v) for v in values), "0", "1e8"]))
    sized.write_text(
        "\n".join([rows[0] + ",params", *(line + ",1e6" for line in rows[1:]), *larger]) + "\n"
    )
    lines = mixtures.read_text().splitlines()
    doubled = tmp_path / "m2.csv"
    doubled.write_text(
        "\n".join(
            [*lines, *(f"{ln.split(',', 1)[0]}-big,{ln.split(',', 1)[1]}" for ln in lines[1:])]
        )
        + "\n"
    )
    targets = ",".join(f"heldout_{d}" for d in DOMAINS)
    args = ["fit", "--mixtures", str(doubled), "--scores", str(sized), "--target", targets]
    code, payload = run([*args, "--at-size", "1e7"], capsys)
    assert code == 0, payload
    assert payload["model"] == "scaled_mixing_law" and payload["sizes"] == [1e6, 1e8]
    assert payload["at_size"] == 1e7
    code, refused = run(["fit", *table_args(tables), "--at-size", "1e9"], capsys)
    assert code == 2 and "two or more sizes" in json.dumps(refused)
