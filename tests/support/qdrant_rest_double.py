"""A Qdrant server double at the network boundary: Qdrant's REST API on 127.0.0.1, backed by
qdrant-client's local mode (Qdrant's own Python reimplementation of the engine's semantics).

No Qdrant server binary can be had here, and local mode is one process per path, so it cannot
stand for a server that several store replicas (separate processes) share. This double can:
every replica's ``AsyncQdrantClient(url=...)`` talks REST to one shared state, through the
client's real REST transport (request models, status handling, ``UnexpectedResponse``).

It serves the operations the Qdrant backend calls (paths and verbs read from qdrant-client
1.20's ``http/api/*.py``), bodies parsed with the client's own REST models:

- ``GET /`` (the version: ``version``, 1.17.0 unless told);
- collections: ``GET /collections``, ``GET|PUT|PATCH|DELETE /collections/{name}``,
  ``GET /collections/{name}/exists``, ``PUT /collections/{name}/index``;
- aliases: ``GET /aliases``, ``GET /collections/{name}/aliases``, ``POST /collections/aliases``;
- points: ``PUT /collections/{name}/points`` (upsert, with ``update_mode``), ``POST
  .../points`` (retrieve), ``.../points/payload`` (set payload), ``.../points/delete``, ``.../points/scroll``, ``.../points/count``, ``.../points/query/batch``.

Error statuses are the server's (Qdrant >= 1.8): an unknown collection is 404 ``Not found:
Collection `x` doesn't exist!``, creating one that exists is 409, other rejections 400, each
as ``{"status": {"error": ...}, "time": ...}``. Alias semantics are the server's (checked
against ``lib/storage/src/content_manager/alias_mapping.rs``): creating an alias that exists
re-points it, deleting a missing one is not an error. Snapshots are not served (501).
``requests`` records (method, path) of every request. To make concurrent openers race:
``slow_creates_s`` delays every collection creation; ``hold_creates=N`` holds each of the
first N creations until N have arrived (or ``hold_timeout_s`` passes), so N openers in
separate processes, however far apart they start, are all inside creation at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel
from qdrant_client import QdrantClient
from qdrant_client import models as qm

Route = tuple[str, re.Pattern[str], Callable[..., Any]]


class QdrantError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


class QdrantRestDouble:
    def __init__(
        self,
        slow_creates_s: float = 0.0,
        hold_creates: int = 0,
        hold_timeout_s: float = 30.0,
        version: str = "1.17.0",
    ) -> None:
        self.client = QdrantClient(location=":memory:")
        self.version = version
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.slow_creates_s = slow_creates_s
        self.hold_creates = hold_creates
        self.hold_timeout_s = hold_timeout_s
        self.creates_arrived = 0
        self._arrivals = threading.Condition(self.lock)
        self.routes: list[Route] = [
            ("GET", re.compile(r"/collections"), self.collections),
            ("GET", re.compile(r"/aliases"), self.aliases),
            ("POST", re.compile(r"/collections/aliases"), self.update_aliases),
            ("GET", re.compile(r"/collections/(?P<name>[^/]+)"), self.get_collection),
            ("PUT", re.compile(r"/collections/(?P<name>[^/]+)"), self.create_collection),
            ("PATCH", re.compile(r"/collections/(?P<name>[^/]+)"), self.update_collection),
            ("DELETE", re.compile(r"/collections/(?P<name>[^/]+)"), self.delete_collection),
            ("GET", re.compile(r"/collections/(?P<name>[^/]+)/exists"), self.exists),
            ("GET", re.compile(r"/collections/(?P<name>[^/]+)/aliases"), self.collection_aliases),
            ("PUT", re.compile(r"/collections/(?P<name>[^/]+)/index"), self.create_index),
            ("PUT", re.compile(r"/collections/(?P<name>[^/]+)/points"), self.upsert),
            ("POST", re.compile(r"/collections/(?P<name>[^/]+)/points"), self.retrieve),
            ("POST", re.compile(r"/collections/(?P<name>[^/]+)/points/delete"), self.delete),
            ("POST", re.compile(r"/collections/(?P<name>[^/]+)/points/payload"), self.set_payload),
            ("POST", re.compile(r"/collections/(?P<name>[^/]+)/points/scroll"), self.scroll),
            ("POST", re.compile(r"/collections/(?P<name>[^/]+)/points/count"), self.count),
            (
                "POST",
                re.compile(r"/collections/(?P<name>[^/]+)/points/query/batch"),
                self.query_batch,
            ),
        ]
        self._server: ThreadingHTTPServer | None = None

    # -- operations (each runs under the lock: local mode is not thread-safe) --------------
    def collections(self, body: Any) -> Any:
        return self.client.get_collections()

    def aliases(self, body: Any) -> Any:
        return self.client.get_aliases()

    def update_aliases(self, body: Any) -> Any:
        operation = qm.ChangeAliasesOperation.model_validate(body)
        return self.client.update_collection_aliases(operation.actions)

    def get_collection(self, body: Any, name: str) -> Any:
        return self.client.get_collection(name)

    def exists(self, body: Any, name: str) -> Any:
        return {"exists": self.client.collection_exists(name)}

    def collection_aliases(self, body: Any, name: str) -> Any:
        return self.client.get_collection_aliases(name)

    def create_collection(self, body: Any, name: str) -> Any:
        self.creates_arrived += 1
        if self.creates_arrived <= self.hold_creates:
            self._arrivals.notify_all()
            # waiting releases the lock: the others may read, and arrive here, meanwhile
            self._arrivals.wait_for(
                lambda: self.creates_arrived >= self.hold_creates, self.hold_timeout_s
            )
        if self.slow_creates_s:
            self.lock.release()  # others may read (and race) while this creation is slow
            try:
                time.sleep(self.slow_creates_s)
            finally:
                self.lock.acquire()
        spec = qm.CreateCollection.model_validate(body)
        if self.client.collection_exists(name):
            raise QdrantError(409, f"Wrong input: Collection `{name}` already exists!")
        return self.client.create_collection(
            name,
            vectors_config=spec.vectors,
            sparse_vectors_config=spec.sparse_vectors,
            metadata=spec.metadata,
        )

    def update_collection(self, body: Any, name: str) -> Any:
        spec = qm.UpdateCollection.model_validate(body)
        return self.client.update_collection(name, metadata=spec.metadata)

    def delete_collection(self, body: Any, name: str) -> Any:
        return self.client.delete_collection(name)

    def create_index(self, body: Any, name: str) -> Any:
        qm.CreateFieldIndex.model_validate(body)
        self.client.get_collection(name)  # local mode ignores payload indexes, not the name
        return qm.UpdateResult(operation_id=0, status=qm.UpdateStatus.COMPLETED)

    def upsert(self, body: Any, name: str) -> Any:
        points: Any = body.get("points")
        if points is None:
            points = qm.PointsBatch.model_validate(body).batch
        else:
            points = qm.PointsList.model_validate(body).points
        # Qdrant >= 1.17: insert_only skips points that exist, update_only absent ones.
        return self.client.upsert(
            name,
            points=points,
            update_filter=body.get("update_filter"),
            update_mode=body.get("update_mode"),
        )

    def set_payload(self, body: Any, name: str) -> Any:
        spec = qm.SetPayload.model_validate(body)
        try:
            return self.client.set_payload(
                name, payload=spec.payload, points=spec.points or spec.filter
            )
        except KeyError as error:  # local mode's answer for an id it does not hold
            raise QdrantError(404, f"Not found: No point with id {error.args[0]} found") from None

    def retrieve(self, body: Any, name: str) -> Any:
        spec = qm.PointRequest.model_validate(body)
        return self.client.retrieve(
            name,
            spec.ids,
            with_payload=True if spec.with_payload is None else spec.with_payload,
            with_vectors=bool(spec.with_vector),
        )

    def delete(self, body: Any, name: str) -> Any:
        selector: Any = (
            qm.FilterSelector.model_validate(body)
            if "filter" in body
            else qm.PointIdsList.model_validate(body)
        )
        return self.client.delete(name, points_selector=selector)

    def scroll(self, body: Any, name: str) -> Any:
        spec = qm.ScrollRequest.model_validate(body)
        records, offset = self.client.scroll(
            name,
            scroll_filter=spec.filter,
            limit=spec.limit or 10,
            offset=spec.offset,
            with_payload=True if spec.with_payload is None else spec.with_payload,
            with_vectors=bool(spec.with_vector),
        )
        return {"points": _dump(records), "next_page_offset": offset}

    def count(self, body: Any, name: str) -> Any:
        spec = qm.CountRequest.model_validate(body)
        return self.client.count(name, count_filter=spec.filter, exact=spec.exact is not False)

    def query_batch(self, body: Any, name: str) -> Any:
        return self.client.query_batch_points(
            name, qm.QueryRequestBatch.model_validate(body).searches
        )

    # -- HTTP ------------------------------------------------------------------------------
    def handle(self, method: str, path: str, raw: bytes) -> tuple[int, dict]:
        self.requests.append((method, path))
        if (method, path) == ("GET", "/"):  # the server's version, not wrapped in "result"
            return 200, {"title": "qdrant - vector search engine", "version": self.version}
        started = time.perf_counter()
        found = next(
            (
                (op, m)
                for verb, pattern, op in self.routes
                if verb == method and (m := pattern.fullmatch(path))
            ),
            None,
        )
        if found is None:
            return 501, {"status": {"error": f"not served by the double: {method} {path}"}}
        operation, match = found
        try:
            body = json.loads(raw) if raw else {}
            with self.lock:
                result = _dump(operation(body, **match.groupdict()))
        except QdrantError as error:
            return error.status, {"status": {"error": str(error)}, "time": 0.0}
        except ValueError as error:  # local mode's rejections (pydantic's errors included)
            text = str(error)
            missing = re.fullmatch(r"Collection (\S+) not found", text)
            if missing:
                message = f"Not found: Collection `{missing.group(1)}` doesn't exist!"
                return 404, {"status": {"error": message}, "time": 0.0}
            return 400, {"status": {"error": f"Wrong input: {text}"}, "time": 0.0}
        except Exception as error:  # anything else is the server's fault, as a status
            return 500, {"status": {"error": f"Service internal error: {error}"}, "time": 0.0}
        return 200, {"result": result, "status": "ok", "time": time.perf_counter() - started}

    def start(self) -> str:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, payload = double.handle(self.command, urlsplit(self.path).path, raw)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                return None

        class Server(ThreadingHTTPServer):
            # socketserver's default backlog is 5: store replicas opening dozens of
            # connections at once would find some reset (Qdrant's own server takes 2048).
            request_queue_size = 1024

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.client.close()
