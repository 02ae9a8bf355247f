"""Each processing step on its own: what it keeps, what it drops, what fixes its contract,
and the errors of a wrong entry."""

from __future__ import annotations

import pickle
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline import ConfigError
from pipeline.processing import KEPT, Decontaminator, StepKind, normalized_digest, parse_chain
from pipeline.processing.datatrove_filter import DatatroveFilter
from pipeline.processing.length import LengthFilter
from pipeline.processing.user_function import UserFunction

PROSE = (
    "The committee met on Tuesday to discuss the budget for the coming year. After a long "
    "debate, the members agreed that the library would receive more money for new books, "
    "and that the park would be cleaned by volunteers from the town. The mayor thanked "
    "everyone for their work and said that the town was lucky to have such people. "
) * 3
SPAM = "buy now $$$ ### !!! " * 30


def test_length_bounds_characters_and_words() -> None:
    step = LengthFilter(min_chars=5, max_chars=20, min_words=2)
    assert step.apply("two words") == "two words"
    assert step.apply("abc") is None  # too short
    assert step.apply("x" * 21) is None  # too long
    assert step.apply("oneword") is None  # one word
    with pytest.raises(ConfigError, match="max_chars must be an integer >= min_chars"):
        LengthFilter(min_chars=10, max_chars=5)


@given(st.text(), st.sampled_from([" ", "\n\t ", "  \r\n"]))
def test_decontamination_ignores_whitespace_and_case(text: str, space: str) -> None:
    """A copy with other whitespace is the same document; one more word is not."""
    step = Decontaminator([text])
    assert step.apply(space + space.join(text.split()) + space) is None
    assert step.apply(text + " extra") == text + " extra"


def test_decontamination_catches_capitals_but_not_a_changed_word() -> None:
    step = Decontaminator(["The Quick brown fox\n\njumps."])
    assert step.apply("the quick BROWN fox jumps.") is None
    assert step.apply("the quick brown cat jumps.") is not None
    assert normalized_digest("A  b") == normalized_digest("a b")


def test_datatrove_filters_judge_prose_and_spam() -> None:
    gopher = DatatroveFilter(StepKind.GOPHER_QUALITY, {})
    assert gopher.apply(PROSE) == PROSE
    assert gopher.apply(SPAM) is None
    repetition = DatatroveFilter(StepKind.GOPHER_REPETITION, {})
    assert repetition.apply("the same line\n" * 50) is None
    assert repetition.apply(PROSE[: len(PROSE) // 3]) is not None
    # Settings are datatrove's own keyword arguments, and part of the contract.
    strict = DatatroveFilter(StepKind.GOPHER_QUALITY, {"min_doc_words": 10_000})
    assert strict.apply(PROSE) is None
    assert strict.contract()["min_doc_words"] == 10_000
    assert "datatrove" in strict.contract()
    # A step sent to a process worker rebuilds datatrove's filter there.
    assert pickle.loads(pickle.dumps(gopher)).apply(SPAM) is None


def test_datatrove_setting_unknown_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting.*min_words.*min_doc_words"):
        DatatroveFilter(StepKind.GOPHER_QUALITY, {"min_words": 3})


def test_user_function_keeps_drops_and_transforms(tmp_path: Path, monkeypatch) -> None:
    module = tmp_path / "team_filters.py"
    module.write_text(
        textwrap.dedent(
            """
            def keep(text):
                return "spam" not in text

            def shout(text):
                return None if not text else text.upper()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    keep = UserFunction("team_filters:keep")
    assert keep.apply("fine") == "fine"
    assert keep.apply("spam spam") is None
    assert UserFunction("team_filters:shout").apply("hi") == "HI"
    before = keep.contract()
    module.write_text(module.read_text() + "\n# tightened\n")
    sys.modules.pop("team_filters")
    assert UserFunction("team_filters:keep").contract() != before  # the source is the contract


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("nope", "process step='nope' is invalid; use one of"),
        ("no_such_module_xyz:keep", "cannot be imported"),
        ({"function": "os:nothing_here"}, "has no function 'nothing_here'"),
        ({"step": "length", "min_char": 3}, "unexpected keyword argument 'min_char'"),
        ("decontaminate", "not a step to list"),
        (3, "must be a step name or a mapping"),
    ],
)
def test_wrong_entries_are_refused_naming_the_entry(entry: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse_chain(["length", entry])
    assert "process entry 1" in str(error.value)


def test_chain_names_the_first_step_that_drops() -> None:
    chain = parse_chain([{"step": "length", "min_chars": 10}, "gopher_quality"])
    assert chain.apply(PROSE, "web") == (PROSE, KEPT)
    assert chain.apply("short", "web") == (None, 0)
    assert chain.apply(SPAM, "web") == (None, 1)
    assert chain.names == ["length", "gopher_quality"]


def test_a_step_limited_to_some_datasets_leaves_the_others_alone() -> None:
    chain = parse_chain([{"step": "length", "min_chars": 10, "datasets": ["web"]}], ["web", "code"])
    assert chain.apply("short", "web") == (None, 0)
    assert chain.apply("short", "code") == ("short", KEPT)
    assert chain.contract()[0]["datasets"] == ["web"]
    with pytest.raises(ConfigError, match=r"unknown dataset\(s\) \['wbe'\]"):
        parse_chain([{"step": "length", "datasets": ["wbe"]}], ["web", "code"])


def test_datatrove_filters_give_the_same_verdicts_on_threads() -> None:
    """spaCy, under datatrove's word tokenizer, is not safe for threads: the lane workers'
    threads take turns, and each record gets the verdict it gets alone."""
    texts = [f"{PROSE[:300]} Item {i} of the list, with words {i * 7}." for i in range(16)]
    texts.append(SPAM)
    for kind in ("gopher_quality", "fineweb_quality"):
        chain = parse_chain([kind])
        alone = [chain.apply(t, "web") for t in texts]
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(lambda t, c=chain: c.apply(t, "web"), texts)) == alone, kind
