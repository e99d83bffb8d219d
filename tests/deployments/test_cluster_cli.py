"""``serve-app cluster`` against a TEST DOUBLE of the Kubernetes API server.

No API server can run on these machines, so a small local HTTP server answers the one call
the CLI makes (GET a RayService) with RayService objects recorded in KubeRay v1.7's shape
(tests/data/kuberay/). The real `kubernetes` client, kubeconfig loading and HTTP all run.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from deployments.cli import main
from deployments.cluster import parse_rayservice

RECORDED = Path(__file__).resolve().parents[1] / "data" / "kuberay"
PATH = "/apis/ray.io/v1/namespaces/search/rayservices/serve-app"


class FakeApiServer:
    """Serves a queue of recorded objects for PATH (the last one repeats); 404 elsewhere."""

    def __init__(self, responses: list[dict]) -> None:
        self.responses = list(responses)
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                if self.path.split("?")[0] != PATH:
                    body = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "NotFound",
                        "code": 404,
                    }
                    self._send(404, body)
                    return
                body = outer.responses.pop(0) if len(outer.responses) > 1 else outer.responses[0]
                self._send(200, body)

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, folder: Path) -> Path:
        host = f"http://127.0.0.1:{self.server.server_address[1]}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": host}}],
            "users": [{"name": "u", "user": {"token": "test-token"}}],
            "contexts": [
                {
                    "name": "double",
                    "context": {"cluster": "double", "user": "u", "namespace": "search"},
                }
            ],
            "current-context": "double",
        }
        path = folder / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


def test_parse_ready_and_upgrading():
    ready = parse_rayservice(recorded("rayservice_ready"))
    assert ready.ready and ready.active_cluster == "serve-app-raycluster-7xk2p"
    assert [d.name for d in ready.applications[0].deployments] == [
        "chunker",
        "dense",
        "ingress",
        "reranker",
        "splade",
        "store",
    ]
    upgrading = parse_rayservice(recorded("rayservice_upgrading"))
    assert not upgrading.ready and upgrading.pending_cluster == "serve-app-raycluster-9qrt4"
    assert upgrading.conditions["UpgradeInProgress"]["status"] == "True"


def test_status_command(tmp_path, capsys):
    with FakeApiServer([recorded("rayservice_upgrading")]) as api:
        argv = [
            "cluster",
            "status",
            "--name",
            "serve-app",
            "--namespace",
            "search",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path)),
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "NOT READY" in out and "serve-app-raycluster-9qrt4" in out
        assert "dense      UNHEALTHY Replica failed health check" in out
        assert main([*argv, "--json"]) == 0
        state = json.loads(capsys.readouterr().out)
        assert (
            state["ready"] is False
            and state["applications"][0]["deployments"]["dense"]["status"] == "UNHEALTHY"
        )
        assert api.requests[0].startswith(PATH)


def test_wait_ready_polls_until_ready(tmp_path, capsys):
    responses = [
        recorded("rayservice_upgrading"),
        recorded("rayservice_upgrading"),
        recorded("rayservice_ready"),
    ]
    with FakeApiServer(responses) as api:
        argv = [
            "cluster",
            "wait-ready",
            "--name",
            "serve-app",
            "--namespace",
            "search",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path)),
            "--timeout",
            "20",
            "--interval",
            "0.05",
        ]
        assert main(argv) == 0
        assert "READY" in capsys.readouterr().out and len(api.requests) == 3


def test_wait_ready_times_out(tmp_path, capsys):
    with FakeApiServer([recorded("rayservice_upgrading")]) as api:
        argv = [
            "cluster",
            "wait-ready",
            "--name",
            "serve-app",
            "--namespace",
            "search",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path)),
            "--timeout",
            "0.3",
            "--interval",
            "0.05",
        ]
        assert main(argv) == 1
        assert "NOT READY" in capsys.readouterr().out


def test_missing_rayservice_is_an_error(tmp_path, capsys):
    with FakeApiServer([recorded("rayservice_ready")]) as api:
        argv = [
            "cluster",
            "status",
            "--name",
            "other",
            "--namespace",
            "search",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path)),
        ]
        assert main(argv) == 2
        assert "RayService search/other: not found (HTTP 404)" in capsys.readouterr().err


def test_wait_ready_stops_when_kuberay_gives_up(tmp_path, capsys):
    """The object KubeRay v1.7 leaves once the chart's ray.io/initializing-timeout expires
    (rayservice_controller.go, markFailedOnInitializingTimeout: Ready False with reason
    InitializingTimeout, cluster names cleared; written from that code, not recorded): terminal,
    so wait-ready stops at once instead of polling to its own timeout, and says what to do."""
    gave_up = parse_rayservice(recorded("rayservice_initializing_timeout"))
    assert gave_up.gave_up and not gave_up.ready and gave_up.active_cluster == ""
    assert not parse_rayservice(recorded("rayservice_upgrading")).gave_up
    with FakeApiServer([recorded("rayservice_initializing_timeout")]) as api:
        argv = [
            "cluster", "wait-ready", "--name", "serve-app", "--namespace", "search",
            "--kubeconfig", str(api.kubeconfig(tmp_path)), "--timeout", "600", "--interval", "5",
        ]  # fmt: skip
        assert main(argv) == 1
        assert len(api.requests) == 1
        out = capsys.readouterr().out
        assert "FAILED" in out and "InitializingTimeout" in out
        assert "delete the RayService and install again" in out
