"""An upload through HAProxy while Serve replaces the ingress replica that holds it.

Run as ``python -m tests.support.ingress_drain --graceful-s S1,S2 --docs N``; prints one JSON
line, a report per scenario. A real local Ray Serve with HAProxy (config/local.yaml's models and
Serve switches, the tests' LLM, its own Ray instance). The application is deployed from a Serve
config, as KubeRay does with serveConfigV2, with the ingress's ``graceful_shutdown_timeout_s``
= ``S``; then, with an upload of ``N`` SciFact abstracts in flight, the same config is applied
again with only the ingress's ``ray_actor_options`` changed. Serve starts a new ingress replica,
HAProxy reloads, and the old replica drains for at most ``S`` (the other deployments keep their
replicas: their code version and options are unchanged). The scenarios run one after the
other on the same Ray instance, each once the previous one's replicas have settled.
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
from tests.support.data import SCIFACT_DIR, SMOLLM2
from tests.support.serve_apps import deploy

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = SCIFACT_DIR
INGEST_TIMEOUT_S = 300.0


def ingress_options(document: dict) -> dict:
    (application,) = document["applications"]
    (ingress,) = [d for d in application["deployments"] if d["name"] == "ingress"]
    return ingress


def run(graceful_s: list[float], docs: int) -> list[dict]:
    """One scenario per ``graceful_s``, one after the other on one Ray instance: the
    application deployed (or updated) with that drain bound, then its ingress replaced under
    an upload."""
    from deployments.builder.serve_config import render_serve_config
    from deployments.local.launcher import start_serve, stop
    from deployments.settings import service_config

    config = load_config(ROOT / "config" / "local.yaml", environ={})
    config = service_config(config, port=free_port(), host="127.0.0.1")
    config = config.model_copy(
        update={
            "data_dir": Path(tempfile.mkdtemp(prefix="ingress-drain-")),
            "api": config.api.model_copy(update={"ingest_timeout_s": INGEST_TIMEOUT_S}),
            "llm": config.llm.model_copy(update=SMOLLM2),  # the tests' LLM: not the subject
        }
    )
    url = f"http://127.0.0.1:{config.serve.port}"
    document = render_serve_config(config, http_host="127.0.0.1")
    corpus = load_beir(SCIFACT, "test").corpus[:docs]
    start_serve(config, num_cpus=4)  # room for the second ingress replica of the rolling update
    try:
        reports = []
        for number, seconds in enumerate(graceful_s):
            ingress_options(document)["graceful_shutdown_timeout_s"] = seconds
            deploy(document, url)
            body = {
                "documents": [
                    {"id": f"{d.id}-{number}", "title": d.title, "text": d.text} for d in corpus
                ]
            }  # new ids each scenario: every upload writes all its documents
            reports.append(replace_ingress_under_upload(document, url, body, seconds))
        return reports
    finally:
        stop()


def replace_ingress_under_upload(document: dict, url: str, body: dict, graceful_s: float) -> dict:
    """An upload of ``body`` in flight while the ingress gets a new replica (its
    ``ray_actor_options`` changed in ``document``, which is updated)."""
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    (application,) = document["applications"]
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

    options = ingress_options(document)["ray_actor_options"]
    options["num_cpus"] = round(options["num_cpus"] + 0.05, 2)  # a new replica, the old stops
    redeployed_at = time.monotonic()
    _get_global_client().deploy_apps(ServeDeploySchema.model_validate(copy.deepcopy(document)))
    stopping_during_upload = False
    replica_states: list[dict] = []
    while sender.is_alive():
        status = serve.status().applications[application["name"]].deployments["ingress"]
        states = {str(k.value if hasattr(k, "value") else k): v
                  for k, v in status.replica_states.items()}  # fmt: skip
        if not replica_states or replica_states[-1]["states"] != states:
            elapsed = round(time.monotonic() - redeployed_at, 2)
            replica_states.append({"after_s": elapsed, "states": states})
        stopping_during_upload |= states.get("STOPPING", 0) > 0 and sender.is_alive()
        time.sleep(0.1)
    sender.join()

    readable = None
    if upload.get("status") == 200:  # the last document is in the index, through the new replica
        last = httpx.get(f"{url}/v1/documents/{body['documents'][-1]['id']}", timeout=30)
        readable = last.status_code == 200
    return {
        "graceful_s": graceful_s,
        "docs": len(body["documents"]),
        "upload": upload,
        "stopping_during_upload": stopping_during_upload,
        "ingress_replica_states": replica_states,
        "last_document_readable": readable,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--graceful-s", required=True, help="comma-separated: one scenario for each, in order"
    )
    parser.add_argument("--docs", type=int, default=600)
    args = parser.parse_args(argv)
    bounds = [float(s) for s in args.graceful_s.split(",")]
    print(json.dumps(run(bounds, args.docs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
