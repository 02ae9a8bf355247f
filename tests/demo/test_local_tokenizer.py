"""The main job's tokenizer: a byte-level BPE learned from the local corpus, built once."""

from __future__ import annotations

from pathlib import Path

from demo.local_tokenizer import build_local_tokenizer
from pipeline import load_tokenizer


def test_a_bpe_of_the_asked_size_is_learned_from_the_corpus_once(
    corpus: dict[str, list[Path]], tmp_path: Path
) -> None:
    folder = build_local_tokenizer(corpus, tmp_path / "bpe", vocab_size=320)
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer.vocab_size == 320
    text = "def main() -> None:\n    return None\n"
    ids = tokenizer.encode(text)
    assert 0 < len(ids) < len(text.encode())  # learned merges: fewer tokens than bytes
    assert tokenizer.decode(ids) == text
    assert 0 <= tokenizer.eos_id < 320 and tokenizer.eos_id not in ids
    built = (folder / "tokenizer.json").stat().st_mtime_ns
    assert build_local_tokenizer(corpus, tmp_path / "bpe", vocab_size=320) == folder
    assert (folder / "tokenizer.json").stat().st_mtime_ns == built  # reused, not retrained
