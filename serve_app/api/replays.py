"""Streamed answers a client can reconnect to (``Last-Event-ID``), instead of asking again.

Each event of a streamed ``/v1/answer`` carries ``id: <answer id>:<n>``. The answer runs in
a task of its own that records its encoded events; the response follows the recording. When
the client goes away the answer keeps running for ``answer.resume_s`` (it is cancelled, and
its generation with it, if nobody follows it by then), and a request that carries the same
body and ``Last-Event-ID`` from the same principal follows it from event ``n + 1``: what was
sent is not generated again. A finished answer is kept as long. An id this replica does not
hold (expired, another principal's or body's, another ingress replica's) is a 410
``ANSWER_GONE``: asking again without the header starts a new answer.

Kept in the ingress process: with several ingress replicas a reconnect reaches the one that
holds the answer only where the proxy routes a client to the same replica."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from serve_app.errors import ServeAppError
from serve_app.pipelines.answer_events import AnswerEvent, Heartbeat

EVENT_ID = re.compile(r"^(ans_[A-Za-z0-9_-]{16}):(\d{1,6})$")


class AnswerGoneError(ServeAppError):
    """A ``Last-Event-ID`` for an answer this replica no longer holds."""

    code = "ANSWER_GONE"
    status = 410


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class Recording:
    """One answer's encoded events, numbered from 1, and whether it ended."""

    def __init__(self, answer_id: str, owner: str, body_hash: str) -> None:
        self.answer_id = answer_id
        self.owner = owner
        self.body_hash = body_hash
        self.events: list[bytes] = []
        self.ended = False
        self.followers = 0
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.expiry: asyncio.TimerHandle | None = None

    def event_id(self, number: int) -> str:
        return f"{self.answer_id}:{number}"

    def _append(self, data: bytes) -> None:
        self.events.append(data)
        self.changed.set()
        self.changed = asyncio.Event()


class Replays:
    """The recordings of this process, at most ``max_answers`` (the oldest ended one goes
    first), each kept ``keep_s`` after it ended or its last follower left."""

    def __init__(self, keep_s: float, max_answers: int = 256) -> None:
        self.keep_s = keep_s
        self.max_answers = max_answers
        self._held: OrderedDict[str, Recording] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def start(
        self,
        owner: str,
        body: Any,
        events: AsyncIterator[AnswerEvent | Heartbeat],
        encode: Callable[[AnswerEvent, str], bytes],
    ) -> Recording:
        """Records ``events`` in a task of its own (heartbeats are not recorded)."""
        answer_id = "ans_" + secrets.token_urlsafe(12)
        recording = Recording(answer_id, owner, fingerprint(body))

        async def record() -> None:
            try:
                async for event in events:
                    if not isinstance(event, Heartbeat):
                        number = len(recording.events) + 1
                        recording._append(encode(event, recording.event_id(number)))
            finally:
                await events.aclose()  # type: ignore[attr-defined]
                recording.ended = True
                recording.changed.set()
                if recording.followers == 0:
                    self._expire_later(recording)

        recording.task = asyncio.ensure_future(record())
        self._held[answer_id] = recording
        self._evict()
        return recording

    def find(self, last_event_id: str, owner: str, body: Any) -> tuple[Recording, int]:
        """The recording ``last_event_id`` names and the number after which to follow it;
        AnswerGoneError unless this principal asked it with this body and it is held."""
        match = EVENT_ID.match(last_event_id.strip())
        recording = self._held.get(match.group(1)) if match else None
        if (
            match is None
            or recording is None
            or recording.owner != owner
            or recording.body_hash != fingerprint(body)
            or int(match.group(2)) > len(recording.events)
        ):
            raise AnswerGoneError(
                "this answer is no longer held here (answer.resume_s); ask again without "
                "Last-Event-ID for a new one"
            )
        return recording, int(match.group(2))

    async def follow(
        self, recording: Recording, after: int, heartbeat_s: float
    ) -> AsyncIterator[bytes | Heartbeat]:
        """The recording's events after number ``after`` as they come, a ``Heartbeat`` when
        ``heartbeat_s`` passes without one. Leaving early starts the answer's expiry."""
        recording.followers += 1
        if recording.expiry is not None:
            recording.expiry.cancel()
            recording.expiry = None
        sent = after
        try:
            while True:
                if sent < len(recording.events):
                    sent += 1
                    yield recording.events[sent - 1]
                    continue
                if recording.ended:
                    return
                changed = recording.changed
                try:
                    async with asyncio.timeout(heartbeat_s):
                        await changed.wait()
                except TimeoutError:
                    yield Heartbeat()
        finally:
            recording.followers -= 1
            if recording.followers == 0:
                self._expire_later(recording)

    def _expire_later(self, recording: Recording) -> None:
        loop = asyncio.get_running_loop()
        if recording.expiry is not None:
            recording.expiry.cancel()
        recording.expiry = loop.call_later(self.keep_s, self._expire, recording)

    def _expire(self, recording: Recording) -> None:
        if recording.followers:
            return
        if recording.task is not None and not recording.task.done():
            recording.task.cancel()  # nobody came back: the generation stops
        self._held.pop(recording.answer_id, None)

    def _evict(self) -> None:
        ended = [r for r in self._held.values() if r.ended and not r.followers]
        while len(self._held) > self.max_answers and ended:
            self._expire(ended.pop(0))
