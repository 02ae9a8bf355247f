"""The decisions benchmark's corpus and tally (its sweep trains; see benchmarks/decisions.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.decisions import CORPUS_BYTES_PER_DOMAIN, build_corpus, summarise, to_markdown
from demo.local_corpus import build_local_corpus
from pipeline import Dataset


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
