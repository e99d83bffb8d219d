"""One process owns an embedded index: an advisory lock on a file beside the shard.

The engine's own lock (its write-ahead log) is taken only part-way through opening a shard,
after the opener has already read, and may have rewritten, files the owner is using; a
second process opening a served index broke the owner's writes. So every opener takes this
lock first and touches nothing when another process holds it. The lock is the kernel's
(``flock``): it goes with its process, however that process ends, so no stale lock is left
to clear. The file names the holder (pid, host, command and, for a service, its URL), so
the refusal can say which process holds the index and how to reach it instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

from serve_app.errors import IndexInUseError

OWNER_FILE = "owner.lock"
OWNER_URL_ENV = "SERVE_APP_OWNER_URL"
"""Set by a process that serves the index (the local run): the URL other commands should use."""
_POLL_S = 0.2


def describe_this_process() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:3])),
        "url": os.environ.get(OWNER_URL_ENV) or None,
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def read_holder(directory: Path) -> dict[str, Any] | None:
    """What the lock file says of its holder (None when absent or unreadable)."""
    try:
        text = (directory / OWNER_FILE).read_text()
        holder = json.loads(text)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def in_use_message(directory: Path, holder: dict[str, Any] | None) -> str:
    holder = holder or {}
    url = holder.get("url")
    where = f"pid {holder.get('pid')} on {holder.get('host')}"
    if url:
        who = f"the service running at {url} ({where})"
    elif holder:
        who = f"{holder.get('command') or 'a process'} ({where})"
    else:
        who = "another process"
    message = f"the embedded index at {directory} is in use by {who}; nothing was opened."
    if url:
        message += (
            f" Go through that service instead: serve-app --url {url} ingest|search|inspect, "
            "or its HTTP API (POST /v1/documents, /v1/search, GET /v1/admin/inspect)."
        )
    return message + " Stop it to use the index directly."


class IndexOwnership:
    """The lock on ``directory``'s index, held from ``acquire`` until ``release``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lock, waiting up to ``wait_s`` for a holder to go (a replica that is being
        replaced); IndexInUseError naming the holder otherwise."""
        if self._file is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = open(self.directory / OWNER_FILE, "a+")  # noqa: SIM115 - held while owned
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    holder = read_holder(self.directory)
                    raise IndexInUseError(in_use_message(self.directory, holder)) from None
                time.sleep(_POLL_S)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(describe_this_process()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            self._file.seek(0)
            self._file.truncate()
            self._file.flush()
        self._file.close()  # closing the descriptor drops the lock
        self._file = None
