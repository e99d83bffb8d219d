"""The JWT secret survives `helm upgrade`: the chart's `lookup` reads the Secret already in the
cluster and keeps its value.

`helm template` has no cluster (lookup returns nothing), so Helm itself is run with
`--dry-run=server` against a minimal Kubernetes API double on 127.0.0.1: discovery for the
kinds the chart renders, and GET of the one Secret. Helm's own template engine, lookup and
client code do the rest.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.helm import rendering
from tests.helm.test_chart import SET_IMAGE

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "serve-app"
HELM = ROOT / ".cache" / "bin" / "helm"
NAMESPACE = "search"
SECRET = "rel-serve-app-secrets"


def rendered_kinds() -> set[tuple[str, str]]:
    docs = rendering.documents(
        str(HELM), "template", "rel", str(CHART), "--namespace", NAMESPACE, *SET_IMAGE
    )
    return {(d["apiVersion"], d["kind"]) for d in docs}


class FakeApiServer:
    """Discovery for ``kinds``, the Secrets in ``secrets`` (name -> data) and any other object
    in ``objects`` (API path -> the object as the API server returns it)."""

    def __init__(
        self,
        kinds: set[tuple[str, str]],
        secrets: dict[str, dict[str, str]],
        objects: dict[str, dict] | None = None,
    ) -> None:
        self.kinds = kinds
        self.secrets = secrets
        self.objects = objects or {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                server.requests.append(path)
                status, body = server.answer(path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _resources(self, group_version: str) -> list[dict]:
        return [
            {
                "name": kind.lower() + ("es" if kind.endswith("s") else "s"),
                "singularName": kind.lower(),
                "namespaced": True,
                "kind": kind,
                "verbs": ["get", "list", "create", "update", "patch", "delete"],
            }
            for api_version, kind in self.kinds
            if api_version == group_version
        ]

    def answer(self, path: str) -> tuple[int, dict]:
        groups = sorted({v for v, _ in self.kinds if "/" in v})
        prefix = f"/api/v1/namespaces/{NAMESPACE}/secrets/"
        if path == "/version":
            return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": gv.split("/")[0],
                        "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                        "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]},
                    }
                    for gv in groups
                ],
            }
        if path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
            group_version = "v1" if path == "/api/v1" else path[len("/apis/") :]
            return 200, {
                "kind": "APIResourceList",
                "groupVersion": group_version,
                "resources": self._resources(group_version),
            }
        if path in self.objects:
            return 200, self.objects[path]
        if path.startswith(prefix) and path[len(prefix) :] in self.secrets:
            name = path[len(prefix) :]
            return 200, {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {  # as the previous release left it
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {"app.kubernetes.io/managed-by": "Helm"},
                    "annotations": {
                        "meta.helm.sh/release-name": "rel",
                        "meta.helm.sh/release-namespace": NAMESPACE,
                    },
                },
                "data": {
                    k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[name].items()
                },
            }
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}

    def close(self) -> None:
        self.httpd.shutdown()


def helm_against(
    server: FakeApiServer,
    tmp_path: Path,
    *extra: str,
    show_only: str = "templates/secret.yaml",
    chart: Path = CHART,
) -> subprocess.CompletedProcess:
    """`helm template --dry-run=server` of one template, its lookups answered by ``server``."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "fake",
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return subprocess.run(
        [str(HELM), "template", "rel", str(chart), "--namespace", NAMESPACE,
         "--kubeconfig", str(kubeconfig), "--dry-run=server", "--disable-openapi-validation",
         "-s", show_only, *SET_IMAGE, *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def render_against(server: FakeApiServer, tmp_path: Path, *extra: str) -> dict:
    done = helm_against(server, tmp_path, *extra)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


@pytest.fixture(scope="module")
def kinds() -> set[tuple[str, str]]:
    return rendered_kinds()


def test_upgrade_keeps_the_secret_in_the_cluster(kinds, tmp_path):
    server = FakeApiServer(kinds, {SECRET: {"jwt-secret": "the-secret-tokens-were-signed-with"}})
    try:
        secret = render_against(server, tmp_path)
    finally:
        server.close()
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}" in server.requests  # lookup ran
    assert secret["stringData"]["jwt-secret"] == "the-secret-tokens-were-signed-with"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_first_install_generates_one_and_values_win(kinds, tmp_path):
    server = FakeApiServer(kinds, {})
    try:
        generated = render_against(server, tmp_path)["stringData"]["jwt-secret"]
        given = render_against(server, tmp_path, "--set", "secrets.jwtSecret=from-values")
    finally:
        server.close()
    assert len(generated) == 48 and generated.isalnum()
    assert given["stringData"]["jwt-secret"] == "from-values"
