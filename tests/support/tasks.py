"""lm-evaluation-harness tasks on local data, written by the tests (nothing is fetched)."""

from __future__ import annotations

import json
from pathlib import Path

MC_ITEMS = [
    {"question": "The sky on a clear day is", "choices": ["blue", "green", "loud"], "gold": 0},
    {"question": "Two plus two equals", "choices": ["four", "five"], "gold": 0},
    {"question": "Fish live in", "choices": ["trees", "water", "the desert sand"], "gold": 1},
    {"question": "The opposite of hot is", "choices": ["cold", "warm"], "gold": 0},
    {"question": "Snow is usually", "choices": ["black", "purple", "white"], "gold": 2},
    {"question": "A week has seven", "choices": ["days", "cats"], "gold": 0},
]
PPL_TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Perplexity tasks score every token of the text once, window by window, with EOS first.",
]


def write_tasks(folder: Path) -> Path:
    """Task folder with a multiple-choice, a perplexity and a generation task on local data."""
    tasks, cache = folder / "tasks", folder / "hf-datasets"
    tasks.mkdir()
    (folder / "mc.jsonl").write_text("".join(json.dumps(item) + "\n" for item in MC_ITEMS))
    (folder / "ppl.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in PPL_TEXTS))
    data = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {path}\n  cache_dir: {cache}\ntest_split: test\n"
    (tasks / "tiny_mc.yaml").write_text(
        "task: tiny_mc\noutput_type: multiple_choice\n"
        + data.format(path=folder / "mc.jsonl", cache=cache)
        + 'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{gold}}"\n'
        + "metric_list:\n"
        + "".join(
            f"  - metric: {m}\n    aggregation: mean\n    higher_is_better: true\n"
            for m in ("acc", "acc_norm")
        )
    )
    (tasks / "tiny_ppl.yaml").write_text(
        "task: tiny_ppl\noutput_type: loglikelihood_rolling\n"
        + data.format(path=folder / "ppl.jsonl", cache=cache)
        + 'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
        + "".join(
            f"  - metric: {m}\n    aggregation: {a}\n    higher_is_better: false\n"
            for m, a in (
                ("word_perplexity", "weighted_perplexity"),
                ("byte_perplexity", "weighted_perplexity"),
                ("bits_per_byte", "bits_per_byte"),
            )
        )
    )
    (tasks / "tiny_gen.yaml").write_text(
        "task: tiny_gen\noutput_type: generate_until\n"
        + data.format(path=folder / "ppl.jsonl", cache=cache)
        + 'doc_to_text: "{{text}}"\ndoc_to_target: "{{text}}"\n'
        + "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return tasks
