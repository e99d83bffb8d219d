"""Query understanding's output, validated against what the store can filter on: anything
invalid is dropped (and reported), never an error."""

import json

import jsonschema
import pytest

from serve_app.config import UnderstandingConfig
from serve_app.generation.understanding import (
    parse_understanding,
    stated,
    understanding_messages,
    understanding_schema,
)

CONFIG = UnderstandingConfig(
    corpus="biomedical articles", metadata_fields={"year": "integer", "journal": "string"}
)
QUESTION = "What did Nature papers from 2019 to 2021 in the Results sections say about doc-7?"


def parse(output: dict | str, question: str = QUESTION, collections=("default", "trials")):
    text = output if isinstance(output, str) else json.dumps(output)
    return parse_understanding(text, question, CONFIG, list(collections), reformulations=3)


def test_a_valid_output_becomes_store_filters():
    found = parse(
        {
            "is_relevant": True,
            "semantic_query": "results about doc-7",
            "queries": ["q1", "q2", "q3", "q4"],
            "filters": {
                "sections": ["Results"],
                "doc_ids": ["doc-7"],
                "metadata": {"year": {"gte": 2019, "lte": 2021}, "journal": "Nature"},
            },
        }
    )
    assert found.valid and found.is_relevant and not found.dropped
    assert found.queries == ["q1", "q2", "q3"]  # capped at the reformulations asked for
    assert found.filters.sections == ["Results"] and found.filters.doc_ids == ["doc-7"]
    assert found.filters.metadata == {"year": [2019, 2020, 2021], "journal": "Nature"}


@pytest.mark.parametrize(
    "text",
    ['{"is_relevant": true, "semantic_query": "cut at max_tok', "not json", "[1, 2]", ""],
)
def test_output_that_does_not_parse_means_no_filters_and_the_question_as_query(text):
    found = parse(text)
    assert not found.valid and found.is_relevant
    assert found.semantic_query == QUESTION and found.filters is None and found.dropped


def test_each_invalid_part_is_dropped_with_its_reason():
    found = parse(
        {
            "is_relevant": "yes",
            "semantic_query": "",
            "filters": {
                "doc_ids": ["bad id with spaces", "doc-7"],
                "metadata": {
                    "colour": "red",
                    "year": {"gte": 2021, "lte": 2019},
                    "journal": 5,
                },
                "collection": "someone-elses",
            },
        }
    )
    assert found.valid and found.is_relevant  # a non-boolean judgment counts as relevant
    assert found.semantic_query == QUESTION
    assert found.filters.doc_ids == ["doc-7"] and found.filters.metadata == {}
    reasons = " | ".join(found.dropped)
    for expected in (
        "is_relevant: not a boolean",
        "'bad id with spaces' is not a document id",
        "metadata.colour: not a filterable field",
        "range 2021..2019 is empty",
        "metadata.journal: 5 is not a string",
        "'someone-elses' is not one of this tenant's",
    ):
        assert expected in reasons


def test_filters_the_question_never_stated_are_dropped():
    found = parse(
        {
            "is_relevant": True,
            "semantic_query": "malaria",
            "filters": {"metadata": {"year": 2015}, "sections": ["Methods"]},
        },
        question="What do we know about malaria in 2019?",
    )
    assert found.filters is None
    assert any("2015" in d and "not stated" in d for d in found.dropped)
    assert stated(2019, "in 2019?") and not stated(201, "in 2019?") and stated("nature", "Nature")


def test_the_schema_offers_only_what_the_store_can_filter_on():
    schema = understanding_schema(CONFIG, 3, ["default", "trials"], filters=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    filters = schema["properties"]["filters"]["properties"]
    assert set(filters) == {"sections", "doc_ids", "metadata", "collection"}
    assert filters["collection"]["enum"] == ["default", "trials"]
    assert set(filters["metadata"]["properties"]) == {"year", "journal"}
    assert schema["properties"]["queries"]["maxItems"] == 3
    jsonschema.validate(
        {"is_relevant": True, "semantic_query": "x", "queries": ["a"], "filters": {}}, schema
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"is_relevant": True, "semantic_query": "x", "queries": ["a"], "filters": {"x": 1}},
            schema,
        )
    bare = understanding_schema(CONFIG, 0, ["default"], filters=False)
    assert set(bare["properties"]) == {"is_relevant", "semantic_query"}


def test_the_examples_answer_in_the_schema_itself():
    schema = understanding_schema(CONFIG, 3, [], filters=True)
    messages = understanding_messages("q?", [], CONFIG, 3, [], filters=True)
    for message in messages:
        if message.role == "assistant":
            jsonschema.validate(json.loads(message.content), schema)
    assert messages[-1].content == "Question: q?"
