"""How a failed call to another deployment reaches the client: Ray's and Serve's own exception
types (a dead or restarting replica, back-pressure, a deployment with no replica) become 503
SERVICE_UNAVAILABLE naming the deployment; an error the library raised on purpose inside the
replica keeps its own code; anything else that failed inside the replica is a 503 too, with
the exception type and not its text."""

from __future__ import annotations

import grpc
import pytest
from ray import exceptions as ray_exceptions
from ray.serve import exceptions as serve_exceptions
from ray.serve._private.common import DeploymentID

from deployments.replicas.handles import call
from serve_app.errors import InvalidInputError, ServiceUnavailableError


async def _raising(error: BaseException) -> None:
    raise error


def _task_error(cause: BaseException) -> ray_exceptions.RayTaskError:
    return ray_exceptions.RayTaskError("search", "Traceback (most recent call last): ...", cause)


@pytest.mark.parametrize(
    "error",
    [
        ray_exceptions.RayActorError(error_msg="the actor died unexpectedly"),
        ray_exceptions.ActorUnavailableError("the actor is restarting", None),
        serve_exceptions.BackPressureError(num_queued_requests=64, max_queued_requests=64),
        serve_exceptions.DeploymentUnavailableError(DeploymentID("store", "retrieval")),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_an_unreachable_deployment_is_503_naming_it(error):
    with pytest.raises(ServiceUnavailableError) as raised:
        await call("store", _raising(error))
    assert raised.value.status == 503 and raised.value.code == "SERVICE_UNAVAILABLE"
    assert str(raised.value) == f"store deployment unavailable: {type(error).__name__}"


async def test_an_error_raised_on_purpose_in_the_replica_keeps_its_code():
    with pytest.raises(InvalidInputError, match="top_k too large"):
        await call("store", _raising(_task_error(InvalidInputError("top_k too large"))))


async def test_any_other_failure_in_the_replica_is_503_without_its_text():
    error = _task_error(ValueError("secret internal detail"))
    with pytest.raises(ServiceUnavailableError) as raised:
        await call("dense", _raising(error))
    assert str(raised.value) == "dense deployment failed: ValueError"
    assert "secret" not in str(raised.value)


async def test_a_successful_call_returns_its_value():
    async def value() -> int:
        return 7

    assert await call("dense", value()) == 7


async def test_a_grpc_transport_failure_is_503_naming_the_deployment_and_the_status():
    """Between replicas over gRPC (Serve's throughput mode), a failed call raises gRPC's own
    error (a message over the receive limit: RESOURCE_EXHAUSTED), not Ray's."""
    error = grpc.aio.AioRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="Received message larger than max (4718592 vs. 4194304)",
    )
    with pytest.raises(ServiceUnavailableError) as raised:
        await call("chunker", _raising(error))
    assert raised.value.status == 503
    assert str(raised.value) == "chunker deployment call failed: gRPC RESOURCE_EXHAUSTED"
