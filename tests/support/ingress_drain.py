"""An upload through HAProxy while Serve replaces the ingress replica that holds it.

Run as ``python -m tests.support.ingress_drain --graceful-s S --docs N``; prints one JSON line.
A real local Ray Serve with HAProxy (config/local.yaml's models and Serve switches, its own Ray
instance). The application is deployed from a Serve config, as KubeRay does with serveConfigV2;
then, with an upload of ``N`` SciFact abstracts in flight, the same config is applied again
with only the ingress's ``ray_actor_options`` changed. Serve starts a new ingress replica, HAProxy
reloads, and the old replica drains with ``graceful_shutdown_timeout_s`` = ``S`` (the other
deployments keep their replicas: their code version and options are unchanged).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from serve_app.config import load_config
from serve_app.evaluation.beir import load_beir
from serve_app.ports import free_port
from tests.support.data import SCIFACT_DIR
from tests.support.local_run import wait_ready

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = SCIFACT_DIR
INGEST_TIMEOUT_S = 300.0


def ingress_options(document: dict) -> dict:
    (application,) = document["applications"]
    (ingress,) = [d for d in application["deployments"] if d["name"] == "ingress"]
    return ingress


def run(graceful_s: float, docs: int) -> dict:
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from deployments.builder.serve_config import render_serve_config
    from deployments.local.launcher import start_serve, stop
    from deployments.settings import service_config

    config = load_config(ROOT / "config" / "local.yaml", environ={})
    ingress = {**config.serve.get("ingress", {}), "graceful_shutdown_timeout_s": graceful_s}
    config = service_config(config, port=free_port(), host="127.0.0.1", ingress=ingress)
    config = config.model_copy(
        update={
            "data_dir": Path(tempfile.mkdtemp(prefix="ingress-drain-")),
            "api": config.api.model_copy(update={"ingest_timeout_s": INGEST_TIMEOUT_S}),
        }
    )
    settings = config.serve
    document = render_serve_config(config, http_host="127.0.0.1")
    url = f"http://127.0.0.1:{settings.port}"
    app = settings.app_name
    start_serve(config, num_cpus=4)  # room for the second ingress replica of the rolling update
    try:
        client = _get_global_client()
        client.deploy_apps(ServeDeploySchema.model_validate(document), _blocking=True)
        wait_ready(url)

        corpus = load_beir(SCIFACT, "test").corpus[:docs]
        body = {"documents": [{"id": d.id, "title": d.title, "text": d.text} for d in corpus]}
        upload: dict = {}

        def send() -> None:
            started = time.monotonic()
            try:
                response = httpx.post(f"{url}/v1/documents", json=body, timeout=INGEST_TIMEOUT_S)
                upload.update(status=response.status_code)
                if response.status_code == 200:
                    upload["documents"] = response.json()["documents"]
                else:
                    upload["body"] = response.text[:300]
            except httpx.HTTPError as error:
                upload.update(status=None, error=f"{type(error).__name__}: {error}")
            upload["seconds"] = round(time.monotonic() - started, 2)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(1.0)  # the upload is inside the ingress replica

        changed = copy.deepcopy(document)
        options = ingress_options(changed)["ray_actor_options"]
        options["num_cpus"] = options["num_cpus"] + 0.05  # a new replica, the old one stops
        redeployed_at = time.monotonic()
        client.deploy_apps(ServeDeploySchema.model_validate(changed))
        stopping_during_upload = False
        replica_states: list[dict] = []
        while sender.is_alive():
            status = serve.status().applications[app].deployments["ingress"]
            states = {str(k.value if hasattr(k, "value") else k): v
                      for k, v in status.replica_states.items()}  # fmt: skip
            if not replica_states or replica_states[-1]["states"] != states:
                elapsed = round(time.monotonic() - redeployed_at, 2)
                replica_states.append({"after_s": elapsed, "states": states})
            stopping_during_upload |= states.get("STOPPING", 0) > 0 and sender.is_alive()
            time.sleep(0.1)
        sender.join()

        readable = None
        if (
            upload.get("status") == 200
        ):  # the last document is in the index, through the new replica
            last = httpx.get(f"{url}/v1/documents/{corpus[-1].id}", timeout=30)
            readable = last.status_code == 200
        return {
            "graceful_s": graceful_s,
            "docs": docs,
            "upload": upload,
            "stopping_during_upload": stopping_during_upload,
            "ingress_replica_states": replica_states,
            "last_document_readable": readable,
        }
    finally:
        stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graceful-s", type=float, required=True)
    parser.add_argument("--docs", type=int, default=600)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.graceful_s, args.docs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
