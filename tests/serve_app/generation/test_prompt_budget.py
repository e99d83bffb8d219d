"""The answer prompt's budget: the shipped configurations' defaults fit their context window,
a configuration whose defaults cannot fit fails at load naming the numbers, and the allowances
for the prompt's fixed text hold on the shipped models' own tokenizers (the 1.5B GGUF of
config/local.yaml, the Qwen3 tokenizer of config/gpu.yaml's model, and the tests' SmolLM2);
a request's ``top_k`` is bounded by the same budget."""

from pathlib import Path

import pytest

from serve_app.config import load_config
from serve_app.config.answer import (
    HISTORY_TURN_TOKENS,
    PASSAGE_MARKUP_TOKENS,
    PROMPT_OVERHEAD_TOKENS,
)
from serve_app.errors import ConfigError, RequestSchemaError
from serve_app.generation.base import Message
from serve_app.generation.gguf_tokenizer import load_chat_tokenizer
from serve_app.generation.model_files import resolve_gguf
from serve_app.generation.prompts import LABEL_CHARS, Passage, answer_messages
from serve_app.schemas import Chunk
from tests.conftest import QWEN3_TOKENIZER, ROOT
from tests.support.data import SMOLLM2


@pytest.mark.parametrize("name", ["local.yaml", "gpu.yaml"])
def test_the_shipped_defaults_fit_the_context_window(name):
    config = load_config(ROOT / "config" / name, environ={})
    worst = config.answer.worst_prompt_tokens()
    assert config.llm.enabled and worst["total"] <= config.llm.context_tokens, worst


@pytest.mark.parametrize("name", ["local.yaml", "gpu.yaml"])
def test_the_top_k_limit_is_the_most_passages_the_worst_prompt_holds(name):
    """A request may ask for at most the passages whose worst prompt (every other part at its
    allowance) fits the window: one more would not."""
    config = load_config(ROOT / "config" / name, environ={})
    window, answer = config.llm.context_tokens, config.answer
    limit = answer.top_k_limit(window)
    assert answer.top_k <= limit
    assert answer.worst_prompt_tokens(top_k=limit)["total"] <= window
    assert answer.worst_prompt_tokens(top_k=limit + 1)["total"] > window
    answer.check_top_k(limit, window)
    with pytest.raises(RequestSchemaError) as refused:
        answer.check_top_k(limit + 1, window)
    assert refused.value.status == 422
    assert refused.value.details == {"field": "top_k", "limit": limit}
    assert f"llm.context_tokens ({window})" in refused.value.message


def test_the_shipped_local_configuration_answers_at_most_six_passages():
    """4,096 tokens less 320 of fixed text, 1,024 of history, 512 of question and 384 of
    answer leave 1,856: six passages of 256 + 24 tokens (the schema alone allowed 20)."""
    config = load_config(ROOT / "config" / "local.yaml", environ={})
    assert config.answer.top_k_limit(config.llm.context_tokens) == 6


def test_a_configuration_whose_defaults_cannot_fit_fails_at_load(tmp_path: Path):
    text = (ROOT / "config" / "local.yaml").read_text()
    path = tmp_path / "tight.yaml"
    path.write_text(text.replace("context_tokens: 4096", "context_tokens: 2048"))
    with pytest.raises(ConfigError) as refused:
        load_config(path, environ={})
    assert "llm.context_tokens is 2048" in str(refused.value)
    assert "'passages': 1120" in str(refused.value)


def fixed_and_markup(count_prompt) -> tuple[int, int]:
    """Tokens of the prompt without passages and question, and what one passage's tag adds
    (number 20, the highest a request may ask; its labels count in max_passage_tokens)."""
    empty = count_prompt(answer_messages("", [], []))
    chunk = Chunk(
        id="c", doc_id="d", text="", title="", section="", order=0, char_start=0, char_end=0
    )
    labelled = count_prompt(answer_messages("", [Passage(20, chunk)], []))
    return empty, labelled - empty


def shipped_gguf_counters():
    local = load_config(ROOT / "config" / "local.yaml", environ={}).llm
    for llm in (local, type(local)(**SMOLLM2)):
        path = resolve_gguf(llm.model, str(ROOT / llm.model_dir), llm.sha256)
        tokenizer = load_chat_tokenizer(path)
        yield lambda messages, t=tokenizer: len(t.prompt_ids([m.as_dict() for m in messages]))


def qwen3_counter():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3_TOKENIZER))

    def count(messages):  # as VllmLLM.prompt_ids: the template's own ids
        dicts = [m.as_dict() for m in messages]
        ids = tokenizer.apply_chat_template(
            dicts, tokenize=True, add_generation_prompt=True, return_dict=True
        )["input_ids"]
        return len(ids)

    return count


def test_the_allowances_hold_on_the_shipped_tokenizers():
    for count_prompt in [*shipped_gguf_counters(), qwen3_counter()]:
        fixed, markup = fixed_and_markup(count_prompt)
        assert fixed <= PROMPT_OVERHEAD_TOKENS
        assert markup <= PASSAGE_MARKUP_TOKENS
        # An earlier turn's own markup (role header, end of turn), beside its text.
        turns = [Message("user", ""), Message("assistant", "")] * 32
        with_turns = count_prompt(answer_messages("", [], turns))
        assert with_turns - fixed <= HISTORY_TURN_TOKENS * len(turns)
    assert LABEL_CHARS == 120  # the labels' own tokens are inside max_passage_tokens
