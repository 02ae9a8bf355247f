"""The decisions benchmark's corpus and tally (its sweep trains; see benchmarks/decisions.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.decisions import (
    CORPUS_BYTES_PER_DOMAIN,
    DECIDE_ON,
    LOOKS,
    MIXES,
    SKEWED,
    SMOOTHING,
    build_corpus,
    judge_all,
    learning,
    planted,
    rates,
    spreads,
    summarise,
    to_markdown,
)
from benchmarks.seed_spread import AGGREGATE
from demo.local_corpus import build_local_corpus
from orchestrator.guard.comparison import RunSummary
from pipeline import Dataset
from tests.support.guard_runs import seeded


def test_the_twins_split_code_and_the_junk_keeps_its_characters(tmp_path: Path) -> None:
    corpus = build_corpus(tmp_path)
    assert sorted(corpus) == ["code_a", "code_b", "docs", "junk"]
    texts = {
        name: Dataset(name, paths).read_texts(list(range(Dataset(name, paths).num_records)))
        for name, paths in corpus.items()
    }
    built = build_local_corpus(tmp_path / "corpus", max_bytes_per_domain=CORPUS_BYTES_PER_DOMAIN)
    code = Dataset("code", built["code"])
    original = code.read_texts(list(range(code.num_records)))
    assert texts["code_a"] == original[::2] and texts["code_b"] == original[1::2]
    assert len(texts["junk"]) == len(texts["code_a"])
    for original, junk in zip(texts["code_a"], texts["junk"], strict=True):
        assert Counter(original) == Counter(junk) and (original != junk or len(set(original)) < 2)


def test_rates_count_what_each_design_decided() -> None:
    def judged(design: str, seeds: list[int], decision: str, winner: str | None) -> dict:
        return {
            "design": design,
            "seeds": seeds,
            "decision": decision,
            "winner": winner,
            "difference_other_minus_A": 0.1,
            "interval_width": 0.05,
            "interval_excludes_zero": decision != "cannot_tell",
            "method": "m",
        }

    rows = summarise(
        [
            judged("A/A", [0], "cannot_tell", None),
            judged("A/A", [1], "a_better", "A'"),
            judged("A/B", [0], "a_better", "A"),
            judged("A/B", [1], "b_better", "B"),
        ],
        [1],
    )
    (row,) = rows
    assert row["comparisons"] == 2 and row["aa_false_decisions"] == 1
    assert row["aa_false_decision_rate"] == 0.5
    assert row["ab_power"] == 0.5 and row["ab_wrong_direction"] == 0.5
    report = {"machine": "m", "date": "d", "runs": 6, "seed_pool": 2, "steps": 4, "wall_s": 1.0}
    markdown = to_markdown({**report, "rows": rows})
    assert "| 1 | 2 | 1 (50%) | 1 | 50% | 50% |" in markdown and "goal <= 5%: missed" in markdown


def synthetic_runs(seeds: int, steps: tuple[int, ...]) -> dict[tuple[str, int], RunSummary]:
    """Every mixture of the two sweeps under ``seeds`` seeds, scored on DECIDE_ON at
    ``steps``: each seed moves a run by its own amount, twice as much in the skewed sweep."""
    runs = {}
    for sweep, mixes in (("balanced", MIXES), ("skewed", SKEWED)):
        for name, mixture in mixes.items():
            for seed in range(seeds):
                jitter = (0.01 if sweep == "balanced" else 0.02) * ((seed * 7 + len(name)) % 5)
                base = 1.0 + jitter + (0.05 if name == "B" else 0.0)
                evals = {
                    s: {d: base + 0.1 * i - 0.01 * s for i, d in enumerate(DECIDE_ON)}
                    for s in steps
                }
                for scores in evals.values():
                    scores["aggregate"] = sum(scores.values()) / len(scores)
                runs[(name, seed)] = seeded(f"{name}-s{seed}", mixture, seed, base, evals=evals)
    return runs


def test_both_sweeps_are_judged_spread_and_tabled_at_every_smoothing() -> None:
    seeds, steps = 4, (4, 8, 12, 16, 20)
    runs = synthetic_runs(seeds, steps)
    judged = judge_all(runs, seeds, [1, 2])
    assert {(j["looks"], j["mixture"], j["design"], j["smooth_last"]) for j in judged} == {
        (looks, mixture, design, k)
        for looks in LOOKS
        for k in SMOOTHING
        for mixture, design in (("balanced", "A/A"), ("balanced", "A/B"), ("skewed", "A/A"))
    }
    assert all(j["decision"] == "cannot_tell" for j in judged if len(j["seeds"]) == 1)
    spread, ratio = spreads(runs, seeds)
    by_k = {s["smooth_last"]: s for s in spread["balanced"]}
    assert by_k[4]["steps"] == [8, 12, 16, 20] and by_k[1]["steps"] == [20]
    # scores move by the same amount at every step: smoothing leaves the spread as it is
    assert by_k[4]["score_sd"] == pytest.approx(by_k[1]["score_sd"])
    assert [r["smooth_last"] for r in ratio] == list(SMOOTHING)
    assert ratio[0]["score_sd"][AGGREGATE] == pytest.approx(2.0)
    rows = rates(judged, [1, 2])
    assert len(rows) == len(LOOKS) * 2 * len(SMOOTHING) * 2
    skewed = next(r for r in rows if r["mixture"] == "skewed")
    assert skewed["ab_power"] is None and skewed["comparisons"] == seeds
    seen = learning(runs, [*MIXES, *SKEWED])
    assert seen["A"]["eval_steps"] == list(steps)
    assert seen["A"]["last"]["docs"] == pytest.approx(seen["A"]["first"]["docs"] - 0.16)
    effect = planted(runs, seeds)
    assert [e["smooth_last"] for e in effect] == list(SMOOTHING)
    assert effect[0]["mean_difference"][AGGREGATE] == pytest.approx(0.05)
    balanced = [
        j
        for j in judged
        if (j["looks"], j["mixture"], j["smooth_last"]) == ("sequential", "balanced", 1)
    ]
    report = {
        "machine": "m",
        "date": "d",
        "runs": len(runs),
        "seed_pool": seeds,
        "steps": 20,
        "eval_interval": 4,
        "wall_s": 1.0,
        "mixtures": {**MIXES, **SKEWED},
        "learning": seen,
        "rows": summarise(balanced, [1, 2]),
        "spread": spread,
        "spread_ratio": ratio,
        "rates": rows,
        "planted": effect,
    }
    markdown = to_markdown(report)
    assert "| skewed / balanced | 1 | " in markdown and "2.00x" in markdown
    assert "| sequential | skewed | 4 | 2 | 6 | " in markdown
    assert "| fixed | balanced | 1 | 1 | 4 | " in markdown
    assert "| 1 | " in markdown.split("signal / noise")[1]
    assert "| S' (steps 4 -> 20) |" in markdown
