"""The image's ``.pth`` hook, in a fresh interpreter as a Ray pod starts one: with the chart's
``SERVE_APP_HAPROXY_HOOK=1`` Serve's HAProxy template is hardened when Serve loads it (header
timeout, private admin socket, no stats page, ``X-Forwarded-For`` set by HAProxy); without
it, untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json; from ray.serve._private import haproxy; t = haproxy.HAPROXY_CONFIG_TEMPLATE; "
    "print(json.dumps({'xff': 'X-Serve-App-Client %[src]' in t, 'stats': 'listen stats' in t, "
    "'socket': 'mode 600 level admin' in t, 'timeout': 'timeout http-request 5000ms' in t}))"
)


def test_the_hook_is_cheap_and_names_the_settings_variable():
    from deployments.process_hook import HOOK_ENV
    from deployments.settings import HAPROXY_HOOK_ENV

    assert HOOK_ENV == HAPROXY_HOOK_ENV
    code = "import sys, deployments.process_hook; print(sorted(m for m in sys.modules if m.startswith(('serve_app', 'ray', 'pydantic'))))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout


@pytest.mark.parametrize("hooked", [True, False])
def test_the_pth_hook_hardens_serves_haproxy_template_when_the_chart_asks(tmp_path, hooked):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(ROOT / "deployments" / "serve_app_process_hook.pth", site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVE_APP_")}
    env["PYTHONPATH"] = str(ROOT)
    if hooked:
        env.update({"SERVE_APP_HAPROXY_HOOK": "1", "SERVE_APP_HEADER_TIMEOUT_S": "5"})
    code = f"import site; site.addsitedir({str(site)!r}); {PROBE}"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == dict.fromkeys(("xff", "socket", "timeout"), hooked) | {"stats": not hooked}
