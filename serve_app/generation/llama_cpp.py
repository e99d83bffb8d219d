"""The CPU LLM: a GGUF model on llama.cpp's own server loop (xllamacpp, a prebuilt wheel).

llama.cpp runs ``llm.parallel`` slots with continuous batching in its own threads; each call
(``handle_chat_completions``) blocks the calling thread without the GIL, so calls run on a
pool of ``parallel`` threads and the event loop never waits. A streamed call delivers each
token to a callback on that thread; the callback hands it to the event loop and returns True
once the stream is closed, which stops llama.cpp's generation at that token.

Structured output: ``response_format`` with a JSON schema, which llama.cpp compiles into a
grammar, so the text always parses against the schema.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from serve_app.config import LlmConfig
from serve_app.errors import ConfigError, InvalidInputError, ServiceUnavailableError
from serve_app.generation.base import (
    Completion,
    GenerationParams,
    Message,
    Usage,
)
from serve_app.generation.gguf_tokenizer import load_chat_tokenizer
from serve_app.generation.limits import GenerationSlots
from serve_app.generation.model_files import resolve_gguf
from serve_app.generation.special_tokens import SpecialTokenGuard

log = logging.getLogger(__name__)

_END = object()


def request_body(messages: list[Message], params: GenerationParams, stream: bool) -> dict:
    """The OpenAI-style chat request for ``messages`` (llama.cpp's and vLLM's servers)."""
    body: dict[str, Any] = {
        "messages": [m.as_dict() for m in messages],
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "stream": stream,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = list(params.stop)
    if params.json_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": params.json_schema, "strict": True},
        }
    return body


def _raise_for_error(answer: dict) -> None:
    error = answer.get("error")
    if error is None and "code" in answer and "choices" not in answer:
        error = answer
    if error is None:
        return
    message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    code = error.get("code") if isinstance(error, dict) else None
    if code == 400:
        raise InvalidInputError(f"the model refused the request: {message}")
    raise ServiceUnavailableError(f"llama.cpp failed: {message}")


def _usage(timings: dict | None, usage: dict | None) -> Usage:
    if usage:
        return Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
    if timings:
        return Usage(int(timings.get("prompt_n", 0)), int(timings.get("predicted_n", 0)))
    return Usage()


class LlamaCppStream:
    """One streamed generation running on a pool thread (see the module docstring)."""

    def __init__(self, owner: LlamaCppLLM, body: dict) -> None:
        self.owner = owner
        self.usage = Usage()
        self.finish_reason: str | None = None
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._stopped = threading.Event()
        self._done = self._loop.run_in_executor(owner.pool, self._run, body)
        self._done.add_done_callback(lambda _: owner.slots.release())

    def _put(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _on_chunk(self, chunk: dict) -> bool | None:
        if self._stopped.is_set():
            return True  # llama.cpp stops this generation here
        if "error" in chunk or ("code" in chunk and "choices" not in chunk):
            self._put(chunk)
            return True
        choices = chunk.get("choices") or [{}]
        text = (choices[0].get("delta") or {}).get("content")
        if text:
            self.owner.tokens_generated += 1
            self._put(text)
        reason = choices[0].get("finish_reason")
        if reason:
            self.finish_reason = reason
            self.usage = _usage(chunk.get("timings"), chunk.get("usage"))
        return None

    def _run(self, body: dict) -> None:
        try:
            self.owner.server.handle_chat_completions(body, self._on_chunk)
        except Exception as error:  # the engine's own failure, reported to the reader
            self._put({"error": {"message": f"{type(error).__name__}: {error}"}})
        finally:
            self._put(_END)

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, dict):
                _raise_for_error(item)
            yield item

    async def aclose(self) -> None:
        if not self._done.done():
            self.owner.streams_stopped += 1
        self._stopped.set()
        # Returns once llama.cpp has left the call: nothing is generated after this.
        await asyncio.shield(self._done)


class LlamaCppLLM:
    """``llm.backend: llama.cpp``. Raises ConfigError at start for a device other than the
    CPU (this wheel is a CPU build), a model file that fails its pin, or xllamacpp missing."""

    def __init__(self, config: LlmConfig) -> None:
        if config.device != "cpu":
            raise ConfigError(
                f"llm.device is {config.device!r} but the llama.cpp backend runs on the CPU "
                "(the xllamacpp wheel is a CPU build); set llm.device: cpu, or llm.backend: vllm "
                "for a GPU"
            )
        try:
            import xllamacpp
        except ImportError as error:
            raise ConfigError(
                f"llm.backend llama.cpp needs xllamacpp ({error}); install the llm extra: "
                "pip install 'serve-app[llm]'"
            ) from None
        self.config = config
        self.path = resolve_gguf(config.model, config.model_dir, config.sha256)
        self.model_id = config.model
        self.tokenizer = load_chat_tokenizer(self.path)
        self.guard = SpecialTokenGuard(self.tokenizer.special_tokens)
        params = xllamacpp.CommonParams()
        params.model.path = str(self.path)
        # llama.cpp divides the context among its slots: each generation gets context_tokens.
        params.n_ctx = config.context_tokens * config.parallel
        params.n_parallel = config.parallel
        params.cpuparams.n_threads = config.threads
        params.cpuparams_batch.n_threads = config.threads
        # No busy-waiting between a step's threads: on shared cores a spinning thread steals
        # the CPU from the one it waits for (measured here, SmolLM2: 2 threads polling 3.5
        # tokens/s, 1 thread without polling 46-69).
        params.cpuparams.poll = 0
        params.cpuparams_batch.poll = 0
        params.verbosity = -1
        params.warmup = False
        self.server = xllamacpp.Server(params)
        self.pool = ThreadPoolExecutor(config.parallel, thread_name_prefix="llama.cpp")
        self.slots = GenerationSlots(config.parallel, config.max_queued, config.retry_after_s)
        self.tokens_generated = 0  # every token handed to a reader, over the engine's life
        self.streams_stopped = 0  # generations their reader closed while they still ran
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceUnavailableError("the LLM engine is stopped")

    def _params(self, params: GenerationParams) -> GenerationParams:
        return params if params.seed is not None else _with_seed(params, self.config.seed)

    def _body(self, messages: list[Message], params: GenerationParams, stream: bool) -> dict:
        return request_body(self.guard.messages(messages), self._params(params), stream)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return self.tokenizer.count(texts)

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        guarded = [m.as_dict() for m in self.guard.messages(messages)]
        return len(self.tokenizer.prompt_ids(guarded))

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        self._check_open()
        await self.slots.acquire()
        try:
            body = self._body(messages, params, stream=False)
            answer = await asyncio.get_running_loop().run_in_executor(
                self.pool, self.server.handle_chat_completions, body
            )
        finally:
            self.slots.release()
        _raise_for_error(answer)
        choice = answer["choices"][0]
        usage = _usage(answer.get("timings"), answer.get("usage"))
        self.tokens_generated += usage.completion_tokens
        return Completion(choice["message"].get("content") or "", choice["finish_reason"], usage)

    async def open_stream(
        self, messages: list[Message], params: GenerationParams
    ) -> LlamaCppStream:
        self._check_open()
        await self.slots.acquire()
        try:
            return LlamaCppStream(self, self._body(messages, params, stream=True))
        except BaseException:
            self.slots.release()
            raise

    def stats(self) -> dict[str, int]:
        return {
            **self.slots.stats(),
            "tokens_generated": self.tokens_generated,
            "streams_stopped": self.streams_stopped,
        }

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)


def _with_seed(params: GenerationParams, seed: int) -> GenerationParams:
    from dataclasses import replace

    return replace(params, seed=seed)
