"""A loader worker process: reads parse requests on stdin, writes Documents on stdout.

Frames are an 8-byte big-endian length and a pickle, both ways, between this process and
the ``LoaderPool`` that started it (nothing else writes to these pipes). The worker dies
with its parent (``PR_SET_PDEATHSIG``), so a killed replica leaves no parser running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys
from typing import BinaryIO

from serve_app.errors import MalformedDocumentError, ServeAppError
from serve_app.loaders.base import load_bytes

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    # Not Linux: no such call, and the pool still kills its workers on close.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


def read_frame(stream: BinaryIO) -> object | None:
    header = stream.read(8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "big")
    return pickle.loads(stream.read(size))


def write_frame(stream: BinaryIO, message: object) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(payload).to_bytes(8, "big") + payload)
    stream.flush()


def handle(request: dict) -> tuple[str, object]:
    try:
        return "ok", load_bytes(**request)
    except ServeAppError as error:
        return "error", error
    except Exception as error:  # a parser bug on hostile input is that file's problem
        name = request.get("name", "file")
        return "error", MalformedDocumentError(
            f"{name}: could not be parsed ({type(error).__name__})"
        )


def bound_memory(most_bytes: int) -> None:
    """At most ``most_bytes`` of address space (a parser's runaway allocation is a
    MemoryError, that file's failure) and no core file."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (most_bytes, most_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> int:
    die_with_parent(int(sys.argv[1]))
    if len(sys.argv) > 2:
        bound_memory(int(sys.argv[2]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent; it stops us
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print from a library must not corrupt the reply stream
    while (request := read_frame(requests)) is not None:
        write_frame(replies, handle(request))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
