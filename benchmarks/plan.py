"""What is measured: the variants, grouped into benchmark families, and how each is compared.

Every family is a table: its variants, the baseline of its ratio column, and the
target the team set for its headline ratios (each variant's ratio to the baseline). A variant that several families
share (Zephon ``threads p2 L8``, the reference configuration) is measured once
per repetition and appears in each of their tables.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.lanes import PipelineSpec

WORKERS = 2
"""Tokenize threads / DataLoader worker processes of every parallel variant (2 cores)."""


@dataclass(frozen=True)
class Variant:
    """One configuration, measured in a fresh process per repetition."""

    key: str
    """Stable identifier (JSON key)."""
    label: str
    """Name in the tables."""
    kind: str
    """Measurement kind (see ``benchmarks.child``)."""
    params: dict[str, Any] = field(hash=False)
    """Keyword arguments of the measurement."""
    prepare: str | None = None
    """Kind of an untimed set-up step, run once (in a child) before the repetitions."""


@dataclass(frozen=True)
class Family:
    """One benchmark table."""

    name: str
    title: str
    note: str
    variants: tuple[Variant, ...]
    baseline: Variant
    ratio_label: str
    """Header of the ratio column."""
    inverted: bool = False
    """True: the ratio is baseline / row (how many times faster the baseline is)."""
    headline: bool = True
    """Whether every variant's ratio to the baseline goes to the headline table."""
    target: float | None = None
    """Least ratio the team wants of each variant but the baseline (None: no target)."""


RAW = Variant(
    "raw-tiktoken",
    f"raw tiktoken ({WORKERS} threads)",
    "raw",
    {"num_threads": WORKERS},
)
DATALOADER = Variant(
    "torch-dataloader",
    f"PyTorch DataLoader ({WORKERS} workers)",
    "dataloader",
    {"num_workers": WORKERS},
)
TORCHTITAN = Variant(
    "torchtitan-hf",
    f"TorchTitan 0.3.0 HF loader ({WORKERS} workers)",
    "torchtitan",
    {"num_workers": WORKERS},
    prepare="torchtitan_prepare",
)
REFERENCE = PipelineSpec(parallelism=WORKERS)
"""Zephon's reference configuration: threads runner, 2 workers, 8 lanes, ordered."""


def pipeline_variant(spec: PipelineSpec, tokens: int) -> Variant:
    """A Zephon pipeline variant consuming at least ``tokens`` label tokens."""
    return Variant(
        "zephon-" + spec.label.replace(" ", "-"),
        f"Zephon {spec.label}",
        "pipeline",
        {"tokens": tokens, "spec": asdict(spec)},
    )


def families(tokens: int) -> list[Family]:
    """Every throughput family, for a Zephon token budget of ``tokens`` per run."""
    ref = pipeline_variant(REFERENCE, tokens)
    processes = pipeline_variant(PipelineSpec(parallelism=WORKERS, runner="processes"), tokens)
    unordered = pipeline_variant(PipelineSpec(parallelism=WORKERS, ordered=False), tokens)
    scaling = tuple(
        pipeline_variant(PipelineSpec(parallelism=p, lanes=lanes), tokens)
        for lanes in (1, 8)
        for p in (1, WORKERS)
    )
    return [
        Family(
            "limit",
            "1. The limit: Zephon against raw tiktoken",
            "Raw tiktoken only encodes texts already in memory; Zephon also reads and parses "
            "the shards, plans the mixture, packs, shuffles, batches and digests.",
            (RAW, ref, processes),
            baseline=RAW,
            ratio_label="÷ raw tiktoken",
            target=0.85,
        ),
        Family(
            "alternatives",
            "2. What users would pick instead",
            "Ratio: Zephon (threads p2 L8) tokens/s divided by the loader's.",
            (DATALOADER, TORCHTITAN, ref),
            baseline=ref,
            ratio_label="Zephon ÷ this",
            inverted=True,
            target=1.0,
        ),
        Family(
            "scaling",
            "4. Scaling: tokenize parallelism and lanes per rank",
            "Same budget and pipeline as the reference, threads runner (workers are threads).",
            scaling,
            baseline=ref,
            ratio_label="÷ threads p2 L8",
            headline=False,
        ),
        Family(
            "determinism",
            "5. Determinism overhead: ordered (default) against completion order",
            "ordered=False takes each lane's chunks as they finish (not reproducible); the "
            "overhead of determinism is 1 - ordered/unordered.",
            (ref, unordered),
            baseline=ref,
            ratio_label="ordered ÷ this",
            inverted=True,
        ),
    ]


def variants_of(selected: list[Family]) -> list[Variant]:
    """The distinct variants of ``selected`` families, in first-appearance order."""
    seen: dict[str, Variant] = {}
    for family in selected:
        for variant in family.variants:
            seen.setdefault(variant.key, variant)
    return list(seen.values())
