"""The Helm chart, validated offline: helm lint/template, Kubernetes schemas (strict), the
RayService CRD schema, values.schema.json, and serveConfigV2 against the graph builder."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from deployments.builder.serve_config import render_serve_config
from deployments.settings import service_config
from serve_app.config import load_config
from tests.helm import rendering

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "serve-app"
HELM = ROOT / ".cache" / "bin" / "helm"
CRD = ROOT.parent / "shared" / "k8s" / "ray.io_rayservices-v1.7.0.yaml"
K8S_VERSION = "1.35.0"
VALUES = [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml", "ci/external-stores.yaml"]
# The chart has no image of its own (image.repository must name the one built from the
# Dockerfile): every render here names this one; a later --set may override it.
IMAGE = "registry.internal/search/serve-app"
# Nor a StorageClass for the embedded store's data claim (never the cluster's default): named too.
STORAGE_CLASS = "gp3"
SET_IMAGE = (
    "--set", f"image.repository={IMAGE}", "--set", f"dataVolume.storageClass={STORAGE_CLASS}",
)  # fmt: skip
K8S_IMAGE = IMAGE  # k8s/ (scripts/render_k8s.sh): kubectl users replace it with theirs


@pytest.fixture(scope="session")
def helm() -> str:
    assert HELM.is_file(), "run scripts/setup.sh (installs helm into .cache/bin)"
    return str(HELM)


@pytest.fixture(scope="session")
def chart() -> Path:
    """The chart directory exactly as committed: no copy, no `helm dependency build`."""
    return CHART


def template_args(helm: str, chart: Path, values: str | None, *extra: str) -> list[str]:
    args = [helm, "template", "rel", str(chart), "--namespace", "search", *SET_IMAGE]
    if values:
        args += ["-f", str(chart / values)]
    return [*args, *extra]


def render(helm: str, chart: Path, values: str | None, *extra: str) -> subprocess.CompletedProcess:
    return rendering.helm(*template_args(helm, chart, values, *extra))


def objects(helm: str, chart: Path, values: str | None, *extra: str) -> list[dict]:
    return rendering.documents(*template_args(helm, chart, values, *extra))


@functools.cache
def crd_validator() -> Any:
    """The RayService CRD's v1 schema as a validator (checked and built once: the schema is
    large, and ``jsonschema.validate`` checks it again on every call)."""
    crd = yaml.load(CRD.read_text(), Loader=rendering.LOADER)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_rayservice(service: dict) -> None:
    """jsonschema.ValidationError unless ``service`` validates against the CRD (v1.7.0)."""
    error = jsonschema.exceptions.best_match(crd_validator().iter_errors(service))
    if error is not None:
        raise error


def rayservice(docs: list[dict]) -> dict:
    (found,) = [d for d in docs if d["kind"] == "RayService"]
    return found


def test_helm_lint(helm, chart):
    result = rendering.helm(helm, "lint", str(CHART), *SET_IMAGE)
    assert result.returncode == 0, result.stdout + result.stderr
    # The only warning allowed on the real chart: the optional dependencies are not downloaded.
    warnings = [
        line for line in result.stdout.splitlines() if "[WARNING]" in line or "[ERROR]" in line
    ]
    assert all("missing these dependencies: opensearch,qdrant" in w for w in warnings), (
        result.stdout
    )
    for values in VALUES:  # and strict lint, every values file, without them
        args = [helm, "lint", "--strict", str(chart), *SET_IMAGE] + (
            ["-f", str(chart / values)] if values else []
        )
        strict = rendering.helm(*args)
        assert strict.returncode == 0, strict.stdout + strict.stderr


@pytest.mark.parametrize("values", VALUES)
def test_every_object_validates_strictly(helm, chart, values):
    docs = objects(helm, chart, values)
    kinds = {d["kind"] for d in docs}
    assert "RayService" in kinds
    for doc in docs:
        if doc["apiVersion"].startswith(("ray.io/", "monitoring.coreos.com/")):
            continue  # custom resources: validated against their CRD below
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("values", VALUES)
def test_rayservice_validates_against_the_crd(helm, chart, values):
    validate_rayservice(rayservice(objects(helm, chart, values)))


def _normalise(deployments: list[dict]) -> dict[str, dict]:
    return {d["name"]: yaml.safe_load(yaml.safe_dump(d)) for d in deployments}


@pytest.mark.parametrize("values", VALUES)
def test_serve_config_equals_the_graph_builder(helm, chart, values):
    spec = rayservice(objects(helm, chart, values))["spec"]
    serve_config = yaml.safe_load(spec["serveConfigV2"])
    (application,) = serve_config["applications"]
    config = service_config(application["args"]["config"], "chart")  # the app's own validation
    (expected,) = render_serve_config(config)["applications"]
    import_path = "deployments.builder.graph:build_app"
    assert application["import_path"] == expected["import_path"] == import_path
    assert (
        application["name"] == expected["name"]
        and application["route_prefix"] == expected["route_prefix"]
    )
    assert service_config(expected["args"]["config"]) == config
    rendered, built = _normalise(application["deployments"]), _normalise(expected["deployments"])
    assert rendered == built


def test_default_config_is_the_gpu_config():
    assert load_config(CHART / "files" / "config.yaml", environ={}) == load_config(
        ROOT / "config" / "gpu.yaml", environ={}
    ), "helm/serve-app/files/config.yaml must be a copy of config/gpu.yaml"


def test_cluster_shape(helm, chart):
    spec = rayservice(objects(helm, chart, "ci/gpu-production.yaml"))["spec"]
    cluster = spec["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "dense-gpu", "sparse-gpu", "llm-gpu"}
    dense = groups["dense-gpu"]
    container = dense["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # Custom resources through the group-level field (KubeRay >= 1.4), never a JSON string in
    # rayStartParams (KubeRay writes that unquoted into `bash -c`).
    assert dense["resources"]["dense_slot"] == "1"
    assert "resources" not in dense["rayStartParams"]
    assert (dense["minReplicas"], dense["maxReplicas"]) == (2, 6)
    assert dense["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    # KubeRay adds its default probes (raylet health, the node's Serve proxy) only to Ray
    # containers without one; an app-wide /readyz probe would fail every worker at once.
    for group in [cluster["headGroupSpec"], *groups.values()]:
        for ray_container in group["template"]["spec"]["containers"]:
            assert "readinessProbe" not in ray_container and "livenessProbe" not in ray_container
    volumes = {v["name"]: v for v in dense["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "serve-app-models"
    assert (
        "nvidia.com/gpu"
        not in groups["cpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    )
    assert spec["upgradeStrategy"]["type"] == "NewCluster"
    env = {e["name"]: e for e in container["env"]}
    assert env["SERVE_APP_JWT_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "serve-app-auth"


def test_external_store_credentials_reach_the_app(helm, chart):
    spec = rayservice(objects(helm, chart, "ci/external-stores.yaml"))["spec"]
    config = yaml.safe_load(spec["serveConfigV2"])["applications"][0]["args"]["config"]
    assert config["stores"]["topology"] == "opensearch+qdrant"
    assert config["stores"]["opensearch"]["hosts"] == [
        "https://opensearch-cluster-master.search.svc:9200"
    ]
    assert config["stores"]["opensearch"]["password_env"] == "SERVE_APP_OPENSEARCH_PASSWORD"
    assert config["stores"]["qdrant"]["api_key_env"] == "SERVE_APP_QDRANT_API_KEY"
    env = {
        e["name"]
        for e in spec["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    assert {"SERVE_APP_OPENSEARCH_PASSWORD", "SERVE_APP_QDRANT_API_KEY"} <= env


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["--set", "workerGroups.cpu.replicas=-1"], "replicas"),
        (["--set", "workerGroups.denseGpu.gpus=0"], "gpus"),
        (
            [
                "--set",
                "config.stores.topology=opensearch+qdrant",
                "--set",
                "stores.qdrant.url=https://q:6333",
            ],
            "hosts",
        ),
        (["--set", "config.stores.topology=qdrant"], "url"),
        (["--set", "upgradeStrategy=Sometimes"], "upgradeStrategy"),
    ],
)
def test_schema_rejects_bad_values(helm, chart, overrides, message):
    result = render(helm, chart, None, *overrides)
    assert result.returncode != 0
    assert (
        "values don't meet the specifications of the schema" in result.stderr
        and message in result.stderr
    )


def container_images(node: object) -> list[str]:
    """The image of every container and init container anywhere in ``node``."""
    if isinstance(node, list):
        return [image for item in node for image in container_images(item)]
    if not isinstance(node, dict):
        return []
    found = [c["image"] for key in ("containers", "initContainers") for c in node.get(key) or []]
    return found + [image for value in node.values() for image in container_images(value)]


def test_every_container_runs_the_named_image_tagged_with_the_app_version(helm, chart):
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    for values in VALUES:
        images = set(container_images(objects(helm, chart, values)))
        assert images == {f"{IMAGE}:{app_version}"}, values
    assert set(container_images(objects(helm, chart, None, "--set", "image.tag=1.2.3"))) == {
        f"{IMAGE}:1.2.3"
    }


@pytest.mark.parametrize(
    "repository,why",
    [
        ("", "image.repository is empty"),
        ("registry.example.com/search/serve-app", "a name reserved for examples"),
        ("harbor.corp.example/serve-app", "a name reserved for examples"),
        ("$REGISTRY/serve-app", "is no image repository"),
        ("<registry>/serve-app", "is no image repository"),
        ("REGISTRY/serve-app", "is no image repository"),
        ("ghcr.io/serve-app/serve-app", "was never published"),  # the former default
    ],
)
@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_a_missing_or_placeholder_image_is_refused_saying_how_to_build_it(
    helm, chart, values, repository, why
):
    result = render(helm, chart, values, "--set", f"image.repository={repository}")
    assert result.returncode != 0 and why in result.stderr, result.stderr
    for hint in (
        "the Dockerfile at the repository root",
        "docker build -t <registry>/serve-app:0.1.0 . && docker push <registry>/serve-app:0.1.0",
        "set image.repository=<registry>/serve-app",
    ):
        assert hint in result.stderr, result.stderr


def test_the_chart_alone_names_no_image(helm, chart):
    """values.yaml and every ci/ file: an install that does not name the image fails."""
    for values in VALUES:
        args = [
            helm,
            "template",
            "rel",
            str(chart),
            "--set",
            f"dataVolume.storageClass={STORAGE_CLASS}",
        ]
        args += ["-f", str(chart / values)] if values else []
        result = rendering.helm(*args)
        assert result.returncode != 0 and "image.repository is empty" in result.stderr, values


@pytest.mark.parametrize(
    "repository",
    ["localhost:5000/serve-app", "123456789012.dkr.ecr.us-east-1.amazonaws.com/serve-app",
     "europe-docker.pkg.dev/acme-prod/search/serve-app", "ghcr.io/acme/serve-app"],
)  # fmt: skip
def test_real_registries_are_accepted(helm, chart, repository):
    docs = objects(helm, chart, None, "--set", f"image.repository={repository}")
    assert set(container_images(docs)) == {f"{repository}:0.1.0"}


def test_plain_manifests_are_in_sync(helm, chart):
    """k8s/ is the chart rendered with its defaults (release serve-app, namespace serve-app): no
    hooks (each pod fetches its own models; the upgrade guard is Helm's), nothing to apply before it but the data claim. The
    claim is alone in k8s/data-claim.yaml: kubectl ignores helm.sh/resource-policy, so
    `kubectl delete -f k8s/serve-app.yaml` (the delete-and-apply upgrade) must not hold it."""
    args = [
        helm, "template", "serve-app", str(chart), "--namespace", "serve-app",
        "--set", "secrets.create=false", "--set", "secrets.existingSecret=serve-app-secrets",
        "--set", f"image.repository={K8S_IMAGE}",
        "--set", f"dataVolume.storageClass={STORAGE_CLASS}",
    ]  # fmt: skip
    expected = rendering.documents(*args, "--no-hooks")
    # No hooks but the upgrade guard's, which only `helm upgrade`/`rollback` runs: kubectl
    # users replace the cluster themselves (docs/kubernetes.md).
    hooks = [d for d in rendering.documents(*args) if d not in expected]
    assert {d["metadata"]["name"] for d in hooks} == {"serve-app-upgrade-guard"}

    def read(name: str) -> list[dict]:
        return [d for d in yaml.safe_load_all((ROOT / "k8s" / name).read_text()) if d]

    claims, rest = read("data-claim.yaml"), read("serve-app.yaml")
    assert [d["kind"] for d in claims] == ["PersistentVolumeClaim"]
    assert "PersistentVolumeClaim" not in {d["kind"] for d in rest}
    assert rest + claims == [d for d in expected if d["kind"] != "PersistentVolumeClaim"] + [
        d for d in expected if d["kind"] == "PersistentVolumeClaim"
    ], "k8s/ is stale: run `make k8s-manifests`"
    assert sorted(p.name for p in (ROOT / "k8s").iterdir()) == ["data-claim.yaml", "serve-app.yaml"]


@pytest.mark.parametrize(
    "values,extra,key",
    [
        (None, (), "dataVolume"),
        ("ci/cpu-small.yaml", ("--set", "dataVolume.storageClass="), "dataVolume"),
        ("ci/external-stores.yaml", ("--set", "modelCache.type=pvc"), "modelCache"),
    ],
)
def test_no_claim_relies_on_a_default_storage_class(helm, chart, values, extra, key):
    """A claim the chart creates names its StorageClass, or the render fails naming the value
    (a cluster without a default class, EKS 1.30+, would leave it Pending)."""
    args = [helm, "template", "rel", str(chart), "--set", f"image.repository={IMAGE}"]
    args += ["-f", str(chart / values)] if values else []
    failed = rendering.helm(*args, *extra)
    assert failed.returncode != 0
    assert f"{key}.storageClass is empty" in failed.stderr, failed.stderr
    assert f"--set {key}.storageClass=<class>" in failed.stderr
    named = objects(helm, chart, values, *extra, "--set", f"{key}.storageClass=named")
    claims = [d for d in named if d["kind"] == "PersistentVolumeClaim"]
    assert claims and all(c["spec"]["storageClassName"] == "named" for c in claims)
    for doc in named:  # and every other claim of the chart names one too
        assert doc["kind"] != "PersistentVolumeClaim" or doc["spec"].get("storageClassName")


@pytest.mark.parametrize("values", VALUES)
def test_no_values_file_needs_more_than_the_baseline_pod_security_standard(helm, chart, values):
    """The baseline Pod Security Standard forbids hostPath volumes, privileged containers and
    added capabilities: no pod of any values file uses them."""
    for doc in objects(helm, chart, values):
        for volume in find_key(doc, "volumes"):
            assert "hostPath" not in volume, (values, doc["metadata"]["name"], volume)
        for context in find_key(doc, "securityContext"):
            assert not context.get("privileged"), values
            assert not (context.get("capabilities") or {}).get("add"), values


def find_key(node: object, key: str) -> list[dict]:
    """Every item under ``key`` anywhere in ``node`` (lists flattened)."""
    if isinstance(node, list):
        return [found for item in node for found in find_key(item, key)]
    if not isinstance(node, dict):
        return []
    found = []
    for name, value in node.items():
        if name == key:
            found += value if isinstance(value, list) else [value]
        found += find_key(value, key)
    return found


def test_a_literal_jwt_secret_is_refused_instead_of_written_into_the_rayservice(helm, chart):
    secret = "s3cr3t-" + "x" * 40
    result = render(helm, chart, None, "--set", f"config.api.auth.jwt.secret={secret}")
    assert result.returncode != 0, "rendered"
    assert "secrets.jwtSecret" in result.stderr and "secret_env" in result.stderr
    assert secret not in result.stdout
    kept = render(
        helm, chart, None, "--set", f"secrets.jwtSecret={secret}",
        "--set", "config.api.auth.jwt.secret_env=SERVE_APP_JWT_SECRET",
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    (service,) = [d for d in rendering.load_all(kept.stdout) if d.get("kind") == "RayService"]
    assert secret not in service["spec"]["serveConfigV2"]
