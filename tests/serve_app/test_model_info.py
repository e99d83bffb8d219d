"""The deployments' ``info()`` answers, typed: each crosses a Ray handle (pickles), dumps as
the dict it replaced, and refuses a field it does not know or a missing one at the maker."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from serve_app.model_info import DenseInfo, LLMInfo, ModelInfo, StoreInfo

INFOS = [
    DenseInfo(model_id="m", dim=384, revision=None, backend="onnx", encoder="OnnxDense"),
    ModelInfo(model_id="splade"),
    LLMInfo(model_id="llm", backend="llama_cpp", parallel=2),
    StoreInfo(strategies=["bm25", "dense"], models={"dense_dim": 384}),
]


@pytest.mark.parametrize("info", INFOS, ids=lambda i: type(i).__name__)
def test_an_info_pickles_and_dumps_its_fields(info):
    assert pickle.loads(pickle.dumps(info)) == info
    assert type(info).model_validate(info.model_dump()) == info


def test_dense_info_keeps_the_dict_it_replaced():
    assert INFOS[0].model_dump() == {
        "model_id": "m",
        "dim": 384,
        "revision": None,
        "backend": "onnx",
        "encoder": "OnnxDense",
    }


def test_an_unknown_or_missing_field_is_refused_where_the_info_is_made():
    with pytest.raises(ValidationError):
        ModelInfo(model_id="m", dim=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        LLMInfo(model_id="m", backend="llama_cpp")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        StoreInfo(strategies=["vector"], models={})  # type: ignore[list-item]
