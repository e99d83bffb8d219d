"""The pre-upgrade validate hook in the rendered chart (real helm binary): a Job running
exactly ``serve-app --config FILE validate --no-load`` (parsed here by the CLI's own parser)
on the configuration serveConfigV2 carries, after the model-fetch Job, before upgrades only,
with the Ray pods' image, security context, credentials environment and the model cache
read-only, no GPU; rendered only where the index can be checked from outside (server store
topologies). Its reachability under the NetworkPolicies is in test_network_policy.py."""

from __future__ import annotations

import tomllib

import kubernetes_validate
import pytest
import yaml

from deployments.cli import build_parser
from serve_app import cli as core_cli
from serve_app.config import config_from_dict
from tests.helm.rendering import fetched_ids
from tests.helm.test_chart import CHART, HELM, K8S_VERSION, ROOT, VALUES, objects
from tests.helm.test_chart import render as render_raw

QDRANT = ("--set", "config.stores.topology=qdrant", "--set", "stores.qdrant.url=http://qdrant:6333")
# (values file, extra flags): every values file, plus server-store variants of the two
# embedded ones (the defaults' PVC cache, cpu-small's hostPath cache without policies).
CASES = [(v, ()) for v in VALUES] + [(None, QDRANT), ("ci/cpu-small.yaml", QDRANT)]
IDS = [*(v or "defaults" for v in VALUES), "defaults+qdrant", "cpu-small+qdrant"]


def render(values: str | None, *extra: str) -> list[dict]:
    return objects(str(HELM), CHART, values, *extra)


def validate_hook(docs: list[dict]) -> dict[str, dict]:
    """The hook's objects by kind (ConfigMap, NetworkPolicy, Job)."""
    found = {d["kind"]: d for d in docs if d["metadata"]["name"].endswith("-validate")}
    assert len(found) == len([d for d in docs if d["metadata"]["name"].endswith("-validate")])
    return found


def serve_config(docs: list[dict]) -> dict:
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    return yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]["config"]


def annotations(doc: dict) -> dict[str, str]:
    return doc["metadata"].get("annotations") or {}


def listed(doc: dict, key: str) -> set[str]:
    return set(filter(None, annotations(doc).get(key, "").split(",")))


@pytest.mark.parametrize("values,extra", CASES, ids=IDS)
def test_rendered_where_the_index_can_be_checked(values, extra):
    """Every values file renders; the hook exists with a server store topology, not with the
    embedded store (its running replica holds the shard's lock: no second process opens it)."""
    docs = render(values, *extra)
    hook = validate_hook(docs)
    server = serve_config(docs)["stores"]["topology"] != "embedded"
    assert ("Job" in hook) == ("ConfigMap" in hook) == server, set(hook)
    policies_on = any(d["kind"] == "NetworkPolicy" and d is not hook.get("NetworkPolicy")
                      for d in docs)  # fmt: skip
    assert ("NetworkPolicy" in hook) == (server and policies_on)
    if server:
        assert not validate_hook(render(values, *extra, "--set", "validateOnUpgrade.enabled=false"))


@pytest.mark.parametrize("values,extra", CASES, ids=IDS)
def test_the_hook_objects_validate_strictly(values, extra):
    for doc in validate_hook(render(values, *extra)).values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("values", ["ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_before_upgrades_only_after_the_model_fetch(values):
    """pre-upgrade, never pre-install (no index exists before the first start); with a shared
    cache, the Job after the model-fetch Job (Helm runs hooks by weight, each to completion) and after its ConfigMap
    and policy; a succeeded run removed, a failed one kept for its logs."""
    docs = render(
        values, "--set", "modelCache.type=pvc", "--set", "modelCache.storageClass=efs-sc"
    )  # the shared cache's Job
    hook = validate_hook(docs)
    (fetch,) = [
        d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-model-fetch")
    ]
    for doc in hook.values():
        assert listed(doc, "helm.sh/hook") == {"pre-upgrade"}, doc["kind"]
        assert listed(doc, "helm.sh/hook-delete-policy") == {
            "before-hook-creation",
            "hook-succeeded",
        }
    weight = {kind: int(annotations(doc)["helm.sh/hook-weight"]) for kind, doc in hook.items()}
    fetch_weight = int(annotations(fetch)["helm.sh/hook-weight"])
    assert weight["Job"] > fetch_weight
    assert weight["Job"] > weight["ConfigMap"] and weight["Job"] > weight["NetworkPolicy"]
    assert annotations(hook["Job"])["helm.sh/hook-output-log-policy"] == "hook-failed"


@pytest.mark.parametrize(
    "render_as,missing_index_ok",
    [(("--is-upgrade",), False), ((), True)],
    ids=["helm upgrade", "helm template (Argo CD)"],
)
@pytest.mark.parametrize("values,extra", CASES[2:], ids=IDS[2:])
def test_the_command_is_validate_no_load_on_the_mounted_config(
    values, extra, render_as, missing_index_ok
):
    """The Job's command line, through the console script's own argument parser (and the core
    CLI's): `validate --no-load`, text output, reading the file the ConfigMap mounts. Rendered
    as a real `helm upgrade` renders it, a missing index fails; rendered as an install (what
    `helm template`, so Argo CD, always says, and Argo runs the hook before its first sync
    too), `--missing-index-ok` lets a first install through."""
    hook = validate_hook(render(values, *extra, *render_as))
    pod = hook["Job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    line = container["command"] + container["args"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert line[0] == "serve-app" and scripts["serve-app"] == "deployments.cli:main"
    for parser in (build_parser(), core_cli.build_parser()):
        args = parser.parse_args(line[1:])
        assert (args.command, args.no_load, args.json) == ("validate", True, False)
        assert args.missing_index_ok is missing_index_ok
    flags = ["--missing-index-ok"] if missing_index_ok else []
    assert line[1:] == ["--config", args.config, "validate", "--no-load", *flags]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert args.config == f"{mount['mountPath']}/config.yaml" and mount["readOnly"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == hook["ConfigMap"]["metadata"]["name"]
    assert "config.yaml" in hook["ConfigMap"]["data"]


@pytest.mark.parametrize(
    "values,extra",
    [
        *CASES[2:],
        (  # merged overrides reach both alike
            "ci/external-stores.yaml",
            ("--set", "config.dense.output_dim=1024", "--set", "config.search.top_k=20",
             "--set", "config.serve.dense.num_gpus=1"),
        ),
    ],
    ids=[*IDS[2:], "overrides"],
)  # fmt: skip
def test_the_job_validates_the_config_serve_runs(values, extra):
    """The file the Job validates is the configuration in serveConfigV2 (the same merged
    values), and the app's own model accepts it."""
    docs = render(values, *extra)
    validated = yaml.safe_load(validate_hook(docs)["ConfigMap"]["data"]["config.yaml"])
    served = serve_config(docs)
    assert validated == served
    assert config_from_dict(validated, "hook") == config_from_dict(served, "serveConfigV2")
    if extra and "config.dense.output_dim=1024" in extra:
        assert validated["dense"]["output_dim"] == 1024 and validated["search"]["top_k"] == 20


@pytest.mark.parametrize("values,extra", CASES[2:], ids=IDS[2:])
def test_the_job_runs_as_the_ray_pods_without_a_gpu(values, extra):
    """Image, security context, the Ray containers' credentials and offline environment (the
    variables the configuration names), the model cache read-only as the Ray pods mount it; no
    GPU, no service account token; its own labels, none of the Ray pods'."""
    docs = render(values, *extra)
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    (dense,) = [g for g in cluster["workerGroupSpecs"] if g["groupName"] == "dense-gpu"]
    worker = dense["template"]["spec"]
    job = validate_hook(docs)["Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == head["containers"][0]["image"]
    assert pod["securityContext"] == head["securityContext"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod

    env = {e["name"]: e for e in container["env"]}
    worker_env = {e["name"]: e for e in worker["containers"][0]["env"]}
    # A Ray node's own shutdown setting (the Job runs no Ray node), then the same helper:
    # credentials, JWT secret, HF_HOME, Serve switches.
    assert worker_env.pop("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S")
    for ray_only in ("RAY_ROTATION_MAX_BYTES", "RAY_ROTATION_BACKUP_COUNT"):  # Ray's own logs
        assert worker_env.pop(ray_only)
    assert env == worker_env
    config = config_from_dict(serve_config(docs), "chart")
    named = {config.api.auth.jwt.secret_env, config.stores.qdrant.api_key_env}
    if config.stores.topology == "opensearch+qdrant":
        named |= {config.stores.opensearch.username_env, config.stores.opensearch.password_env}
    assert {n for n in named if n} <= set(env)
    assert env["HF_HUB_OFFLINE"]["value"] == "1"

    for section in ("requests", "limits"):
        assert not [k for k in container["resources"].get(section, {}) if "gpu" in k]
    assert "nvidia.com/gpu" not in str(pod.get("tolerations", []))

    volumes = {v["name"]: v for v in pod["volumes"]}
    (models,) = [m for m in container["volumeMounts"] if m["name"] == "models"]
    worker_volumes = {v["name"]: v for v in worker["volumes"]}
    assert models["readOnly"] is True

    # The same claim (read-only) or host dir; an own cache is sized for every model, not a group's.
    def kind(volume: dict) -> dict:
        return {k: {} if k == "emptyDir" else v for k, v in volume.items()}

    assert kind(volumes["models"]) == kind(worker_volumes["models"])
    (worker_models,) = [m for m in worker["containers"][0]["volumeMounts"] if m["name"] == "models"]
    assert models["mountPath"] == worker_models["mountPath"]
    assert {"data"} & set(volumes) == set()  # server stores only: no data volume

    labels = job["spec"]["template"]["metadata"]["labels"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        ray_labels = group["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] != ray_labels["app.kubernetes.io/name"]


def test_with_its_own_cache_the_job_fetches_the_models_first():
    """modelCache.type emptyDir (the default): no shared cache to read, so the Job's init
    container fetches every model of the configuration into the Job's own cache, as the Ray
    pods do (the same container), before `validate --no-load` checks their files."""
    from serve_app.model_fetch import cache_ids

    docs = render("ci/external-stores.yaml")
    assert not [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-fetch")]
    pod = validate_hook(docs)["Job"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"] == ["python", "-m", "serve_app.model_fetch"]
    ids = cache_ids(config_from_dict(serve_config(docs), "chart"), "/models")
    assert fetched_ids(init["args"]) == ids and ids
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    (sparse,) = [
        g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        if g["groupName"] == "sparse-gpu"
    ]  # fmt: skip
    (ray_init,) = sparse["template"]["spec"]["initContainers"]
    same = ("image", "command", "env", "securityContext", "volumeMounts")
    assert {k: init[k] for k in same} == {k: ray_init[k] for k in same}
    # The same resources but the node disk: every model here, the group's there.
    assert init["resources"]["limits"] == ray_init["resources"]["limits"]
    disk = "ephemeral-storage"
    assert {**init["resources"]["requests"], disk: 0} == {
        **ray_init["resources"]["requests"],
        disk: 0,
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["models"]


def test_no_cache_mount_when_no_model_is_in_the_cache():
    docs = render(None, *QDRANT, "--set", "modelCache.type=none", "--set",
                  "modelFetch.enabled=false")  # fmt: skip
    pod = validate_hook(docs)["Job"]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp"]
    assert "HF_HOME" not in {e["name"] for e in pod["containers"][0]["env"]}


def test_settings_reach_the_job():
    docs = render(
        "ci/external-stores.yaml",
        "--set", "validateOnUpgrade.backoffLimit=3",
        "--set", "validateOnUpgrade.activeDeadlineSeconds=120",
        "--set", "validateOnUpgrade.nodeSelector.pool=cpu",
        "--set", "validateOnUpgrade.resources.limits.memory=6Gi",
    )  # fmt: skip
    job = validate_hook(docs)["Job"]
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (3, 120)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["containers"][0]["resources"]["limits"]["memory"] == "6Gi"


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--set", "validateOnUpgrade.enabled=yes"), "validateOnUpgrade"),
        (("--set", "validateOnUpgrade.activeDeadlineSeconds=0"), "activeDeadlineSeconds"),
    ],
)
def test_schema_rejects_bad_settings(extra, message):
    result = render_raw(str(HELM), CHART, None, *extra)
    assert result.returncode != 0 and message in result.stderr, result.stderr
