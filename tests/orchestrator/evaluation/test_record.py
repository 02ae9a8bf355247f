"""EvalRecord: the eval.jsonl line every reader of an evaluation goes through."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.evaluation import DEFAULT_METRIC, DocumentScores, EvalRecord, MetricScores

values = st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=5)


@st.composite
def metric_scores(draw: st.DrawFn, domains: list[str]) -> MetricScores:
    documents = {}
    for domain in domains:
        doc_values = draw(values)
        weights = [float(draw(st.integers(1, 10_000))) for _ in doc_values]
        documents[domain] = DocumentScores(doc_values, weights)
    return MetricScores.of_documents(documents)


@given(st.data())
def test_a_record_survives_its_json_line(data: st.DataObject) -> None:
    domains = data.draw(
        st.lists(st.sampled_from(["code", "docs", "i18n"]), min_size=1, unique=True)
    )
    record = EvalRecord(
        step=data.draw(st.integers(0, 10_000)),
        metrics={
            DEFAULT_METRIC: data.draw(metric_scores(domains)),
            "accuracy": data.draw(metric_scores(domains)),
        },
        tokens=dict.fromkeys(domains, 7),
        bytes=dict.fromkeys(domains, 9),
        seconds=1.5,
    )
    line = json.loads(json.dumps(record.to_json()))
    assert EvalRecord.from_json(line) == record


def test_a_domains_score_is_its_documents_values_over_their_weights() -> None:
    scores = MetricScores.of_documents(
        {"code": DocumentScores([3.0, 1.0], [2.0, 6.0]), "docs": DocumentScores([1.0], [1.0])}
    )
    assert scores.scores == {"code": 0.5, "docs": 1.0}
    assert scores.aggregate == 0.75  # the mean of the domains, not of the documents


def test_a_line_written_before_other_metrics_existed_reads_as_bits_per_byte_only() -> None:
    old = {
        "step": 10,
        "bpb": {"code": 1.25, "docs": "oops"},  # a damaged value is left out, not the record
        "documents": {"code": {"bits": [10.0], "bytes": [8]}},
        "tokens": {"code": 4},
    }
    record = EvalRecord.from_json(old)
    assert set(record.metrics) == {DEFAULT_METRIC}
    bpb = record.metrics[DEFAULT_METRIC]
    assert bpb.scores == {"code": 1.25}
    assert bpb.aggregate is None  # not made up: the guard refuses a record without it
    assert bpb.documents["code"] == DocumentScores([10.0], [8.0])
    # the keys every earlier reader of eval.jsonl reads are the ones written
    written = EvalRecord(10, {DEFAULT_METRIC: MetricScores.of_documents(bpb.documents)}).to_json()
    assert written["bpb"] == {"code": 1.25} and written["aggregate_bpb"] == 1.25
    assert written["documents"] == {"code": {"bits": [10.0], "bytes": [8]}}
