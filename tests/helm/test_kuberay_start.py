"""The port of KubeRay's `ray start` line (tests/helm/kuberay_start.py) against KubeRay's own
unit tests: every case of ``TestUpdateRayStartParamsResources`` and
``TestGenerateRayStartCommand`` in ``ray-operator/controllers/ray/common/pod_test.go`` at tag
v1.7.0 of github.com/ray-project/kuberay, by its name, with its inputs and expected output."""

from __future__ import annotations

import pytest

from tests.helm.kuberay_start import (
    HEAD,
    WORKER,
    OrderDependent,
    advertised_resources,
    generate_ray_start_command,
    go_json_resources,
    is_gpu_resource_key,
    parse_quantity,
    quantity_value,
    update_ray_start_params_resources,
)

# TestUpdateRayStartParamsResources: (name, initial rayStartParams, group Resources, expected)
UPDATE_RESOURCES_CASES = [
    (
        "No-op when group `Resources` is nil or empty",
        {"existing": "true"},
        None,
        {"existing": "true"},
    ),
    (
        "Basic CPU and Memory set in `Resources` override rayStartParams",
        {},
        {"cpu": "2", "memory": "4Gi"},
        {"num-cpus": "2", "memory": "4294967296"},
    ),
    (
        "Uppercase CPU and GPU resource names set in `Resources` override rayStartParams",
        {},
        {"CPU": "2", "GPU": "4"},
        {"num-cpus": "2", "num-gpus": "4"},
    ),
    (
        "GPU and custom TPU resource set in `Resources` override rayStartParams",
        {},
        {"nvidia.com/gpu": "1", "TPU": "4"},
        {"num-gpus": "1", "resources": """'{"TPU":4}'"""},
    ),
    (
        "Top-level `Resources` should override existing resource params",
        {"num-cpus": "1", "memory": "1000", "resources": """'{"Custom-Resource": 10}'"""},
        {"cpu": "4", "Custom-Resource": "5"},
        {"num-cpus": "4", "memory": "1000", "resources": """'{"Custom-Resource":5}'"""},
    ),
]

# TestGenerateRayStartCommand: (name, node type, rayStartParams, container limits, expected)
GENERATE_COMMAND_CASES = [
    ("WorkerNode with GPU", WORKER, {}, {"nvidia.com/gpu": "1"}, "ray start  --num-gpus=1 "),
    (
        "WorkerNode with MIG GPU",
        WORKER,
        {},
        {"nvidia.com/mig-2g.32gb": "1"},
        "ray start  --num-gpus=1 ",
    ),
    (
        "WorkerNode with TPU",
        WORKER,
        {},
        {"google.com/tpu": "4"},
        """ray start  --resources='{"TPU":4}' """,
    ),
    (
        "HeadNode with Neuron Cores",
        HEAD,
        {},
        {"aws.amazon.com/neuroncore": "4"},
        """ray start --head  --resources='{"neuron_cores":4}' """,
    ),
    (
        "HeadNode with multiple accelerators",
        HEAD,
        {},
        {"aws.amazon.com/neuroncore": "4", "nvidia.com/gpu": "1"},
        """ray start --head  --num-gpus=1  --resources='{"neuron_cores":4}' """,
    ),
    (
        "HeadNode with multiple custom accelerators",
        HEAD,
        {},
        {"google.com/tpu": "8", "aws.amazon.com/neuroncore": "4", "nvidia.com/gpu": "1"},
        """ray start --head  --num-gpus=1  --resources='{"neuron_cores":4}' """,
    ),
    (
        "HeadNode with existing resources",
        HEAD,
        {"resources": '"{"custom_resource":2}"'},
        {"aws.amazon.com/neuroncore": "4"},
        """ray start --head  --resources='{"custom_resource":2,"neuron_cores":4}' """,
    ),
    (
        "HeadNode with existing neuron_cores resources",
        HEAD,
        {"resources": """'{"custom_resource":2,"neuron_cores":3}'"""},
        {"aws.amazon.com/neuroncore": "4"},
        """ray start --head  --resources='{"custom_resource":2,"neuron_cores":3}' """,
    ),
    (
        "HeadNode with existing TPU resources",
        HEAD,
        {"resources": """'{"custom_resource":2,"TPU":4}'"""},
        {"google.com/tpu": "8"},
        """ray start --head  --resources='{"custom_resource":2,"TPU":4}' """,
    ),
    (
        "HeadNode with invalid resources string",
        HEAD,
        {"resources": "{"},
        {"aws.amazon.com/neuroncore": "4"},
        "ray start --head  --resources={ ",
    ),
    ("Invalid node type", "InvalidType", {}, {}, ""),
    (
        "HeadNode with include-log-monitor=false",
        HEAD,
        {"include-log-monitor": "false"},
        {},
        "ray start --head  --include-log-monitor=false ",
    ),
    (
        "HeadNode with include-log-monitor=true",
        HEAD,
        {"include-log-monitor": "true"},
        {},
        "ray start --head  --include-log-monitor=true ",
    ),
]


@pytest.mark.parametrize(
    "initial,group_resources,expected",
    [case[1:] for case in UPDATE_RESOURCES_CASES],
    ids=[case[0] for case in UPDATE_RESOURCES_CASES],
)
def test_update_ray_start_params_resources_as_kuberay_tests_it(initial, group_resources, expected):
    params = dict(initial)
    update_ray_start_params_resources(params, group_resources)
    assert params == expected


@pytest.mark.parametrize(
    "node_type,params,limits,expected",
    [case[1:] for case in GENERATE_COMMAND_CASES],
    ids=[case[0] for case in GENERATE_COMMAND_CASES],
)
def test_generate_ray_start_command_as_kuberay_tests_it(node_type, params, limits, expected):
    resources = {"limits": limits} if limits else {}
    assert generate_ray_start_command(node_type, dict(params), resources) == expected


def test_both_tables_are_complete():
    """13 cases in TestGenerateRayStartCommand and 5 in TestUpdateRayStartParamsResources at
    v1.7.0; names unique (they are the parametrize ids above)."""
    assert len({c[0] for c in GENERATE_COMMAND_CASES}) == len(GENERATE_COMMAND_CASES) == 13
    assert len({c[0] for c in UPDATE_RESOURCES_CASES}) == len(UPDATE_RESOURCES_CASES) == 5


# -- the rules the tables do not spell out, from the Go source -------------------------------
@pytest.mark.parametrize(
    "key,is_gpu",
    [
        ("nvidia.com/gpu", True),
        ("gpu", True),  # "GPU", lower-cased by updateRayStartParamsResources
        ("dense_gpu", True),  # the chart's old custom resource names
        ("sparse_gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("amd.com/gpu", True),
        ("dense_slot", False),
        ("sparse_slot", False),
        ("data_volume", False),
        ("GPU", False),  # IsGPUResourceKey itself is case-sensitive; callers lower-case
        ("gpus", False),
        ("nvidia.com/mig-2g.32gbx", False),
    ],
)
def test_is_gpu_resource_key(key, is_gpu):
    assert is_gpu_resource_key(key) is is_gpu


def test_a_custom_resource_ending_in_gpu_becomes_num_gpus_and_is_lost():
    """The defect this model exists for: `dense_gpu` never reaches --resources."""
    params: dict[str, str] = {}
    update_ray_start_params_resources(params, {"CPU": "6", "GPU": "1", "dense_gpu": "1"})
    assert params == {"num-cpus": "6", "num-gpus": "1"}
    params = {}
    update_ray_start_params_resources(params, {"CPU": "6", "GPU": "1", "dense_slot": "1"})
    assert params == {"num-cpus": "6", "num-gpus": "1", "resources": """'{"dense_slot":1}'"""}


def test_two_names_for_one_flag_with_different_values_depend_on_go_map_order():
    with pytest.raises(OrderDependent):
        update_ray_start_params_resources({}, {"GPU": "1", "dense_gpu": "2"})


@pytest.mark.parametrize(
    "text,value",
    [("4", 4), ("500m", 1), ("3500m", 4), ("4Gi", 4 * 2**30), ("1.5Gi", 1610612736),
     ("2k", 2000), ("1e3", 1000), ("0", 0), (".5", 1), ("7", 7), ("1E", 10**18)],
)  # fmt: skip
def test_quantity_value_rounds_up_as_go_does(text, value):
    assert quantity_value(parse_quantity(text)) == value


@pytest.mark.parametrize("text", ["", "four", "4 Gi", "4gi", "--4"])
def test_bad_quantities_are_refused(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_unparsable_group_quantities_are_skipped():
    params: dict[str, str] = {}
    update_ray_start_params_resources(params, {"cpu": "lots", "data_volume": "1"})
    assert params == {"resources": """'{"data_volume":1}'"""}


@pytest.mark.parametrize(
    "resources,text",
    [({"b": 1.0, "a": 0.5}, '{"a":0.5,"b":1}'), ({"x": 1e21}, '{"x":1e+21}'),
     ({"x": 1.5e-7}, '{"x":1.5e-7}'), ({"x": 100000.0}, '{"x":100000}'),
     ({"<&>": 2.0}, '{"\\u003c\\u0026\\u003e":2}')],
)  # fmt: skip
def test_json_is_written_as_go_writes_it(resources, text):
    assert go_json_resources(resources) == text


def test_advertised_resources_read_the_line_with_rays_cli():
    line = (
        "ray start  --address=h:6379  --block  --memory=1073741824  --num-cpus=6  "
        """--num-gpus=1  --resources='{"dense_slot":1,"zero":0}' """
    )
    assert advertised_resources(line) == {
        "CPU": 6, "GPU": 1, "memory": 1073741824, "dense_slot": 1,
    }  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [
        """ray start --num-cpus=1 --resources='{"CPU":1}' """,  # Ray refuses it there
        """ray start --num-cpus=1 --resources='{"slot":0.5}' """,  # a node's are whole numbers
        "ray start --num-cpus=1 --resources={ ",
        "ray start --num-gpus=1 ",  # Ray would count the CPUs itself
    ],
)
def test_lines_ray_would_not_start_as_written_are_refused(line):
    with pytest.raises(ValueError):
        advertised_resources(line)
