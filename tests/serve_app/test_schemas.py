import pytest
from pydantic import ValidationError

from serve_app.schemas import Document, SearchRequest, Section, SparseVector


class TestDocument:
    def test_text_or_sections_exactly_one(self):
        with pytest.raises(ValidationError, match="exactly one"):
            Document(id="d", text="a", sections=[Section(title="x", text="y")])
        with pytest.raises(ValidationError, match="exactly one"):
            Document(id="d")

    def test_empty_text_rejected(self):
        with pytest.raises(ValidationError, match="no text"):
            Document(id="d", text="   ")

    def test_strict_types_and_unknown_fields(self):
        with pytest.raises(ValidationError):
            Document(id="d", text="x", metadata={"a": {"nested": 1}})
        with pytest.raises(ValidationError):
            Document.model_validate({"id": "d", "text": "x", "colour": "red"})
        with pytest.raises(ValidationError):
            Document.model_validate({"id": 5, "text": "x"})

    @pytest.mark.parametrize("bad", ["", "has space", "/leading", "a?b", "a#b"])
    def test_bad_ids(self, bad):
        with pytest.raises(ValidationError):
            Document(id=bad, text="x")

    def test_blocks_walk_nested_sections_in_order(self):
        doc = Document(
            id="10.1371/x",
            sections=[
                Section(title="Intro", text="i", children=[Section(title="Sub", text="s")]),
                Section(title="Empty"),
                Section(title="End", text="e"),
            ],
        )
        assert list(doc.iter_blocks()) == [
            (("Intro",), "i"),
            (("Intro", "Sub"), "s"),
            (("End",), "e"),
        ]

    def test_json_round_trip(self):
        doc = Document(id="d", title="t", text="x", metadata={"year": 2020, "tags": ["a", "b"]})
        assert Document.model_validate_json(doc.model_dump_json()) == doc


class TestSparseVector:
    def test_term_weights(self):
        v = SparseVector(indices=[3, 7], values=[0.5, 1.5], terms=["a", "b"])
        assert v.as_term_weights() == {"a": 0.5, "b": 1.5}

    @pytest.mark.parametrize(
        "fields",
        [
            {"indices": [1], "values": []},
            {"indices": [1, 1], "values": [1.0, 2.0]},
            {"indices": [1], "values": [1.0], "terms": []},
        ],
    )
    def test_invalid(self, fields):
        with pytest.raises(ValidationError):
            SparseVector(**fields)


class TestSearchRequest:
    def test_defaults(self):
        request = SearchRequest(query="q")
        assert request.top_k == 10 and request.strategies is None

    @pytest.mark.parametrize(
        "fields,message",
        [
            ({"query": "  "}, "empty"),
            ({"query": "q", "strategies": ["bm25", "colbert"]}, "strategies"),
            ({"query": "q", "strategies": []}, "at least one"),
            ({"query": "q", "strategies": ["bm25", "bm25"]}, "repeat"),
            ({"query": "q", "top_k": 0}, "top_k"),
            ({"query": "q", "fusion": {"method": "borda"}}, "method"),
            ({"query": "q", "fusion": {"method": "rrf", "weights": {"dense": -1}}}, ">= 0"),
        ],
    )
    def test_invalid(self, fields, message):
        with pytest.raises(ValidationError, match=message):
            SearchRequest.model_validate(fields)


# Metadata keys become store paths (`metadata.<key>`): anything but a plain identifier would
# address another field or be refused by Qdrant's path parser (a 500 found by schemathesis).
BAD_KEYS = ["", ".", "a.b", "a[0]", "[]", "a b", "\x00", "\x85", "é", "\ud7ff", "k" * 65]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_metadata_keys_must_be_identifiers(key):
    with pytest.raises(ValidationError):
        Document(id="d", text="t", metadata={key: 1})
    with pytest.raises(ValidationError):
        SearchRequest.model_validate({"query": "q", "filters": {"metadata": {key: 1}}})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1, "a"], [True], [[1]]])
def test_filter_values_the_stores_cannot_match_are_refused(value):
    with pytest.raises(ValidationError):
        SearchRequest.model_validate({"query": "q", "filters": {"metadata": {"k": value}}})


@pytest.mark.parametrize(
    "filters",
    [
        {"metadata": {"k": "x" * 1025}},
        {"metadata": {"k": ["a", "x" * 1025]}},
        {"sections": ["x" * 1025]},
    ],
)
def test_every_filter_string_is_bounded(filters):
    with pytest.raises(ValidationError):
        SearchRequest.model_validate({"query": "q", "filters": filters})


@pytest.mark.parametrize("value", [1, -(2**63), 1.5, "x", True, ["a", "b"], [1, 2], []])
def test_filter_values_the_stores_match(value):
    request = SearchRequest.model_validate({"query": "q", "filters": {"metadata": {"k": value}}})
    assert request.filters.metadata["k"] == value


def test_document_metadata_must_be_finite():
    with pytest.raises(ValidationError):
        Document(id="d", text="t", metadata={"k": float("nan")})
