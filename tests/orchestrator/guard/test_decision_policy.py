"""The guard's decision policy (orchestrator.guard.decision_policy): one value, its values
checked once, in the order and words the guard's faces have always answered with."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.guard.decision_policy import DEFAULT_POLICY, DecisionPolicy
from orchestrator.guard.decisions import DEFAULT_MAX_SEEDS, Design, Family, LookPlan


def test_the_defaults_are_the_guard_s() -> None:
    assert DecisionPolicy() == DEFAULT_POLICY
    assert (DEFAULT_POLICY.threshold, DEFAULT_POLICY.confidence) == (0.0, 0.95)
    assert (DEFAULT_POLICY.family, DEFAULT_POLICY.design) == (Family.HOLM, Design.SEQUENTIAL)
    assert DEFAULT_POLICY.max_seeds == DEFAULT_MAX_SEEDS
    assert (DEFAULT_POLICY.decide_on, DEFAULT_POLICY.smooth_last) == (None, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_POLICY.threshold = 1.0  # type: ignore[misc]


def test_a_face_s_plain_values_become_members_and_a_tuple() -> None:
    policy = DecisionPolicy(family="bh", design="fixed", decide_on=["code", "docs"])  # type: ignore[arg-type]
    assert policy.family is Family.BH and policy.design is Design.FIXED
    assert policy.decide_on == ("code", "docs")
    assert policy == DecisionPolicy(
        family=Family.BH, design=Design.FIXED, decide_on=("code", "docs")
    )
    assert DecisionPolicy(decide_on=()).decide_on is None  # nothing named: every domain
    assert hash(policy) == hash(
        DecisionPolicy(family=Family.BH, design=Design.FIXED, decide_on=("code", "docs"))
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"threshold": -0.01}, r"threshold must be finite and >= 0, got -0.01"),
        ({"threshold": float("inf")}, r"threshold must be finite and >= 0"),
        ({"confidence": 1.0}, r"confidence must be in \(0, 1\), got 1.0"),
        ({"smooth_last": 0}, r"smooth_last \(--smooth-last\) must be an integer >= 1"),
        ({"smooth_last": True}, r"must be an integer >= 1"),
        ({"family": "bonferroni"}, r"^family 'bonferroni': use one of holm, bh, none$"),
        ({"design": "bayesian"}, r"^design 'bayesian': use one of sequential, fixed$"),
        ({"max_seeds": 1}, r"max_seeds must be an integer >= 2, got 1"),
        # several wrong: the first in the guard's order (threshold and confidence,
        # smooth_last, family, design, max_seeds) is named
        ({"confidence": 0.0, "smooth_last": 0}, r"confidence must be"),
        ({"smooth_last": 0, "family": "x"}, r"smooth_last"),
        ({"family": "x", "design": "y"}, r"family 'x'"),
        ({"design": "y", "max_seeds": 1}, r"design 'y'"),
    ],
)
def test_a_wrong_value_is_refused_saying_what_to_pass(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecisionPolicy(**settings)


def test_its_look_plan_spends_one_minus_its_confidence() -> None:
    policy = DecisionPolicy(confidence=0.9, design="fixed", max_seeds=4)  # type: ignore[arg-type]
    assert policy.look_plan() == LookPlan(Design.FIXED, 1 - 0.9, 4)
    assert DEFAULT_POLICY.look_plan() == LookPlan(alpha=1 - 0.95)


def test_decide_on_is_checked_against_the_domains_runs_score() -> None:
    domains = ["code", "docs"]
    DecisionPolicy(decide_on=["code"]).check_decide_on(domains)
    DecisionPolicy(decide_on=["accuracy:docs"]).check_decide_on(domains)
    DecisionPolicy(decide_on=["task:mc"]).check_decide_on(domains)  # checked at the comparison
    DEFAULT_POLICY.check_decide_on(domains)
    with pytest.raises(ValueError, match=r"cannot decide on held-out domain\(s\) \['web'\]"):
        DecisionPolicy(decide_on=["web"]).check_decide_on(domains)
    # the names as a list, as the faces have always shown them
    with pytest.raises(
        ValueError, match=r"one held-out metric at a time: \['accuracy:code', 'docs'\]"
    ):
        DecisionPolicy(decide_on=["accuracy:code", "docs"]).check_decide_on(domains)
    with pytest.raises(ValueError, match=r"one task at a time.*got \['task:mc', 'code'\]"):
        DecisionPolicy(decide_on=["task:mc", "code"]).check_decide_on(domains)
