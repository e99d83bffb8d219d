"""The RayService the chart renders, field by field against KubeRay v1.7.0's API types: no field
KubeRay marks deprecated (tests/helm/kuberay_types.py, the list derived from its Go types and
checked in), and the initializing timeout KubeRay enforces."""

from __future__ import annotations

import pytest

from tests.helm.kuberay_types import deprecated_paths, load_deprecated, parse_structs, values_at
from tests.helm.test_chart import CHART, HELM, VALUES, objects, rayservice
from tests.helm.test_chart import render as render_raw

# Option sets that add RayService fields beyond each values file's own.
OPTIONS = [
    (),
    ("--set", "gcsFaultTolerance.enabled=true", "--set", "gcsFaultTolerance.redisAddress=r:6379"),
    ("--set", "autoscaler.enabled=false"),
    ("--set", "upgradeStrategy=None"),
]


def render(values: str | None, *extra: str) -> dict:
    return rayservice(objects(str(HELM), CHART, values, *extra))


def test_the_deprecated_list_is_kuberays_v1_7_0():
    """The checked-in list names the two RayService spec fields v1.7.0 ignores (its comment
    "This field is not used anymore", kuberay#1685), each with its source line."""
    deprecated = load_deprecated()
    assert {"spec.serviceUnhealthySecondThreshold", "spec.deploymentUnhealthySecondThreshold"} <= (
        set(deprecated)
    )
    for entry in deprecated.values():
        assert entry["source"].startswith("ray-operator/apis/ray/v1/")
        assert entry["comment"].startswith("Deprecated")


GO_TYPES = """
type Outer struct {
\tmetav1.ObjectMeta `json:"metadata,omitempty"`
\t// Deprecated: use Inner.
\t// +optional
\tOld *int32 `json:"old,omitempty"`
\tItems []Inner `json:"items"`
\tByName map[string]Inner `json:"byName,omitempty"`
}

type Inner struct {
\t// Kept.
\tKeep string `json:"keep"`
\t// Deprecated: gone soon.
\tGone string `json:"gone,omitempty"`
}
"""


def test_the_derivation_reads_doc_comments_through_nested_types():
    structs = parse_structs(GO_TYPES, "x_types.go")
    found = deprecated_paths(structs, root="Outer")
    assert set(found) == {"old", "items[].gone", "byName{}.gone"}
    assert found["old"] == {
        "field": "Outer.Old",
        "source": "x_types.go:6",
        "comment": "Deprecated: use Inner.",
    }


def test_the_check_finds_a_deprecated_field_where_it_is():
    service = {"spec": {"serviceUnhealthySecondThreshold": 900, "rayClusterConfig": {}}}
    assert values_at(service, "spec.serviceUnhealthySecondThreshold") == [900]
    assert values_at(service, "spec.deploymentUnhealthySecondThreshold") == []
    nested = {"a": [{"b": {"x": {"c": 1}, "y": {"c": 2}}}]}
    assert values_at(nested, "a[].b{}.c") == [1, 2]


@pytest.mark.parametrize("extra", OPTIONS, ids=["plain", "gcs-ft", "no-autoscaler", "in-place"])
@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_no_deprecated_field_in_any_render(values, extra):
    service = render(values, *extra)
    for path, entry in load_deprecated().items():
        assert values_at(service, path) == [], f"{path}: {entry['comment']} ({entry['source']})"


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_the_initializing_timeout_is_set(values):
    annotations = render(values)["metadata"]["annotations"]
    assert annotations["ray.io/initializing-timeout"] == "1h"


@pytest.mark.parametrize(
    "setting,annotation",
    [("45m", "45m"), ("5400", "5400"), ("1h30m", "1h30m"), ("", None)],
)
def test_the_initializing_timeout_follows_the_value(setting, annotation):
    flag = "--set-string" if setting.isdigit() else "--set"
    metadata = render(None, flag, f"initializingTimeout={setting}")["metadata"]
    assert (metadata.get("annotations") or {}).get("ray.io/initializing-timeout") == annotation


@pytest.mark.parametrize("setting", ["0", "0s", "soon", "-5m"])
def test_a_timeout_kuberay_refuses_is_refused(setting):
    """KubeRay's validateInitializingTimeout refuses anything but a positive Go duration or
    positive whole seconds: the RayService would not be reconciled at all."""
    result = render_raw(str(HELM), CHART, None, "--set-string", f"initializingTimeout={setting}")
    assert result.returncode != 0 and "initializingTimeout" in result.stderr, result.stderr
