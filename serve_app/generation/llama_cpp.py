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
import time
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
# A metrics request goes through llama.cpp's task queue like a generation: an engine whose
# loop does not answer one within this is wedged (Serve's health check replaces the replica).
HEALTH_TIMEOUT_S = 10.0


def request_body(messages: list[Message], params: GenerationParams, stream: bool) -> dict:
    """The OpenAI-style chat request for ``messages`` (llama.cpp's and vLLM's servers)."""
    body: dict[str, Any] = {
        "messages": [m.as_dict() for m in messages],
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "stream": stream,
    }
    body.update(params.sampling_options())
    if stream:
        # A chunk after each prompt batch: the stream's callback can stop a generation while
        # llama.cpp still reads its prompt (llm.prompt_batch_tokens bounds how long that takes).
        body["return_progress"] = True
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
    """The whole prompt's tokens: llama.cpp's ``prompt_n`` counts only those it did not take
    from its prompt cache (``cache_n``)."""
    if usage:
        return Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
    if timings:
        prompt = int(timings.get("cache_n", 0)) + int(timings.get("prompt_n", 0))
        return Usage(prompt, int(timings.get("predicted_n", 0)))
    return Usage()


class _Calls:
    """How many pool threads are inside llama.cpp right now (a context manager)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inside = 0

    def __enter__(self) -> None:
        with self._lock:
            self.inside += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self.inside -= 1


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
            return True  # llama.cpp stops this generation here, also while reading the prompt
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
            with self.owner.calls:
                self.owner.server.handle_chat_completions(body, self._on_chunk)
            if self._stopped.is_set():
                self.owner.wait_until_let_go()
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
        params.n_batch = params.n_ubatch = config.prompt_batch_tokens
        params.cpuparams.n_threads = config.threads
        params.cpuparams_batch.n_threads = config.threads
        # No busy-waiting between a step's threads: on shared cores a spinning thread steals
        # the CPU from the one it waits for (measured here, SmolLM2: 2 threads polling 3.5
        # tokens/s, 1 thread without polling 46-69).
        params.cpuparams.poll = 0
        params.cpuparams_batch.poll = 0
        params.verbosity = -1
        params.warmup = False
        params.endpoint_metrics = True  # the engine's own count of requests: engine_requests
        self.server = xllamacpp.Server(params)
        self.pool = ThreadPoolExecutor(config.parallel, thread_name_prefix="llama.cpp")
        self.slots = GenerationSlots(config.parallel, config.max_queued, config.retry_after_s)
        self.calls = _Calls()
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
        return self.tokenizer.count([self.guard.neutralise(text) for text in texts])

    async def as_read(self, texts: list[str]) -> list[str]:
        return [self.guard.neutralise(text) for text in texts]

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        guarded = [m.as_dict() for m in self.guard.messages(messages)]
        return len(self.tokenizer.prompt_ids(guarded))

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        """A stream read to its end: a caller that gives up (a deadline, a cancellation)
        stops the generation, and the slot is free only once llama.cpp has let go of it."""
        stream = await self.open_stream(messages, params)
        try:
            text = "".join([delta async for delta in stream])
        finally:
            await stream.aclose()
        return Completion(text, stream.finish_reason or "stop", stream.usage)

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

    def _engine_requests(self) -> int:
        text = self.server.handle_metrics()
        return sum(
            int(float(line.split()[-1]))
            for line in text.splitlines()
            if line.startswith(("llamacpp:requests_processing", "llamacpp:requests_deferred"))
        )

    async def engine_requests(self) -> int:
        """Requests llama.cpp itself is processing or has deferred (its own metrics), to
        check that the slots held here never drift from what the engine does."""
        return await asyncio.get_running_loop().run_in_executor(None, self._engine_requests)

    def wait_until_let_go(self, limit_s: float = 2.0) -> None:
        """After a stopped call returned: leaving it only queues the cancel in llama.cpp's
        loop, so wait (on the pool thread) until the engine processes no more requests than
        the calls still inside it, and only then give the slot back."""
        until = time.monotonic() + limit_s
        while self._engine_requests() > self.calls.inside and time.monotonic() < until:
            time.sleep(0.01)

    def stats(self) -> dict[str, int]:
        return {
            **self.slots.stats(),
            "tokens_generated": self.tokens_generated,
            "streams_stopped": self.streams_stopped,
        }

    async def check_health(self) -> None:
        """Raises ServiceUnavailableError once the engine is stopped, or when its loop does
        not answer a metrics request within ``HEALTH_TIMEOUT_S``."""
        self._check_open()
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                await self.engine_requests()
        except TimeoutError:
            raise ServiceUnavailableError(
                f"the llama.cpp engine did not answer within {HEALTH_TIMEOUT_S:g}s"
            ) from None

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)


def _with_seed(params: GenerationParams, seed: int) -> GenerationParams:
    from dataclasses import replace

    return replace(params, seed=seed)
