"""Device and dtype choice for the transformers backends, with the fail-fast GPU rule."""

from __future__ import annotations

import threading

import torch

from serve_app.errors import ConfigError

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str, field: str) -> torch.device:
    """The torch device for ``device``; a CUDA device without a GPU is an error, never a fallback."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"{field} is {device!r} but no CUDA GPU is visible to this process; "
            f"set {field}: cpu to run on the CPU explicitly"
        )
    return torch.device(device)


def resolve_dtype(dtype: str) -> torch.dtype:
    return _DTYPES[dtype]


def to_device(device: torch.device, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Host tensors onto ``device``. On a GPU through pinned memory, asynchronously: the copy
    overlaps the host's next work instead of stalling the worker thread on each tensor."""
    if device.type != "cuda":
        return tensors
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in tensors)


class ModelLock:
    """Serialises calls into an engine that cannot run two at once (vLLM's offline ``LLM``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
