"""The typed Ray handle seam: the store deployment and ``RemoteIndex`` each have every method
of the ``ChunkIndex`` protocol, with the protocol's parameters (nothing is dispatched by a
method name a type checker cannot see)."""

from __future__ import annotations

import inspect

import pytest

from deployments.replicas.handles import RemoteIndex
from deployments.replicas.store import StoreDeployment
from serve_app.stores.base import ChunkIndex

PROTOCOL = {
    name: member
    for part in reversed(ChunkIndex.__mro__)  # ChunkIndex is the narrower protocols together
    for name, member in vars(part).items()
    if inspect.iscoroutinefunction(member)
}


def test_the_protocol_is_read_whole():
    assert {"search_batch", "fetch_batch", "create_collection", "inspect", "count"} <= set(PROTOCOL)


REPLICA_OWNED = {"open", "close"}  # the replica opens at start and closes at shutdown


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_remote_index_has_each_protocol_method_with_its_parameters(name):
    method = vars(RemoteIndex).get(name)
    assert method is not None and inspect.iscoroutinefunction(method)
    assert parameters(method) == parameters(PROTOCOL[name])


@pytest.mark.parametrize("name", sorted(set(PROTOCOL) - REPLICA_OWNED))
def test_the_store_deployment_has_each_protocol_method_with_its_parameters(name):
    method = vars(StoreDeployment.func_or_class).get(name)
    assert method is not None and inspect.iscoroutinefunction(method)
    assert parameters(method) == parameters(PROTOCOL[name])


def test_there_is_no_generic_entry_point():
    assert not hasattr(StoreDeployment.func_or_class, "call")
