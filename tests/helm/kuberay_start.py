"""KubeRay v1.7.0's `ray start` line, ported from its Go source, and what the raylet started by
that line advertises (read with Ray's own `ray start` parser).

KubeRay builds each Ray pod's command in ``ray-operator/controllers/ray/common/pod.go`` (tag
v1.7.0): ``DefaultHeadPodTemplate`` / ``DefaultWorkerPodTemplate`` call
``updateRayStartParamsResources`` (the group's top-level ``resources`` field rewritten into
rayStartParams), ``updateRayStartParamsLabels`` and ``setMissingRayStartParams``; the head gets
``no-monitor`` when the in-tree autoscaler is on; ``BuildPod`` then calls
``generateRayStartCommand`` with the Ray container's resources (``num-cpus`` / ``memory`` from
limits, GPUs and the custom accelerators from limits) and ``convertParamMap`` writes the flags.
``utils.IsGPUResourceKey`` (``ray-operator/controllers/ray/utils/resources.go``) decides what
counts as a GPU. The rules are ported here, not the code; ``tests/helm/test_kuberay_start.py``
checks the port against every case of KubeRay's own tables ``TestUpdateRayStartParamsResources``
and ``TestGenerateRayStartCommand`` (``ray-operator/controllers/ray/common/pod_test.go``).

The point of the model: Ray's Python autoscaler reads the same group spec with rules of its own
(``ray.autoscaler._private.kuberay.autoscaling_config``), and the two disagree. KubeRay turns any
group resource whose lower-cased name ends in "gpu" (``dense_gpu`` included) into ``--num-gpus``
and never into ``--resources``; the autoscaler keeps it as a custom resource. Scheduling happens
on what the raylet advertises, so that is what a placement test must pack into.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
import shlex
from collections.abc import Mapping
from decimal import ROUND_UP, Decimal
from typing import Any

HEAD = "head"
WORKER = "worker"

NEURON_CORE_CONTAINER_RESOURCE = "aws.amazon.com/neuroncore"
TPU_CONTAINER_RESOURCE = "google.com/tpu"
CUSTOM_ACCELERATOR_TO_RAY_RESOURCE = {
    NEURON_CORE_CONTAINER_RESOURCE: "neuron_cores",
    TPU_CONTAINER_RESOURCE: "TPU",
}
"""pod.go's customAcceleratorToRayResourceMap: container resource -> Ray resource."""

DEFAULT_METRICS_PORT = 8080
DEFAULT_DASHBOARD_AGENT_LISTEN_PORT = 52365
DEFAULT_GCS_PORT = 6379
# convertParamMap writes these as --key=value even when the value is "true" or "false".
_EXPLICIT_BOOLEAN_OPTIONS = ("log-color", "include-dashboard", "include-log-monitor")
_MIG_KEY = re.compile(r"nvidia\.com/mig-\d+g\.\d+gb$")


class QuantityError(ValueError):
    """Not a Kubernetes resource quantity (resource.ParseQuantity would fail)."""


class ResourcesJsonError(ValueError):
    """rayStartParams' `resources` is no JSON object of numbers (Go's json.Unmarshal fails)."""


class OrderDependent(ValueError):
    """KubeRay's result depends on Go's random map iteration order: two group resources set
    the same `ray start` flag to different values."""


# -- k8s.io/apimachinery resource.Quantity ---------------------------------------------------
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[mkMGTPE]?)$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity ("4", "500m", "4Gi", "1e3"), as ParseQuantity reads it."""
    raw = str(text)
    match = _QUANTITY.match(raw)
    if not match:
        raise QuantityError(f"quantities must match the regular expression: {raw!r}")
    number = Decimal(match["number"])
    suffix = match["suffix"]
    if suffix in _BINARY:
        value = number * (Decimal(2) ** _BINARY[suffix])
    elif suffix in _DECIMAL:
        value = number.scaleb(_DECIMAL[suffix])
    else:
        value = number.scaleb(int(suffix[1:]))
    return -value if match["sign"] == "-" else value


def quantity_value(quantity: Decimal) -> int:
    """Quantity.Value(): rounded to an integer away from zero ("500m" -> 1)."""
    return int(quantity.to_integral_value(rounding=ROUND_UP))


# -- encoding/json --------------------------------------------------------------------------
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _go_json_string(text: str) -> str:
    out = []
    for char in text:
        if char in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[char])
        elif ord(char) < 0x20 or char in "<>&\u2028\u2029":  # Go escapes HTML characters too
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _go_json_float(value: float) -> str:
    """A float64 as encoding/json writes it: the shortest digits that read back, positional
    unless below 1e-6 or from 1e21 on (then exponent form, "e-07" shortened to "e-7")."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    shortest = Decimal(repr(value)).normalize()
    sign, digits, exponent = shortest.as_tuple()
    assert isinstance(exponent, int)
    if 1e-6 <= abs(value) < 1e21:
        text = format(shortest, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}".replace(
        "e-0", "e-"
    )


def go_json_resources(resources: Mapping[str, float]) -> str:
    """json.Marshal of a map[string]float64: keys sorted, no spaces."""
    items = sorted(resources.items())
    return "{" + ",".join(f"{_go_json_string(k)}:{_go_json_float(v)}" for k, v in items) + "}"


def _reject_constant(name: str) -> float:
    raise ValueError(f"invalid JSON constant {name}")


def resources_map(ray_start_params: Mapping[str, str]) -> dict[str, float]:
    """getResourcesMap: the `resources` parameter, surrounding quotes and spaces trimmed, as a
    map[string]float64 (an empty map when absent). ResourcesJsonError where Go's Unmarshal
    fails."""
    if "resources" not in ray_start_params:
        return {}
    text = ray_start_params["resources"].strip("'\"` ")
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except ValueError as error:
        raise ResourcesJsonError(f"failed to unmarshal resources {text!r}: {error}") from error
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise ResourcesJsonError(f"json: cannot unmarshal into map[string]float64: {text}")
    out: dict[str, float] = {}
    for key, value in parsed.items():
        if value is None:
            value = 0.0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ResourcesJsonError(f"json: cannot unmarshal {value!r} into float64 ({key})")
        out[key] = float(value)
    return out


# -- the rules ------------------------------------------------------------------------------
def is_gpu_resource_key(key: str) -> bool:
    """utils.IsGPUResourceKey: a name ending in "gpu", or an NVIDIA MIG slice name."""
    return key.endswith("gpu") or _MIG_KEY.search(key) is not None


def update_ray_start_params_resources(
    ray_start_params: dict[str, str], group_resources: Mapping[str, Any] | None
) -> None:
    """updateRayStartParamsResources: the group's `resources` field overrides rayStartParams.
    Per name, lower-cased for the checks: "cpu" -> num-cpus, "memory" -> memory (both
    Quantity.Value()), a GPU key -> num-gpus, anything else into a `resources` JSON that
    replaces the old one (written only when there is at least one such name). Unparsable
    quantities are skipped."""
    if not group_resources:
        return
    flags: dict[str, tuple[str, str]] = {}
    custom: dict[str, float] = {}
    for name, raw in group_resources.items():
        try:
            quantity = parse_quantity(raw)
        except QuantityError:
            continue
        normalized = name.lower()
        if normalized == "cpu":
            flag = "num-cpus"
        elif normalized == "memory":
            flag = "memory"
        elif is_gpu_resource_key(normalized):
            flag = "num-gpus"
        else:
            custom[name] = float(quantity)
            continue
        value = str(quantity_value(quantity))
        if flag in flags and flags[flag][1] != value:
            raise OrderDependent(
                f"{flags[flag][0]} and {name} both set --{flag} ({flags[flag][1]} vs {value}): "
                "KubeRay keeps whichever Go's map iteration visits last"
            )
        flags[flag] = (name, value)
    for flag, (_, value) in flags.items():
        ray_start_params[flag] = value
    if custom:
        ray_start_params["resources"] = f"'{go_json_resources(custom)}'"


def update_ray_start_params_labels(
    ray_start_params: dict[str, str], group_labels: Mapping[str, str] | None
) -> None:
    """updateRayStartParamsLabels: the group's `labels` replace --labels (sorted key=value)."""
    if group_labels:
        ray_start_params["labels"] = ",".join(
            f"{k}={group_labels[k]}" for k in sorted(group_labels)
        )


def set_missing_ray_start_params(
    ray_start_params: dict[str, str], node_type: str, head_port: str, fqdn_ray_ip: str
) -> dict[str, str]:
    """setMissingRayStartParams: the worker's GCS address, the head's dashboard host, the
    metrics port, --block and the dashboard agent's port."""
    if node_type == WORKER and "address" not in ray_start_params:
        ray_start_params["address"] = f"{fqdn_ray_ip}:{head_port}"
    if node_type == HEAD:
        ray_start_params.setdefault("dashboard-host", "0.0.0.0")
    ray_start_params.setdefault("metrics-export-port", str(DEFAULT_METRICS_PORT))
    ray_start_params["block"] = "true"
    ray_start_params.setdefault(
        "dashboard-agent-listen-port", str(DEFAULT_DASHBOARD_AGENT_LISTEN_PORT)
    )
    return ray_start_params


def _container_quantity(
    resources: Mapping[str, Mapping[str, Any]], kind: str, name: str
) -> Decimal:
    raw = (resources.get(kind) or {}).get(name)
    return Decimal(0) if raw is None else parse_quantity(raw)


def add_well_known_accelerator_resources(
    ray_start_params: dict[str, str], limits: Mapping[str, Any] | None
) -> None:
    """addWellKnownAcceleratorResources: from the container's limits, in sorted name order,
    the first non-zero GPU key sets num-gpus (unless set) and the first non-zero custom
    accelerator is added to the `resources` JSON (unless one is there already).
    ResourcesJsonError where `resources` is no JSON object (KubeRay logs it, adds nothing)."""
    if not limits:
        return
    resources = resources_map(ray_start_params)
    added = any(r in resources for r in CUSTOM_ACCELERATOR_TO_RAY_RESOURCE.values())
    for key in sorted(limits):
        quantity = parse_quantity(limits[key])
        if "num-gpus" not in ray_start_params and is_gpu_resource_key(key) and quantity != 0:
            ray_start_params["num-gpus"] = str(quantity_value(quantity))
        if not added and key in CUSTOM_ACCELERATOR_TO_RAY_RESOURCE and quantity != 0:
            ray_name = CUSTOM_ACCELERATOR_TO_RAY_RESOURCE[key]
            if ray_name not in resources:
                resources[ray_name] = float(quantity)
                ray_start_params["resources"] = f"'{go_json_resources(resources)}'"
            added = True


def convert_param_map(ray_start_params: Mapping[str, str]) -> str:
    """convertParamMap: " --key=value " per parameter in sorted order; a "true" value is the
    bare flag and a "false" one is dropped, except for the options that take a boolean."""
    out = []
    for option in sorted(ray_start_params):
        argument = ray_start_params[option]
        if argument.lower() in ("true", "false") and option not in _EXPLICIT_BOOLEAN_OPTIONS:
            if argument.lower() == "true":
                out.append(f" --{option} ")
        else:
            out.append(f" --{option}={argument} ")
    return "".join(out)


def generate_ray_start_command(
    node_type: str,
    ray_start_params: dict[str, str],
    container_resources: Mapping[str, Mapping[str, Any]] | None,
) -> str:
    """generateRayStartCommand: num-cpus from the CPU limit, else the request (Value(), unless
    set); memory from the memory limit (unless set); the accelerators; then the line ("" for
    an unknown node type)."""
    resources = container_resources or {}
    if "num-cpus" not in ray_start_params:
        cpu = _container_quantity(resources, "limits", "cpu")
        if cpu == 0:
            cpu = _container_quantity(resources, "requests", "cpu")
        if cpu != 0:
            ray_start_params["num-cpus"] = str(quantity_value(cpu))
    if "memory" not in ray_start_params:
        memory = _container_quantity(resources, "limits", "memory")
        if memory != 0:
            ray_start_params["memory"] = str(quantity_value(memory))
    # KubeRay logs a bad `resources` JSON and starts the node with what it has.
    with contextlib.suppress(ResourcesJsonError):
        add_well_known_accelerator_resources(ray_start_params, resources.get("limits"))
    if node_type == HEAD:
        return f"ray start --head {convert_param_map(ray_start_params)}"
    if node_type == WORKER:
        return f"ray start {convert_param_map(ray_start_params)}"
    return ""


# -- a rendered RayCluster spec --------------------------------------------------------------
def group_ray_start_command(
    cluster_spec: Mapping[str, Any],
    group: Mapping[str, Any],
    node_type: str,
    fqdn_ray_ip: str = "rel-head-svc.search.svc.cluster.local",
) -> str:
    """The `ray start` line KubeRay gives a pod of ``group`` (headGroupSpec or one of
    workerGroupSpecs) of the RayCluster spec ``cluster_spec``; nothing rendered is changed."""
    params: dict[str, str] = {
        k: str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in copy.deepcopy(group.get("rayStartParams") or {}).items()
    }
    update_ray_start_params_resources(params, group.get("resources"))
    update_ray_start_params_labels(params, group.get("labels"))
    head_params = cluster_spec["headGroupSpec"].get("rayStartParams") or {}
    head_port = str(head_params.get("port", DEFAULT_GCS_PORT))
    set_missing_ray_start_params(params, node_type, head_port, fqdn_ray_ip)
    if node_type == HEAD and cluster_spec.get("enableInTreeAutoscaling"):
        params["no-monitor"] = "true"
    container = group["template"]["spec"]["containers"][0]
    return generate_ray_start_command(node_type, params, container.get("resources"))


def advertised_resources(line: str) -> dict[str, float]:
    """The logical resources a raylet started with ``line`` offers to Ray's scheduler: the
    line split as bash splits it and parsed by Ray's own `ray start` CLI; CPU, GPU and memory
    from their flags, custom resources from --resources (Ray refuses CPU, GPU and memory
    there); zero entries dropped, as Ray drops them. Ray's detected extras (object store, the
    node id, accelerator_type:<model> on GPU nodes) are not modelled: no deployment here asks
    for them. ValueError where Ray would not start or would detect CPUs or GPUs itself."""
    from ray._private.parameter import RayParams
    from ray.scripts.scripts import start

    argv = shlex.split(line)
    if argv[:2] != ["ray", "start"]:
        raise ValueError(f"not a ray start line: {line!r}")
    params = start.make_context("start", argv[2:]).params
    try:
        custom = json.loads(params["resources"])
    except json.JSONDecodeError as error:
        raise ValueError(f"ray start would abort: --resources={params['resources']}") from error
    if not isinstance(custom, dict):
        raise ValueError(f"ray start would abort: --resources={params['resources']}")
    try:
        RayParams(resources=custom)
    except AssertionError as error:
        raise ValueError(f"ray start would abort: {error}") from error
    if params["num_cpus"] is None:
        raise ValueError(f"no --num-cpus: Ray would count the node's CPUs itself ({line!r})")
    resources: dict[str, float] = {"CPU": params["num_cpus"], **custom}
    if params["num_gpus"] is not None:
        resources["GPU"] = params["num_gpus"]
    if params["memory"] is not None:
        resources["memory"] = params["memory"]
    for name, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise ValueError(f"ray start would abort: {name}={amount!r} is no resource quantity")
        if not float(amount).is_integer():  # ResourceAndLabelSpec.to_resource_dict
            raise ValueError(f"ray start would abort: {name}={amount} is not a whole number")
    return {name: amount for name, amount in resources.items() if amount != 0}


def raylet_resources(cluster_spec: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """group name ("headgroup" for the head, as Ray's autoscaler names it) -> what each of its
    pods' raylets advertise."""
    out = {
        "headgroup": advertised_resources(
            group_ray_start_command(cluster_spec, cluster_spec["headGroupSpec"], HEAD)
        )
    }
    for group in cluster_spec.get("workerGroupSpecs") or []:
        out[group["groupName"]] = advertised_resources(
            group_ray_start_command(cluster_spec, group, WORKER)
        )
    return out
