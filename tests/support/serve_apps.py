"""Deploying the application onto a Serve already started in this process (several scenarios
on one Ray instance, as KubeRay deploys a RayService's serveConfigV2).

``deploy`` applies a Serve config document (``render_serve_config``) with Serve's declarative
API, optionally with environment variables for every replica of the application (its
``runtime_env``: each replica is a new worker process that reads them when Ray Serve's
constants are imported), and returns once the application answers ready at ``url``.
"""

from __future__ import annotations

import copy
import time
from typing import Any


def with_replica_env(document: dict, env: dict[str, str]) -> dict:
    """``document`` with ``env`` in its (one) application's ``runtime_env``."""
    changed = copy.deepcopy(document)
    (application,) = changed["applications"]
    runtime_env = application.setdefault("runtime_env", {})
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
    return changed


def deploy(document: dict, url: str, timeout_s: float = 240) -> None:
    """Apply ``document`` and wait for the application to run and answer ``/readyz``."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from tests.support.local_run import wait_ready

    _get_global_client().deploy_apps(ServeDeploySchema.model_validate(document), _blocking=True)
    wait_settled(document, timeout_s)
    wait_ready(url, timeout_s)


def wait_settled(document: dict, timeout_s: float = 240) -> None:
    """Until the application is RUNNING with every replica RUNNING (none starting or
    stopping from an earlier version)."""
    from ray import serve

    (application,) = document["applications"]
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        status = serve.status().applications.get(application["name"])
        if status is not None:
            last = {
                name: {str(getattr(k, "value", k)): v for k, v in d.replica_states.items()}
                for name, d in status.deployments.items()
            }
            settled = all(set(states) <= {"RUNNING"} for states in last.values())
            if str(getattr(status.status, "value", status.status)) == "RUNNING" and settled:
                return
        time.sleep(0.2)
    raise SystemExit(f"the application did not settle within {timeout_s:g} s: {last}")
