"""Loaders off the event loop: a small pool of worker processes with a per-file time budget.

A process (not a thread) because a parser stuck in C code holds the GIL: only another
process keeps the event loop, and every other tenant's searches, responsive, and only a
process can be stopped when a file takes too long. A worker over its budget is killed and
replaced by a fresh one on the next file; ``close`` kills them all.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import pickle
import sys
import weakref
from collections.abc import Mapping
from pathlib import Path

import serve_app
from serve_app.errors import InvalidInputError, PayloadTooLargeError, ServiceUnavailableError
from serve_app.schemas import Document

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
_ROOT = str(Path(serve_app.__file__).resolve().parents[1])
_POOLS: weakref.WeakSet[LoaderPool] = weakref.WeakSet()


# What a parser process may see of the replica's environment: where programs, the home and
# temporary folders are, the locale and Python's own settings. Not the cluster's token
# (RAY_AUTH_TOKEN), the JWT secret or any store credential: a parser exploited by a hostile
# file finds none of them.
_WORKER_ENV = ("PATH", "HOME", "TMPDIR", "TZ", "LANG", "LANGUAGE", "VIRTUAL_ENV")
_WORKER_ENV_PREFIXES = ("LC_", "PYTHON")


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in environ.items()
        if key in _WORKER_ENV or key.startswith(_WORKER_ENV_PREFIXES)
    }


class WorkerDied(Exception):
    """The worker exited or closed its pipe in the middle of a file."""


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, max_memory_bytes: int | None = None) -> _Worker:
        env = worker_environment(os.environ)
        # The child imports the same serve_app as this process, wherever that comes from.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))
        limit = [] if max_memory_bytes is None else [str(max_memory_bytes)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "serve_app.loaders.worker", str(os.getpid()), *limit,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        return cls(process)

    async def call(self, request: dict) -> tuple[str, object]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            stdin.write(len(payload).to_bytes(8, "big") + payload)
            await stdin.drain()
            size = int.from_bytes(await stdout.readexactly(8), "big")
            return pickle.loads(await stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as error:
            raise WorkerDied(str(error)) from None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    async def stop(self) -> None:
        self.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait(), 5)


class LoaderPool:
    """Parses uploaded files in up to ``workers`` processes, ``timeout_s`` per file."""

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 60.0,
        max_file_bytes: int | None = None,
        max_chars: int | None = None,
        max_pages: int | None = None,
        max_memory_bytes: int | None = None,
    ) -> None:
        self.workers = workers
        self.max_memory_bytes = max_memory_bytes
        self.timeout_s = timeout_s
        self.max_file_bytes = max_file_bytes
        self.max_chars = max_chars
        self.max_pages = max_pages
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        _POOLS.add(self)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in [*self._idle, *self._busy]]

    async def load(self, data: bytes, name: str) -> Document:
        """The Document in ``data``, or the error naming ``name``: PAYLOAD_TOO_LARGE over
        the byte or character limits, INVALID_INPUT when it cannot be parsed in time."""
        if self.max_file_bytes is not None and len(data) > self.max_file_bytes:
            raise PayloadTooLargeError(
                f"{name}: file is {len(data)} bytes, over the limit of {self.max_file_bytes} "
                "(limits.max_file_bytes)"
            )
        request = {
            "data": data,
            "name": name,
            "max_chars": self.max_chars,
            "max_pages": self.max_pages,
        }
        self._bind_to_running_loop()
        assert self._slots is not None
        async with self._slots:
            for attempt in (1, 2):
                worker = await self._acquire()
                try:
                    status, result = await asyncio.wait_for(worker.call(request), self.timeout_s)
                except TimeoutError:
                    await self._discard(worker)
                    raise InvalidInputError(
                        f"{name}: not parsed within {self.timeout_s:g} s "
                        "(limits.loader_timeout_s); the file was refused"
                    ) from None
                except WorkerDied:
                    await self._discard(worker)
                    if attempt == 2:
                        raise InvalidInputError(
                            f"{name}: the parser crashed on this file"
                        ) from None
                    continue  # a worker killed from outside: one fresh try
                except BaseException:  # cancelled mid-file: its pipes are in an unknown state
                    await self._discard(worker)
                    raise
                self._release(worker)
                if status == "ok":
                    return result  # type: ignore[return-value]
                raise result  # type: ignore[misc]
        raise AssertionError("unreachable")

    def _bind_to_running_loop(self) -> None:
        """Workers' pipes belong to the loop that started them: on another loop (a second
        ``asyncio.run``, a test's own loop) the old ones are killed and new ones started."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self.kill_all()
        self._idle.clear()
        self._busy.clear()
        self._loop = loop
        self._slots = asyncio.Semaphore(self.workers)

    async def _acquire(self) -> _Worker:
        if self._closed:
            raise ServiceUnavailableError("the loader pool is closed")
        while self._idle:
            worker = self._idle.pop()
            if worker.process.returncode is None:
                self._busy.add(worker)
                return worker
        try:
            worker = await asyncio.wait_for(_Worker.start(self.max_memory_bytes), START_TIMEOUT_S)
        except (TimeoutError, OSError) as error:
            raise ServiceUnavailableError(f"no loader worker could start ({error})") from None
        self._busy.add(worker)
        return worker

    def _release(self, worker: _Worker) -> None:
        self._busy.discard(worker)
        if self._closed:
            worker.kill()
        else:
            self._idle.append(worker)

    async def _discard(self, worker: _Worker) -> None:
        self._busy.discard(worker)
        log.warning("killing loader worker %s", worker.process.pid)
        await worker.stop()

    async def close(self) -> None:
        self._closed = True
        workers = [*self._idle, *self._busy]
        self._idle.clear()
        await asyncio.gather(*(w.stop() for w in workers))

    def kill_all(self) -> None:
        """Synchronous last resort (interpreter exit): SIGKILL every worker."""
        for worker in [*self._idle, *self._busy]:
            worker.kill()


def _kill_every_pool() -> None:
    for pool in list(_POOLS):
        pool.kill_all()


atexit.register(_kill_every_pool)
