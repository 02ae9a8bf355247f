"""Staged mixtures (``data.phases``): the pipeline's phases, their bounds, the compared phase.

A phase's ``until_step`` becomes a token bound (steps x global batch x sequence length), so
the pipeline, which counts tokens, switches where the trainer's steps would. One phase's
mixture is the run's variant (``data.compared_phase``, the last by default); the others,
and every bound, are part of the data contract, so the guard refuses runs whose other
phases differ. Design: docs/design/pipeline_plan.md ("Staged mixtures"), docs/anneals.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.experiment.config import DataSection, PhaseSection
from pipeline import MixturePhase
from pipeline.mixture import Mixture


def tokens_per_step(data: DataSection) -> int:
    """Tokens of one global batch."""
    return data.global_batch_size * data.seq_len


def phase_end_tokens(phase: PhaseSection, data: DataSection) -> int | None:
    """The token count at which ``phase`` ends (None: it runs to the end)."""
    if phase.until_step is not None:
        return phase.until_step * tokens_per_step(data)
    return phase.until_tokens


def pipeline_mixture(data: DataSection) -> dict[str, float] | list[MixturePhase]:
    """The ``mixture`` argument of the pipeline's ``WorkSource``: the shares of a plain
    mixture, or one ``MixturePhase`` per phase (an empty mixture: equal shares)."""
    equal = dict.fromkeys(data.datasets, 1.0)
    if not data.phases:
        return dict(data.mixture) or equal
    return [
        MixturePhase(dict(phase.mixture) or equal, phase_end_tokens(phase, data))
        for phase in data.phases
    ]


def compared_phase(data: DataSection) -> int:
    """The index of the phase whose mixture is the run's variant (0 for a plain mixture)."""
    if data.compared_phase is not None:
        return data.compared_phase
    return max(len(data.phases) - 1, 0)


def split_contract(
    pipeline_contract: dict[str, Any], compared: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """The pipeline's contract as the experiment's data contract and the run's mixture.

    A plain mixture: the contract without ``mixture``, as it always was. A staged one: the
    compared phase keeps only its bound in ``phases``, its mixture becomes the run's, and
    ``compared_phase`` says which it is, so only that phase may differ between variants.
    """
    contract = {k: v for k, v in pipeline_contract.items() if k != "mixture"}
    mixture: dict[str, str] = pipeline_contract["mixture"]
    if "phases" in contract:
        phases = contract["phases"]
        mixture = phases[compared]["mixture"]
        contract["phases"] = [
            {"until_tokens": phase["until_tokens"]} if k == compared else phase
            for k, phase in enumerate(phases)
        ]
        contract["compared_phase"] = compared
    return contract, mixture


@dataclass(frozen=True)
class PhaseOutline:
    """One phase as ``zephon plan`` shows it: its steps and its expected tokens per dataset."""

    phase: int
    steps: tuple[int, int] | None
    """The first and last step the phase reaches (1-based); None: not within the run."""
    tokens: int
    """Tokens the run draws in this phase."""
    mixture: dict[str, str]
    expected_tokens: dict[str, int]
    """Tokens per dataset the phase's shares give over its tokens."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "steps": None if self.steps is None else list(self.steps),
            "tokens": self.tokens,
            "mixture": self.mixture,
            "expected_tokens": self.expected_tokens,
        }


def phase_outline(data: DataSection, steps: int) -> list[PhaseOutline]:
    """The phases of a staged mixture over a ``steps``-step run ([] for a plain mixture)."""
    if not data.phases:
        return []
    per_step = tokens_per_step(data)
    total = steps * per_step
    names = sorted(data.datasets)
    outline = []
    begin = 0
    for k, phase in enumerate(pipeline_mixture(data)):
        assert isinstance(phase, MixturePhase)
        end = total if phase.until_tokens is None else min(phase.until_tokens, total)
        mixture = Mixture({n: phase.weights.get(n, 0.0) for n in names}, names)
        tokens = max(end - begin, 0)
        outline.append(
            PhaseOutline(
                phase=k,
                steps=(begin // per_step + 1, -(-end // per_step)) if tokens else None,
                tokens=tokens,
                mixture=mixture.canonical(),
                expected_tokens={
                    n: round(share * tokens) for n, share in zip(names, mixture.shares, strict=True)
                },
            )
        )
        begin = max(begin, end)
    return outline


def phase_problems(data: DataSection) -> list[str]:
    """Why ``data.phases`` / ``data.compared_phase`` cannot stage a run ([] if they can);
    each phase's mixture is checked like ``data.mixture`` by the validation. A phase that
    starts after the run's last step is allowed: a run trained to an earlier step than
    planned (a split, ``--steps``) is part of a longer one; the plan shows it unreached."""
    if not data.phases:
        if data.compared_phase is not None:
            return ["data.compared_phase needs data.phases (a staged mixture)"]
        return []
    problems = []
    if data.mixture:
        problems.append(
            "data.mixture and data.phases are both set: give each phase its mixture in "
            "data.phases and leave data.mixture empty"
        )
    previous = 0
    last = len(data.phases) - 1
    for k, phase in enumerate(data.phases):
        bounds = [b for b in (phase.until_step, phase.until_tokens) if b is not None]
        where = f"data.phases.{k}"
        if k == last:
            if bounds:
                problems.append(
                    f"{where} is the last phase: it runs to the end of the run, so leave its "
                    "until_step and until_tokens unset"
                )
            continue
        if len(bounds) != 1:
            problems.append(
                f"{where}: give exactly one of until_step and until_tokens (every phase but "
                "the last ends at a step or a token count)"
            )
            continue
        end = phase_end_tokens(phase, data)
        assert end is not None
        if end <= previous:
            problems.append(
                f"{where} ends at {end} tokens, not after the previous phase's end ({previous}); "
                "phases must end in increasing order"
            )
        previous = max(previous, end)
    if data.compared_phase is not None and not 0 <= data.compared_phase <= last:
        problems.append(
            f"data.compared_phase={data.compared_phase}: use a phase index in [0, {last}]"
        )
    return problems
