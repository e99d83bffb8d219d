"""The vllm-http dense backend against a real vLLM OpenAI-compatible server (vLLM on CPU) on
127.0.0.1, started here on a free port and always stopped."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from serve_app.config import DenseConfig
from serve_app.errors import ConfigError, ServiceUnavailableError
from serve_app.ports import free_port
from tests.conftest import require_vllm

pytestmark = pytest.mark.vllm
require_vllm()

TASK = "Given a claim, retrieve abstracts that support or refute it"
SERVED = "tiny-qwen3"
START_TIMEOUT_S = 240
DOCUMENTS = [
    "Aspirin reduces the risk of heart attack in adults with prior cardiovascular events.",
    "short",
    "Mitochondria produce ATP through oxidative phosphorylation. " * 12,
]
QUERIES = ["aspirin heart attack", "what makes ATP"]


@pytest.fixture(scope="module")
def server_url(tiny_qwen3_dir, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_qwen3_dir), "--served-model-name", SERVED,
        "--runner", "pooling", "--convert", "embed",
        "--dtype", "float32", "--max-model-len", "128", "--enforce-eager",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited ({process.returncode}):\n{_tail(log_path)}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not ready in {START_TIMEOUT_S}s:\n{_tail(log_path)}")
            time.sleep(1)
        yield url
    finally:
        _stop(process)


def _tail(path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's whole process group (it has an engine child), then SIGKILL."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # the engine child may outlive its parent
        os.killpg(process.pid, signal.SIGKILL)


def config(model_dir, url: str, **overrides) -> DenseConfig:
    base = {
        "model": str(model_dir),
        "pooling": "last_token",
        "append_token": "<|endoftext|>",
        "query_instruction": TASK,
        "max_length": 64,
        "batch_size": 2,  # several requests per call, sent concurrently
        "http": {"url": url, "served_model": SERVED, "retries": 1, "retry_backoff_s": 0.05},
    }
    return DenseConfig(**{**base, "backend": "vllm-http", **overrides})


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def client(tiny_qwen3_dir, server_url):
    from serve_app.encoders.dense_vllm_http import VllmHttpDenseEncoder

    return VllmHttpDenseEncoder(config(tiny_qwen3_dir, server_url))


@pytest.fixture(scope="module")
def reference(tiny_qwen3_dir):
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder

    return TransformersDenseEncoder(config(tiny_qwen3_dir, "unused", backend="transformers"))


async def test_documents_and_instructed_queries_agree_with_transformers(client, reference):
    assert client.dim == 64
    documents, stats = await client.embed_formatted(DOCUMENTS)
    assert documents.dtype == np.float32 and stats["model_batches"] == 2
    assert cosines(documents, reference.encode(DOCUMENTS)).min() >= 0.9999
    queries = await client.embed_queries(QUERIES)
    assert cosines(queries, reference.encode_queries_sync(QUERIES)).min() >= 0.9999
    assert cosines(queries, await client.embed_documents(QUERIES)).max() < 0.9999


async def test_matryoshka_output_dim(tiny_qwen3_dir, server_url, reference):
    from serve_app.encoders.dense_vllm_http import VllmHttpDenseEncoder

    short = VllmHttpDenseEncoder(config(tiny_qwen3_dir, server_url, output_dim=32))
    vectors = await short.embed_documents(DOCUMENTS)
    full = reference.encode(DOCUMENTS)[:, :32]
    assert short.dim == 32 and cosines(vectors, full).min() >= 0.9999
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    await short.aclose()


def test_unknown_served_model_is_a_config_error(tiny_qwen3_dir, server_url):
    from serve_app.encoders.dense_vllm_http import VllmHttpDenseEncoder

    bad = config(tiny_qwen3_dir, server_url)
    bad.http.served_model = "no-such-model"
    with pytest.raises(ConfigError, match=r"HTTP 404 for model 'no-such-model'.*served_model"):
        VllmHttpDenseEncoder(bad)


def test_unreachable_server_fails_at_start(tiny_qwen3_dir):
    from serve_app.encoders.dense_vllm_http import VllmHttpDenseEncoder

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceUnavailableError, match=r"unreachable.*check dense.http.url"):
        VllmHttpDenseEncoder(config(tiny_qwen3_dir, url))


async def test_lost_server_is_retried_then_unavailable(tiny_qwen3_dir, server_url):
    from serve_app.encoders.dense_vllm_http import VllmHttpDenseEncoder

    encoder = VllmHttpDenseEncoder(config(tiny_qwen3_dir, server_url))
    encoder.url = f"http://127.0.0.1:{free_port()}/v1/embeddings"  # the server went away
    started = time.perf_counter()
    with pytest.raises(ServiceUnavailableError, match=r"failed after 2 attempts: ConnectError"):
        await encoder.embed_documents(["x"])
    assert time.perf_counter() - started < 5
    await encoder.aclose()
