"""A log handler that never stalls the event loop on a slow reader and loses no line on a
kill: each line is written at once, in one ``write``, where the stream can take it without
waiting (a file always can; a pipe with room for it); when it cannot (a log collector that
stopped reading the pipe), the line goes to a writer thread that waits for the reader, and
so do the lines after it until that thread has caught up (the order is kept). The thread
holds at most ``max_pending`` lines; past that, new lines are dropped and counted in
``dropped`` (written as one line once the reader is back)."""

from __future__ import annotations

import collections
import json
import logging
import os
import select
import threading
import time
from typing import TextIO


class NonBlockingStreamHandler(logging.Handler):
    def __init__(self, stream: TextIO, max_pending: int = 10_000) -> None:
        super().__init__()
        self.stream = stream
        self.max_pending = max_pending
        self.flush_timeout_s = 5.0
        self.dropped = 0
        self._pending: collections.deque[bytes] = collections.deque()
        self._wake = threading.Condition()
        self._writer: threading.Thread | None = None

    def _fd(self) -> int | None:
        try:
            return self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None  # not a file (a test's StringIO): written as a plain stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "replace")
        except Exception:
            self.handleError(record)
            return
        fd = self._fd()
        if fd is None:
            self.stream.write(line.decode())
            self.stream.flush()
            return
        with self._wake:
            if not self._pending and len(line) <= select.PIPE_BUF and _writable(fd):
                self.stream.flush()  # what others wrote through the stream's buffer first
                os.write(fd, line)  # at most PIPE_BUF bytes: one whole write, never partial
                return
            if len(self._pending) >= self.max_pending:
                self.dropped += 1
                return
            self._pending.append(line)
            self._start_writer()
            self._wake.notify()

    def flush(self) -> None:
        """Waits (at most ``flush_timeout_s``) for the writer thread to write what it holds:
        logging's shutdown calls this when the process exits, off the event loop."""
        deadline = time.monotonic() + self.flush_timeout_s
        with self._wake:
            while self._pending and self._writer is not None and self._writer.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._wake.wait(min(left, 0.05))

    def _start_writer(self) -> None:
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._drain, name="log-writer", daemon=True)
            self._writer.start()

    def _drain(self) -> None:
        fd = self._fd()
        assert fd is not None
        while True:
            with self._wake:
                while not self._pending:
                    self._wake.wait()
                line = self._pending[0]
            _write_all(fd, line)  # blocks this thread, not the loop
            with self._wake:
                self._pending.popleft()
                self._wake.notify_all()
                if not self._pending and self.dropped:
                    message = f"{self.dropped} log lines dropped: the log reader fell behind"
                    note = json.dumps({"level": "WARNING", "message": message}) + "\n"
                    self.dropped = 0
                    self._pending.append(note.encode())


def _writable(fd: int) -> bool:
    try:
        _, ready, _ = select.select([], [fd], [], 0)
    except (OSError, ValueError):
        return False
    return bool(ready)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
