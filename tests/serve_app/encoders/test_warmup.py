"""Start-up of the transformers encoders: the warm-up runs the shapes requests will produce,
padding to a multiple changes no output, and the cuDNN attention switch is per process."""

import numpy as np
import pytest
import torch

from serve_app.config import RerankerConfig
from serve_app.encoders import torch_runtime
from serve_app.encoders.dense_transformers import TransformersDenseEncoder
from serve_app.encoders.reranker import CrossEncoderReranker
from serve_app.encoders.splade import SpladeEncoder
from serve_app.encoders.token_batches import padded_width, token_budget_batches, warmup_shapes
from serve_app.errors import ConfigError

TEXTS = [
    "cell biology",
    "Mitochondria make ATP through oxidative phosphorylation in the inner membrane.",
    "a",
    "long text about many other things " * 12,
]


def test_padded_width_rounds_up_but_never_past_max_length():
    assert [padded_width(w, 8, 512) for w in (1, 8, 9, 17, 505, 512)] == [8, 8, 16, 24, 512, 512]
    assert padded_width(509, 8, 510) == 510  # a multiple past max_length is never made
    assert padded_width(37, 1, 512) == 37


@pytest.mark.parametrize(
    ("max_length", "budget", "batch_size", "multiple"),
    [(256, 8192, 32, 8), (512, 16384, 64, 8), (100, 1000, 4, 1), (8, 64, 2, 16)],
)
def test_warmup_shapes_are_batches_the_budget_allows_largest_first(
    max_length, budget, batch_size, multiple
):
    shapes = warmup_shapes(max_length, budget, batch_size, multiple)
    assert len(shapes) == len(set(shapes))
    for rows, width in shapes:
        assert 1 <= rows <= batch_size and width <= max_length
        assert rows == 1 or rows * width <= budget
        assert width == max_length or width % multiple == 0
    # The first is the batch token_budget_batches makes of inputs at max_length: the peak.
    fullest = token_budget_batches([max_length] * (batch_size + 1), budget, batch_size)[0]
    assert shapes[0] == (len(fullest), max_length)
    sizes = [rows * width for rows, width in shapes]
    assert sizes == sorted(sizes, reverse=True)
    # A lone query of any length up to max_length falls in a warmed width.
    widths = {width for rows, width in shapes if rows == 1}
    assert max_length in widths


def widths_seen(model) -> list[int]:
    """The widths of the batches ``model`` is called with from now on."""
    seen: list[int] = []
    model.register_forward_pre_hook(
        lambda _module, _args, kwargs: seen.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True,
    )
    return seen


def _dense(local_config, **update):
    return TransformersDenseEncoder(local_config.dense.model_copy(update=update))


def test_warmup_runs_the_shapes_when_asked_and_auto_skips_it_on_a_cpu(local_config):
    assert _dense(local_config).warmup is None  # off by default
    assert _dense(local_config, warmup="auto").warmup is None  # auto: a GPU only
    assert _dense(local_config, warmup=False).warmup is None
    config = local_config.dense
    encoder = _dense(local_config, warmup=True, max_length=64, max_batch_tokens=256)
    assert encoder.warmup is not None
    assert encoder.warmup.shapes == warmup_shapes(64, 256, config.batch_size, 1)
    assert len(encoder.warmup.seconds) == len(encoder.warmup.shapes)
    assert all(s > 0 for s in encoder.warmup.seconds)


def test_dense_vectors_do_not_depend_on_the_padding_multiple(local_config, minilm):
    padded = _dense(local_config, pad_to_multiple_of=16)
    assert padded._multiple == 16 and minilm._multiple == 1
    widths = widths_seen(padded.model)
    assert np.allclose(padded.encode(TEXTS), minilm.encode(TEXTS), atol=2e-5)
    assert np.allclose(padded.encode(TEXTS[:1]), minilm.encode(TEXTS[:1]), atol=2e-5)
    assert widths and all(w % 16 == 0 or w == local_config.dense.max_length for w in widths)
    assert 16 in widths  # "a" and "cell biology" alone would be 3 and 4 wide


def test_splade_vectors_do_not_depend_on_the_padding_multiple(local_config, splade):
    config = local_config.splade.model_copy(update={"pad_to_multiple_of": 16, "warmup": True})
    padded = SpladeEncoder(config)
    assert padded.warmup is not None and padded.warmup.shapes[0][1] == config.max_length
    widths = widths_seen(padded.model)
    for pack in (True, False):  # the CPU's packed tokens and the GPU's zeroed padding
        padded._pack_tokens = pack
        for one, other in zip(padded.encode(TEXTS, 64), splade.encode(TEXTS, 64), strict=True):
            assert one.indices == other.indices
            assert one.values == pytest.approx(other.values, abs=1e-5)
    assert widths and all(w % 16 == 0 for w in widths)


def test_reranker_scores_do_not_depend_on_the_padding_multiple(tiny_reranker_dir):
    def make(**update):
        return CrossEncoderReranker(
            RerankerConfig(
                enabled=True, model=str(tiny_reranker_dir), max_length=60, batch_size=2, **update
            )
        )

    exact, padded = make(), make(pad_to_multiple_of=16, warmup=True)
    assert padded.warmup is not None and padded.warmup.shapes[0] == (2, 60)
    widths = widths_seen(padded.model)
    passages = [*TEXTS, "long " * 500]  # truncated to 60: padding it to 64 would pass the limit
    assert padded.score_sync("what makes ATP", passages) == pytest.approx(
        exact.score_sync("what makes ATP", passages), abs=1e-5
    )
    assert sorted(set(widths)) == [16, 32, 60]


@pytest.mark.parametrize(("written", "read"), [("on", True), ("false", False), ("auto", "auto")])
def test_warmup_reads_as_yaml_writes_it(app_config_factory, written, read):
    """``warmup: on`` in a YAML file or an env override is YAML's true, not a third word."""
    import yaml

    config = app_config_factory(splade={"warmup": yaml.safe_load(f"x: {written}")["x"]})
    assert config.splade.warmup == read


def test_warmup_rejects_other_words(app_config_factory):
    from serve_app.errors import ConfigError

    with pytest.raises(ConfigError, match=r"dense\.warmup"):
        app_config_factory(dense={"warmup": "sometimes"})


@pytest.fixture
def attention_switch(monkeypatch):
    """PyTorch's process-wide cuDNN attention flag and the models' record of it, restored."""
    monkeypatch.setattr(torch_runtime, "_cudnn_attention", {})
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cudnn_attention_is_off_on_a_gpu_unless_asked_for(attention_switch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # a flag: no GPU needed to set it
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch_runtime.configure_attention("dense", False, cpu)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # a CPU model leaves the GPU switch alone
    torch_runtime.configure_attention("dense", False, cuda)
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    torch_runtime.configure_attention("dense", True, cuda)  # the same model, reconfigured
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_models_sharing_a_process_must_agree_on_cudnn_attention(attention_switch):
    cuda = torch.device("cuda")
    torch_runtime.configure_attention("dense", False, cuda)
    torch_runtime.configure_attention("reranker", False, cuda)
    with pytest.raises(ConfigError, match=r"splade\.cudnn_attention is True but dense"):
        torch_runtime.configure_attention("splade", True, cuda)
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # the refused model changed nothing


def test_cudnn_attention_and_warmup_are_off_by_default(app_config_factory):
    config = app_config_factory()
    for section in (config.dense, config.splade, config.reranker):
        assert section.cudnn_attention is False and section.warmup is False
