"""The typed answer events: each body on the wire is exactly what ``/v1/answer`` sent as a
dict before (fields that are unknown left out, not null), events read off the wire come back
as the same models, and they pickle (they may cross a Ray handle)."""

from __future__ import annotations

import json
import pickle

import pytest
from pydantic import ValidationError

from serve_app.api.routers.answer import encode
from serve_app.errors import OverloadedError, TimeoutExceededError
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerDone,
    AnswerError,
    AnswerMetadata,
    MultiQueryScores,
    PassageResult,
    Usage,
    parse_event,
)

RESULT = PassageResult(
    passage=1,
    doc_id="d1",
    chunk_id="d1#0",
    title="Sleep",
    section="Results",
    heading_chain=["Results"],
    char_start=0,
    char_end=12,
    trimmed=False,
    source=None,
    metadata={"year": 2019},
    score=0.5,
    scores={"dense": 0.5},
    ranks={"dense": 1},
    found_by=["q"],
    text="Sleep helps.",
)


def metadata(**fields: object) -> AnswerMetadata:
    return AnswerMetadata(
        question="q",
        collection="default",
        semantic_query="q",
        sub_queries=["q"],
        filters=None,
        filters_source=None,
        understanding=None,
        history_turns=0,
        model="m",
        **fields,
    )


def test_metadata_leaves_out_what_is_unknown_and_keeps_the_nulls_it_always_sent():
    early = metadata().data()
    assert "top_k" not in early and "prompt_tokens" not in early and "event" not in early
    assert early["filters"] is None and early["results"] == []
    full = metadata(top_k=1, results=[RESULT], prompt_tokens=90).data()
    assert full["top_k"] == 1 and full["prompt_tokens"] == 90
    assert "multi_query" not in full["results"][0]  # only on multi-query answers
    scores = MultiQueryScores(rrf=0.1, normalized_rrf=1.0, avg_similarity=0.4, ranks={"q": 1})
    multi = RESULT.model_copy(update={"multi_query": scores})
    assert metadata(results=[multi]).data()["results"][0]["multi_query"]["ranks"] == {"q": 1}


def test_done_and_error_bodies():
    done = AnswerDone(answer="a [1]", usage=Usage(prompt_tokens=3, completion_tokens=2)).data()
    assert set(done) == {
        "answer",
        "citations",
        "invalid_citations",
        "uncited_sentences",
        "unsupported_sentences",
        "cited_documents",
        "early_return",
        "finish_reason",
        "usage",
        "timings_ms",
    }
    assert done["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}
    timeout = TimeoutExceededError("too slow")
    assert AnswerError.of(timeout).data() == timeout.to_dict()
    overloaded = AnswerError.of(OverloadedError("full", retry_after_s=5)).data()
    assert overloaded == {"code": "OVERLOADED", "message": "full", "retry_after_s": 5}


def test_the_sse_bytes_name_the_event_and_carry_its_body():
    assert encode(AnswerDelta(text="Hi é"), 2) == (
        b'id: 2\nevent: delta\ndata: {"text":"Hi \\u00e9"}\n\n'
    )


@pytest.mark.parametrize(
    "event",
    [
        metadata(top_k=1, results=[RESULT]),
        AnswerDelta(text="x"),
        AnswerDone(answer="a", early_return="no_results"),
        AnswerError.of(OverloadedError("full", retry_after_s=2)),
    ],
    ids=lambda e: e.event,
)
def test_events_round_trip_through_the_wire_and_pickle(event):
    assert parse_event(event.event, json.loads(json.dumps(event.data()))) == event
    assert pickle.loads(pickle.dumps(event)) == event


def test_an_unknown_event_is_refused_and_a_field_a_newer_service_added_is_not():
    with pytest.raises(ValidationError):
        parse_event("surprise", {"text": "x"})
    with pytest.raises(ValidationError):
        parse_event("delta", {"extra": 1})  # a field this client needs is still required
    assert parse_event("delta", {"text": "x", "extra": 1}).text == "x"
