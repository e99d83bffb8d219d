"""A test double of the Hugging Face Hub at the network boundary: a local HTTP server that
``huggingface_hub`` reaches through ``HF_ENDPOINT``.

It serves the endpoints ``snapshot_download`` and ``HfApi.model_info`` call in huggingface_hub
2.x (read from its source: ``hf_api.py``, ``file_download.py``, ``utils/_http.py``):

- ``GET /api/models/{id}`` and ``/api/models/{id}/revision/{rev}``: the repository's commit
  (``sha``), ``gated`` and ``siblings`` (sizes, blob ids and LFS data with ``?blobs=true``);
- ``GET /api/models/{id}/tree/{rev}?recursive=...``: the file listing (one page);
- ``HEAD`` / ``GET /{id}/resolve/{rev}/{path}``: the file, with the headers the client
  requires (``X-Repo-Commit``, ``ETag``: the sha256 of LFS files, the git blob id of others,
  ``Content-Length``), ``Range: bytes=N-`` for resumed downloads.

Errors carry the Hub's ``X-Error-Code`` header, which the client turns into its exception
types: an unknown repository is 401 ``RepoNotFound`` (the Hub's answer to anonymous callers),
an unknown revision 404 ``RevisionNotFound``, a missing file 404 ``EntryNotFound``, an unknown
token 401 ``Invalid credentials in Authorization header``. A gated repository's info and file
list are public (as on the Hub); its files need a token the repository lists: none is 401
``GatedRepo``, another valid token 403 ``GatedRepo``.

A repository may keep older commits (``HubRepo.older``: earlier file sets, each with its own
commit); ``main`` is the current one, and any commit of either is a revision.

Simplifications: LFS files are answered directly (the Hub redirects them to a CDN with
``X-Linked-Etag`` / ``X-Linked-Size``), and nothing advertises Xet (no ``xetHash`` in the tree,
no ``X-Xet-*`` headers), so the client takes the plain HTTP path; the tests also set
``HF_HUB_DISABLE_XET=1``. Every request is recorded (method, path, Authorization header).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".onnx", ".h5", ".msgpack", ".ot", ".pt", ".model")


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, bytes]
    gated: bool = False
    tokens: frozenset[str] = frozenset()  # tokens granted access (gated repositories)
    older: tuple[dict[str, bytes], ...] = ()  # earlier commits' files, oldest first

    def at(self, revision: str) -> HubRepo | None:
        """The repository as of ``revision`` (``main`` or a commit); None when unknown."""
        if revision in ("main", self.sha):
            return self
        for files in self.older:
            past = HubRepo(self.repo_id, files, self.gated, self.tokens)
            if past.sha == revision:
                return past
        return None

    @property
    def sha(self) -> str:
        digest = hashlib.sha1(self.repo_id.encode())
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name])
        return digest.hexdigest()

    def is_lfs(self, name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def blob_id(self, name: str) -> str:
        data = self.files[name]
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id

    def etag(self, name: str) -> str:
        if self.is_lfs(name):
            return hashlib.sha256(self.files[name]).hexdigest()
        return self.blob_id(name)

    def lfs(self, name: str) -> dict | None:
        if not self.is_lfs(name):
            return None
        sha256 = hashlib.sha256(self.files[name]).hexdigest()
        return {"oid": sha256, "sha256": sha256, "size": len(self.files[name]), "pointerSize": 134}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    authorization: str | None


@dataclass
class HubDouble:
    """``with HubDouble() as hub: hub.add(...)``; ``hub.url`` goes into ``HF_ENDPOINT``."""

    repos: dict[str, HubRepo] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def add(self, repo: HubRepo) -> HubRepo:
        self.repos[repo.repo_id] = repo
        return repo

    @property
    def known_tokens(self) -> set[str]:
        return {token for repo in self.repos.values() for token in repo.tokens}

    def file_requests(self, method: str = "GET", repo_id: str | None = None) -> list[Request]:
        """Requests for files (``/{id}/resolve/...``), optionally of one repository."""
        prefix = f"/{repo_id}/resolve/" if repo_id else None
        return [
            r
            for r in self.requests
            if r.method == method
            and "/resolve/" in r.path
            and (prefix is None or r.path.startswith(prefix))
        ]

    def downloaded(self, repo_id: str) -> list[str]:
        """Names of the files GET fetched from ``repo_id``, in request order."""
        return [r.path.split("/", 5)[5] for r in self.file_requests("GET", repo_id)]

    # -- server ------------------------------------------------------------------------------
    def __enter__(self) -> HubDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                double._handle(self, "GET")

            def do_HEAD(self) -> None:
                double._handle(self, "HEAD")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- answers -----------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        split = urlsplit(handler.path)
        path = unquote(split.path)
        authorization = handler.headers.get("Authorization")
        self.requests.append(Request(method, path, split.query, authorization))
        token = authorization.removeprefix("Bearer ").strip() if authorization else None
        try:
            if token is not None and token not in self.known_tokens:
                raise _Error(401, None, "Invalid credentials in Authorization header")
            if path.startswith("/api/models/"):
                status, headers, body = self._api(path.removeprefix("/api/models/"), split.query)
            elif "/resolve/" in path:
                status, headers, body = self._resolve(path, token, handler.headers.get("Range"))
            else:
                raise _Error(404, None, "Not Found")
        except _Error as error:
            status, body = error.status, json.dumps({"error": error.message}).encode()
            headers = {"Content-Type": "application/json", "X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            headers.update(error.headers)
        handler.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if method == "GET":
            handler.wfile.write(body)

    def _repo(self, repo_id: str) -> HubRepo:
        if repo_id not in self.repos:
            raise _Error(401, "RepoNotFound", "Repository not found")
        return self.repos[repo_id]

    def _revision(self, repo: HubRepo, revision: str) -> HubRepo:
        past = repo.at(revision)
        if past is None:
            raise _Error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return past

    def _api(self, rest: str, query: str) -> tuple[int, dict, bytes]:
        parts = rest.split("/")
        repo = self._repo("/".join(parts[:2]))
        tail = parts[2:]
        params = parse_qs(query)
        if not tail or tail[0] == "revision":
            repo = self._revision(repo, tail[1] if len(tail) > 1 else "main")
            blobs = params.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for name in sorted(repo.files):
                sibling: dict = {"rfilename": name}
                if blobs:
                    sibling.update(size=len(repo.files[name]), blobId=repo.blob_id(name))
                    if repo.is_lfs(name):
                        sibling["lfs"] = repo.lfs(name)
                siblings.append(sibling)
            body = {
                "_id": repo.sha[:24],
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": repo.sha,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "siblings": siblings,
            }
            return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()
        if tail[0] == "tree" and len(tail) >= 2:
            repo = self._revision(repo, tail[1])
            recursive = params.get("recursive", ["false"])[0].lower() == "true"
            return (
                200,
                {"Content-Type": "application/json"},
                json.dumps(self._tree(repo, recursive)).encode(),
            )
        raise _Error(404, None, "Not Found")

    def _tree(self, repo: HubRepo, recursive: bool) -> list[dict]:
        entries, folders = [], set()
        for name in sorted(repo.files):
            parents = name.split("/")[:-1]
            for depth in range(1, len(parents) + 1):
                folders.add("/".join(parents[:depth]))
            if "/" in name and not recursive:
                continue
            entry = {
                "type": "file",
                "oid": repo.blob_id(name),
                "size": len(repo.files[name]),
                "path": name,
            }
            if repo.is_lfs(name):
                lfs = repo.lfs(name)
                entry["lfs"] = {
                    "oid": lfs["oid"],
                    "size": lfs["size"],
                    "pointerSize": lfs["pointerSize"],
                }
            entries.append(entry)
        for folder in sorted(folders):
            if recursive or "/" not in folder:
                entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": folder})
        return entries

    def _resolve(
        self, path: str, token: str | None, range_header: str | None
    ) -> tuple[int, dict, bytes]:
        repo_id, _, rest = path.lstrip("/").partition("/resolve/")
        repo = self._repo(repo_id)
        revision, _, name = rest.partition("/")
        repo = self._revision(repo, revision)
        if repo.gated and token not in repo.tokens:
            message = (
                f"Access to model {repo.repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in."
                if token is None
                else f"Access to model {repo.repo_id} is restricted and you are not in the authorized list."
            )
            raise _Error(401 if token is None else 403, "GatedRepo", message)
        if name not in repo.files:
            raise _Error(
                404, "EntryNotFound", f"{name} does not exist", {"X-Repo-Commit": repo.sha}
            )
        data = repo.files[name]
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": f'"{repo.etag(name)}"',
            "X-Repo-Commit": repo.sha,
            "Accept-Ranges": "bytes",
        }
        if range_header and range_header.startswith("bytes="):
            start = int(range_header.removeprefix("bytes=").split("-")[0] or 0)
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return 206, headers, data[start:]
        return 200, headers, data


class _Error(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
