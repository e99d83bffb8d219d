"""Device and dtype choice for the transformers backends, with the fail-fast GPU rule."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from serve_app.encoders.token_batches import warmup_shapes
from serve_app.errors import ConfigError

log = logging.getLogger(__name__)

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


def pad_multiple(configured: int | None, device: torch.device) -> int:
    """Batch widths' multiple: as configured, else 8 on a GPU (a bounded set of shapes for the
    warm-up to cover; tensor-core sizes) and 1 on a CPU (padding is pure cost there)."""
    if configured is not None:
        return configured
    return 8 if device.type == "cuda" else 1


@dataclass(frozen=True)
class WarmupReport:
    """What a model's start-up warm-up ran: (rows, width) shapes and each one's seconds."""

    shapes: list[tuple[int, int]]
    seconds: list[float]

    @property
    def total_s(self) -> float:
        return sum(self.seconds)


def warm_up(
    name: str,
    mode: bool | str,
    device: torch.device,
    shapes: list[tuple[int, int]],
    run: Callable[[int, int], object],
) -> WarmupReport | None:
    """Runs ``run(rows, width)`` for each shape when ``mode`` asks for it (true; ``auto``: on
    a GPU), each finished on the device before the next, and logs what it took."""
    if mode is False or (mode == "auto" and device.type != "cuda"):
        return None
    seconds = []
    with torch.inference_mode():
        for rows, width in shapes:
            start = time.perf_counter()
            run(rows, width)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - start)
    report = WarmupReport(shapes=list(shapes), seconds=seconds)
    log.info(
        "%s warm-up: %d batch shapes in %.2f s on %s before taking requests "
        "(first %.1f ms, slowest %.1f ms, last %.1f ms)",
        name,
        len(shapes),
        report.total_s,
        device,
        seconds[0] * 1e3,
        max(seconds) * 1e3,
        seconds[-1] * 1e3,
    )
    return report


def synthetic_batch(rows: int, width: int, token_id: int, pad_id: int):
    """Token ids and attention mask for a warm-up batch: every row full but the last of a
    multi-row batch, which is half padding, so the padded code paths run too."""
    input_ids = torch.full((rows, width), token_id, dtype=torch.long)
    mask = torch.ones((rows, width), dtype=torch.long)
    if rows > 1:
        input_ids[-1, width // 2 + 1 :] = pad_id
        mask[-1, width // 2 + 1 :] = 0
    return input_ids, mask


_cudnn_attention: dict[str, bool] = {}  # this process's choice, by the model that made it


def configure_attention(name: str, cudnn: bool, device: torch.device) -> None:
    """Allows or forbids PyTorch's cuDNN attention kernel on a GPU (``cudnn_attention``).
    The switch is process-wide, so a second model asking otherwise is a configuration error."""
    if device.type != "cuda":
        return
    for other, chosen in _cudnn_attention.items():
        if other != name and chosen != cudnn:
            raise ConfigError(
                f"{name}.cudnn_attention is {cudnn} but {other}.cudnn_attention is {chosen}; "
                "PyTorch's attention switch is per process and these models share one"
            )
    _cudnn_attention[name] = cudnn
    torch.backends.cuda.enable_cudnn_sdp(cudnn)


class TorchModelSettings(Protocol):
    """What ``start_up`` reads of a transformers model's configuration section."""

    cudnn_attention: bool
    warmup: Literal["auto"] | bool
    pad_to_multiple_of: int | None
    max_length: int
    max_batch_tokens: int
    batch_size: int


def start_up(
    name: str,
    config: TorchModelSettings,
    device: torch.device,
    run: Callable[[int, int], object],
) -> tuple[int, WarmupReport | None]:
    """A loaded model's attention kernels and batch-width multiple on ``device``, and its
    warm-up over the shapes its token budget allows (``run(rows, width)`` each), when its
    configuration asks for one."""
    configure_attention(name, config.cudnn_attention, device)
    multiple = pad_multiple(config.pad_to_multiple_of, device)
    shapes = warmup_shapes(config.max_length, config.max_batch_tokens, config.batch_size, multiple)
    return multiple, warm_up(name, config.warmup, device, shapes, run)
