"""The LLM protocol: chat completion, streaming, and output constrained by a JSON schema.

Async like the encoder protocols, so a Ray Serve handle is one more implementation
(``deployments/replicas/handles.py``). Backends register by name (``llm.backend``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from serve_app.catalog import Catalog
from serve_app.schemas import Sampling

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class GenerationParams:
    """``json_schema``: the output must be one JSON value of this schema (llama.cpp's
    grammar from the schema; vLLM's structured outputs), so it always parses."""

    max_tokens: int = 256
    temperature: float = 0.2
    json_schema: dict[str, Any] | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # None: the engine's default.
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def sampling_options(self) -> dict[str, Any]:
        """The optional sampling settings that are set, by the name both engines use."""
        names = ("seed", "top_p", "top_k", "presence_penalty", "frequency_penalty")
        options = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        return {**options, **({"stop": list(self.stop)} if self.stop else {})}


def generation_params(
    sampling: Sampling | None, *, max_tokens: int, temperature: float
) -> GenerationParams:
    """An answer's parameters: the request's ``sampling`` over the configured defaults."""
    if sampling is None:
        return GenerationParams(max_tokens=max_tokens, temperature=temperature)
    return GenerationParams(
        max_tokens=max_tokens,
        temperature=temperature if sampling.temperature is None else sampling.temperature,
        stop=tuple(sampling.stop or ()),
        seed=sampling.seed,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
    )


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Completion:
    text: str
    finish_reason: str
    usage: Usage = field(default_factory=Usage)


@runtime_checkable
class TokenStream(Protocol):
    """An admitted generation: iterating yields text deltas as the model writes them;
    ``usage`` and ``finish_reason`` are set once it ends. ``aclose`` stops the generation
    (no token is produced after it returns); it is safe to call at any time, more than once."""

    usage: Usage
    finish_reason: str | None

    def __aiter__(self) -> AsyncIterator[str]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LLM(Protocol):
    model_id: str

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        """The whole answer. OverloadedError when no generation slot can be had soon."""
        ...

    async def open_stream(self, messages: list[Message], params: GenerationParams) -> TokenStream:
        """Waits for a generation slot (OverloadedError when every slot is taken and the
        queue is full), starts the generation and returns its stream."""
        ...

    async def count_tokens(self, texts: list[str]) -> list[int]:
        """The tokens of each text as the engine reads it inside a message: after the
        special-token guard (``special_tokens.py``), split by the model's tokenizer."""
        ...

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        """The tokens of the templated prompt of ``messages`` as the engine will read it."""
        ...

    async def as_read(self, texts: list[str]) -> list[str]:
        """Each text as the engine reads it inside a message: after the special-token
        guard (``special_tokens.py``), which turns control text into a visible marker."""
        ...


@runtime_checkable
class ServedLLM(LLM, Protocol):
    """What the LLM Serve deployment needs of an engine it holds: its admission counts, its
    health (ServiceUnavailableError once the engine is stopped or dead), and a close."""

    def stats(self) -> dict[str, int]: ...

    async def check_health(self) -> None: ...

    def close(self) -> None: ...


LLM_BACKENDS: Catalog[LLM] = Catalog("LLM backend", "llm.backend")
