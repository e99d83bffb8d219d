"""The typed Ray store seam (``deployments/replicas/store_seam.py``): the store deployment and
``RemoteIndex`` each have every method of ``ServedIndex``, with the protocol's parameters
(nothing is dispatched by a method name a type checker cannot see), and nothing more: the
one-query reads of ``IndexMaintenance`` stay in process."""

from __future__ import annotations

import inspect

import pytest

from deployments.replicas.store import StoreDeployment
from deployments.replicas.store_seam import RemoteIndex, ServedOnReplica
from serve_app.stores.base import IndexMaintenance, ServedIndex


def coroutines(protocol: type) -> dict[str, object]:
    return {
        name: member
        for part in reversed(protocol.__mro__)  # a protocol is the narrower ones together
        for name, member in vars(part).items()
        if inspect.iscoroutinefunction(member)
    }


SERVED = coroutines(ServedIndex)
MAINTENANCE = coroutines(IndexMaintenance)
REPLICA_OWNED = {"open", "close"}  # the replica opens at start and closes at shutdown


def test_the_protocol_is_read_whole():
    assert {"search_batch", "fetch_batch", "create_collection", "inspect", "count"} <= set(SERVED)
    assert set(MAINTENANCE) == {"search", "search_many", "fetch"}


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(SERVED))
def test_remote_index_has_each_served_method_with_its_parameters(name):
    method = vars(RemoteIndex).get(name)
    assert method is not None and inspect.iscoroutinefunction(method)
    assert parameters(method) == parameters(SERVED[name])


@pytest.mark.parametrize("name", sorted(set(SERVED) - REPLICA_OWNED))
def test_the_store_deployment_has_each_served_method_with_its_parameters(name):
    method = getattr(StoreDeployment.func_or_class, name, None)
    assert method is not None and inspect.iscoroutinefunction(method)
    assert parameters(method) == parameters(SERVED[name])


def test_the_seam_carries_the_served_protocol_and_nothing_else():
    remote = {n for n, m in vars(RemoteIndex).items() if inspect.iscoroutinefunction(m)}
    replica = {n for n, m in vars(ServedOnReplica).items() if inspect.iscoroutinefunction(m)}
    assert remote == set(SERVED)
    assert replica == set(SERVED) - REPLICA_OWNED
    for name in MAINTENANCE:
        assert not hasattr(StoreDeployment.func_or_class, name)


def test_there_is_no_generic_entry_point():
    assert not hasattr(StoreDeployment.func_or_class, "call")
