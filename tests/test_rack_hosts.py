"""A node whose NVLink domain spans several hosts (a GB200 NVL72 rack: 16 compute trays of 4
GPUs in a 64-GPU job) has a storage client per host, not one for the rack (a semantic review,
2026-12-07, found its checkpoint written and its restart read through one client, 8-14 times
slower than the same state on eight H100 nodes)."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO

from simulator.config.loading import load_scenario
from simulator.interruptions import checkpoint

RACK = REPO / "scenarios" / "llama3-70b-1xgb200-nvl72.yaml"


def test_a_rack_has_a_storage_client_per_compute_tray() -> None:
    rs = load_scenario(RACK)
    assert rs.gpus_per_node == 64 and rs.nodes == 1
    assert rs.fabric.hosts(rs.gpus_per_node) == 16
    st, ck = rs.storage, checkpoint(rs)
    writers = 16  # the optimizer state is sharded over every host
    write = min(st.write_gbps_per_client.value * writers, st.aggregate_write_gbps.value)
    read = min(st.read_gbps_per_client.value * 16, st.aggregate_read_gbps.value)
    assert ck.write_s == pytest.approx(ck.bytes / (write * 1e9))
    assert ck.read_s == pytest.approx(ck.read_bytes / (read * 1e9))


def test_one_host_per_node_where_the_fabric_says_nothing() -> None:
    """An HGX node is one host: the same storage figures as before the field existed."""
    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml")
    assert rs.fabric.gpus_per_host is None
    assert rs.fabric.hosts(rs.gpus_per_node) == 1


def test_more_hosts_never_write_slower() -> None:
    """Splitting a node into more hosts adds storage clients: a checkpoint is written and read
    back no slower (the storage system's aggregate caps both)."""
    rs = load_scenario(RACK)
    times = []
    for per_host in (64, 16, 8, 4, 2):
        fab = rs.fabric.model_copy(
            update={"gpus_per_host": rs.fabric.gpus_per_host.model_copy(update={"value": per_host})}
        )
        ck = checkpoint(rs.model_copy(update={"fabric": fab}))
        times.append((ck.write_s, ck.read_s))
    assert all(a[0] >= b[0] and a[1] >= b[1] for a, b in zip(times, times[1:], strict=False))
    assert times[0][0] > times[-1][0]


def test_the_data_loader_reads_through_every_host_of_the_rack() -> None:
    """A storage-bound input on the rack: the loader's per-node link carries a client per
    host, so the stall shrinks with the hosts (one host per node: 16 times the read time)."""
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    data = copy.deepcopy(load_scenario(RACK).raw)
    data["cluster"]["storage"] = "nfs"
    data["training"]["input_bytes_per_token"] = 40000
    fast = simulate(resolve_dict(data), scaling=False).engine
    data["cluster"]["fabric"] = {"profile": "nvlink5-nvl72", "gpus_per_host": None}
    slow = simulate(resolve_dict(data), scaling=False).engine
    assert slow.loader_done > fast.loader_done
