"""A domain of the local corpus with junk mixed in: what a quality filter is for.

``build_noisy_domain`` writes a copy of one domain's records (all of them, in order) with
junk records made from them between: after every clean record, ``junk_per_record`` junk
records on average. Each junk record is made from the clean record before it, one of
three kinds in turn, the kinds of text a crawl brings and FineWeb's quality filter drops
(datatrove's ``FineWebQualityFilter`` with its defaults, checked in
tests/demo/test_noisy_domain.py):

* ``garbled``: the record's characters shuffled within each line (mis-decoded or
  scrambled text): few lines end in terminal punctuation;
* ``word_list``: the record's words shuffled, stripped of punctuation, one to four to a
  line (keyword lists, tag clouds, menus);
* ``boilerplate``: a web page's template (navigation, cookie banner, share buttons,
  footer) repeated around lines of the record's words shuffled: the same lines over and
  over.

Junk carries the domain's characters and words but no sequence of its text (its words are
shuffled), so a junk record made from a scored document is no copy of it. Deterministic
(each record's shuffle is seeded by its domain and index) and idempotent, like the corpus.

Design: docs/curation.md ("The preset")
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

from demo.local_corpus import SHARD_TARGET_BYTES, Record, _write_atomic, _write_gz
from pipeline import Dataset
from pipeline.errors import ConfigError

#: Bump when the junk or the layout changes, so old builds are redone.
FORMAT_VERSION = 1
MANIFEST_NAME = "noisy.json"
JUNK_KINDS = ("garbled", "word_list", "boilerplate")
"""The kinds of junk record, made in turn."""

_TEMPLATE = (
    "Home | News | Products | Blog | About us | Contact",
    "Skip to main content",
    "We use cookies to improve your experience. Accept all | Manage settings",
    "Share this page: Facebook | Twitter | LinkedIn | Email",
    "Sign in or register to post comments",
    "Copyright 2026 Example Media Group. All rights reserved. Privacy | Terms",
)
"""A web page's template: the boilerplate kind repeats it around the record's words."""
_PUNCTUATION = re.compile(r"^\W+|\W+$")


def _garbled(text: str, rng: random.Random) -> str:
    lines = []
    for line in text.split("\n"):
        chars = list(line)
        rng.shuffle(chars)
        lines.append("".join(chars))
    return "\n".join(lines)


def _shuffled_words(text: str, rng: random.Random) -> list[str]:
    words = [w for w in (_PUNCTUATION.sub("", w) for w in text.split()) if w]
    rng.shuffle(words)
    return words or ["page"]


def _word_list(text: str, rng: random.Random) -> str:
    words = _shuffled_words(text, rng)
    lines, i = [], 0
    while i < len(words):
        k = rng.randint(1, 4)
        lines.append(" ".join(words[i : i + k]))
        i += k
    return "\n".join(lines)


def _boilerplate(text: str, rng: random.Random) -> str:
    words = _shuffled_words(text, rng)
    lines = list(_TEMPLATE)
    for i in range(0, len(words), 60):
        lines += [" ".join(words[j : j + 12]) for j in range(i, min(i + 60, len(words)), 12)]
        lines += _TEMPLATE
    return "\n".join(lines)


_MAKERS = {"garbled": _garbled, "word_list": _word_list, "boilerplate": _boilerplate}


def junk_record(text: str, kind: str, seed: str) -> str:
    """One junk record of ``kind`` (one of :data:`JUNK_KINDS`) made from ``text``; ``seed``
    seeds its shuffles."""
    rng = random.Random(hashlib.sha256(seed.encode()).digest())
    return _MAKERS[kind](text, rng)


def noisy_records(domain: str, texts: list[str], junk_per_record: float) -> list[Record]:
    """The clean records (ids ``DOMAIN/N``) with junk (``DOMAIN/N/KIND``) between them:
    after clean record N, as many junk records made from it as bring the running count to
    ``N+1`` times ``junk_per_record`` (rounded down), the kinds in turn."""
    records: list[Record] = []
    junk = 0
    for n, text in enumerate(texts):
        records.append({"id": f"{domain}/{n}", "text": text})
        while junk < int((n + 1) * junk_per_record):
            kind = JUNK_KINDS[junk % len(JUNK_KINDS)]
            made = junk_record(text, kind, f"{domain}/{n}/{junk}")
            records.append({"id": f"{domain}/{n}/{kind}", "text": made})
            junk += 1
    return records


def build_noisy_domain(
    corpus: dict[str, list[Path]], domain: str, junk_per_record: float, out_dir: Path
) -> list[Path]:
    """Write ``domain``'s records with junk between them (:func:`noisy_records`) as JSONL.gz
    shards in ``out_dir`` and return their paths; a build whose manifest matches the
    domain's content and ``junk_per_record`` is not redone.

    Raises:
        ConfigError: no such domain, or ``junk_per_record`` is negative.
    """
    if domain not in corpus:
        raise ConfigError(f"no domain {domain!r} in the local corpus; use one of {sorted(corpus)}")
    if junk_per_record < 0:
        raise ConfigError(f"junk_per_record must be >= 0, got {junk_per_record}")
    dataset = Dataset(domain, [str(p) for p in corpus[domain]])
    params = {
        "format_version": FORMAT_VERSION,
        "domain": domain,
        "junk_per_record": junk_per_record,
        "source": [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in corpus[domain]],
    }
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = None
    if manifest and manifest.get("params") == params:
        paths = [out_dir / s for s in manifest["shards"]]
        if all(p.is_file() for p in paths):
            return paths
    texts = dataset.read_texts(list(range(dataset.num_records)))
    records = noisy_records(domain, texts, junk_per_record)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)
    shards: list[str] = []
    batch: list[Record] = []
    size = 0

    def flush() -> None:
        name = f"shard-{len(shards):05d}.jsonl.gz"
        _write_gz(out_dir / name, batch)
        shards.append(name)

    for record in records:
        batch.append(record)
        size += len(record["text"].encode())
        if size >= SHARD_TARGET_BYTES:
            flush()
            batch, size = [], 0
    if batch:
        flush()
    for stale in out_dir.glob("shard-*.jsonl.gz"):
        if stale.name not in shards:
            stale.unlink()
    junk = sum(1 for r in records if r["id"].count("/") == 2)
    text = json.dumps(
        {"params": params, "shards": shards, "records": len(records), "junk_records": junk},
        indent=2,
        sort_keys=True,
    )
    _write_atomic(manifest_path, lambda tmp: tmp.write_text(text + "\n"))
    return [out_dir / s for s in shards]
