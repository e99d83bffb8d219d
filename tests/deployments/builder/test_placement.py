"""A configuration whose starting replicas cannot fit the Ray cluster fails at start, naming
what does not fit, instead of Serve waiting for ever to schedule them."""

from pathlib import Path

import pytest

from deployments.builder.placement import check_fits, initial_demand
from deployments.settings import load_service_config
from serve_app.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
GPU_SUITE = ROOT / "benchmarks" / "gpu.yaml"
H200 = {"CPU": 16.0, "GPU": 1.0, "memory": 100e9}


def gpu_suite(**environ: str):
    """The GPU suite's configuration as its ingest step runs it (model replicas at 4 CPUs)."""
    model_cpus = {f"SERVE_APP__SERVE__{m}__NUM_CPUS": "4" for m in ("DENSE", "SPLADE")}
    return load_service_config(GPU_SUITE, environ={**model_cpus, **environ})


def test_the_gpu_suites_chunker_at_4_cpus_does_not_fit_16_cores():
    # Seen on an H200 (16 cores): the suite's second ingest hung for the whole device call.
    config = gpu_suite(SERVE_APP__SERVE__CHUNKER__NUM_CPUS="4")
    with pytest.raises(ConfigError) as error:
        check_fits(config, H200)
    message = str(error.value)
    assert "CPU 18 of 16" in message
    assert "ingress 2 x 2" in message and "chunker 1 x 4" in message
    assert "GPU" not in message.split(":")[0]  # 0.4 + 0.3 GPUs fit on one


def test_the_gpu_suites_chunker_at_1_cpu_fits_16_cores():
    check_fits(gpu_suite(SERVE_APP__SERVE__CHUNKER__NUM_CPUS="1"), H200)


def test_fractional_gpus_add_up_per_replica():
    config = gpu_suite(SERVE_APP__SERVE__DENSE__NUM_REPLICAS="2")  # 2 x 0.4 + 0.3 GPUs
    with pytest.raises(ConfigError, match=r"GPU 1.1 of 1\b.*dense 2 x 0.4, splade 1 x 0.3"):
        check_fits(config, {**H200, "CPU": 64.0})


def test_only_bound_deployments_and_starting_replicas_count():
    config = load_service_config(
        GPU_SUITE,
        environ={
            "SERVE_APP__SERVE__INGRESS__AUTOSCALING__MIN_REPLICAS": "1",
            "SERVE_APP__SERVE__INGRESS__AUTOSCALING__MAX_REPLICAS": "8",
        },
    )
    demand = initial_demand(config)
    assert "reranker" not in demand and "llm" not in demand  # disabled: never bound
    assert demand["ingress"] == (1, {"CPU": 2.0})
    assert demand["dense"] == (1, {"CPU": 1.0, "GPU": 0.4})


def test_custom_resources_the_cluster_lacks_are_named():
    config = gpu_suite(SERVE_APP__SERVE__STORE__RESOURCES='{"store_slot": 1}')
    with pytest.raises(ConfigError, match=r"store_slot 1 of 0\b.*store 1 x 1"):
        check_fits(config, {**H200, "CPU": 64.0})
