"""Network physics: alpha-beta collective costs, compared with the textbook alpha-beta forms
(rank placement and topology are in ``test_topology``, bandwidth sharing of flows in
``test_flows``)."""

from __future__ import annotations

import itertools
import math

import pytest

from simulator.network.collectives import (
    ALGOS,
    GroupShape,
    bus_factor,
    choose,
    collective_time,
    phase_time,
    phases,
)
from simulator.network.nccl import Phase, TierLink, with_protocol

REL = 1e-12

NS = (2, 3, 4, 8, 16)
SIZES = (1.0, 1e3, 4.5e6, 3.3e8)
FABRIC = TierLink(bandwidth=360e9, alpha=2e-6)
NETWORK = TierLink(bandwidth=46e9, alpha=5e-6)


# -- collectives ------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "size"), list(itertools.product(NS, SIZES)))
def test_ring_all_reduce_is_textbook(n: int, size: float) -> None:
    a, b = FABRIC.alpha, FABRIC.bandwidth
    want = 2 * (n - 1) * a + 2 * (n - 1) / n * size / b
    got = collective_time("all_reduce", "ring", GroupShape(n, 1), size, FABRIC)
    assert got == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize(("n", "size"), list(itertools.product(NS, SIZES)))
def test_ring_all_gather_and_reduce_scatter_are_textbook(coll: str, n: int, size: float) -> None:
    a, b = FABRIC.alpha, FABRIC.bandwidth
    want = (n - 1) * a + (n - 1) / n * size / b
    for algo in ALGOS:  # NCCL has only rings for these: every algorithm name gives the ring
        got = collective_time(coll, algo, GroupShape(n, 1), size, FABRIC)  # type: ignore[arg-type]
        assert got == pytest.approx(want, rel=REL)


@pytest.mark.parametrize(("n", "size"), list(itertools.product(NS, SIZES)))
def test_tree_broadcast_and_p2p_are_textbook(n: int, size: float) -> None:
    a, b = FABRIC.alpha, FABRIC.bandwidth
    log = math.ceil(math.log2(n))
    shape = GroupShape(n, 1)
    assert collective_time("all_reduce", "tree", shape, size, FABRIC) == pytest.approx(
        2 * log * a + 2 * size / b, rel=REL
    )
    assert collective_time("broadcast", "tree", shape, size, FABRIC) == pytest.approx(
        log * a + size / b, rel=REL
    )
    assert collective_time("broadcast", "ring", shape, size, FABRIC) == pytest.approx(
        (n - 1) * a + size / b, rel=REL
    )
    assert collective_time("p2p", "ring", GroupShape(2, 1), size, FABRIC) == pytest.approx(
        a + size / b, rel=REL
    )


def test_nothing_to_do_costs_nothing() -> None:
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        assert collective_time(coll, "ring", GroupShape(1, 1), 1e9, FABRIC) == 0.0  # type: ignore[arg-type]
        assert collective_time(coll, "ring", GroupShape(8, 1), 0.0, FABRIC) == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize("n", NS)
def test_bus_factor(n: int) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for coll in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(coll, n) == pytest.approx((n - 1) / n)  # type: ignore[arg-type]
    assert bus_factor("broadcast", n) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0
    # A ring moves busbw-factor × S per rank: nccl-tests' busbw is the link bandwidth.
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        (ph,) = phases(coll, "ring", GroupShape(n, 1), 1e6, FABRIC, None)  # type: ignore[arg-type]
        assert ph.wire_bytes == pytest.approx(bus_factor(coll, n) * 1e6)  # type: ignore[arg-type]


def _with_protocols(coll: str, algo: str, shape: GroupShape, size: float) -> float:
    """An algorithm's time with each phase under its faster NCCL protocol (as choose does)."""
    out = 0.0
    for p in phases(coll, algo, shape, size, FABRIC, NETWORK):  # type: ignore[arg-type]
        bw = (FABRIC if p.tier == "fabric" else NETWORK).bandwidth
        q = with_protocol(p, bw, size if algo == "tree" and coll == "all_reduce" else None)
        out += q.latency + q.wire_bytes / bw
    return out


def test_choose_picks_latency_bound_tree_across_nodes_for_tiny_messages() -> None:
    slow = TierLink(bandwidth=NETWORK.bandwidth, alpha=50e-6)
    shape = GroupShape(64, 8)
    assert choose("all_reduce", shape, 256.0, FABRIC, slow)[0] == "tree"
    # No tree inside one node (NCCL's tree is a chain there), and none for all-gather.
    assert choose("all_reduce", GroupShape(8, 1), 256.0, FABRIC)[0] == "ring"
    assert choose("all_gather", shape, 1024.0, FABRIC, slow)[0] != "tree"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_choose_returns_the_fastest_contention_free_time(coll: str, size: float) -> None:
    for shape in (GroupShape(8, 1), GroupShape(16, 2), GroupShape(32, 32)):
        _algo, ph, t = choose(coll, shape, size, FABRIC, NETWORK)  # type: ignore[arg-type]
        times = [
            _with_protocols(coll, a, shape, size)
            for a in ALGOS
            if not (a == "hierarchical" and shape.per_node <= 1)
            and not (a == "tree" and (shape.nodes <= 1 or coll not in ("all_reduce", "broadcast")))
        ]
        if coll == "all_reduce" and shape.nodes > 1:
            # across nodes NCCL's tuner chooses, not the fastest (test_nccl_tuner)
            assert t >= min(times) * (1 - REL)
        else:
            assert t == pytest.approx(min(times), rel=REL)
        net = sum(
            p.latency + p.wire_bytes / (FABRIC if p.tier == "fabric" else NETWORK).bandwidth
            for p in ph
        )
        assert t == pytest.approx(net, rel=REL)


def test_hierarchical_all_reduce_crosses_both_tiers() -> None:
    g, k, size = 8, 4, 1e8
    ph = phases("all_reduce", "hierarchical", GroupShape(g * k, k), size, FABRIC, NETWORK)
    assert [p.tier for p in ph] == ["fabric", "network", "fabric"]
    rs_, ar, ag = ph
    assert rs_ == Phase("fabric", (g - 1) * FABRIC.alpha, (g - 1) / g * size, g - 1)
    assert ar.wire_bytes == pytest.approx(2 * (k - 1) / k * size / g)
    assert ar.latency == pytest.approx(2 * (k - 1) * NETWORK.alpha)
    assert ag == rs_
    want = (
        2 * (g - 1) * FABRIC.alpha
        + 2 * (g - 1) / g * size / FABRIC.bandwidth
        + 2 * (k - 1) * NETWORK.alpha
        + 2 * (k - 1) / k * size / g / NETWORK.bandwidth
    )
    assert collective_time(
        "all_reduce", "hierarchical", GroupShape(g * k, k), size, FABRIC, NETWORK
    ) == pytest.approx(want, rel=REL)
    ag_ph = phases("all_gather", "hierarchical", GroupShape(g * k, k), size, FABRIC, NETWORK)
    assert [p.tier for p in ag_ph] == ["network", "fabric"]
    rs_ph = phases("reduce_scatter", "hierarchical", GroupShape(g * k, k), size, FABRIC, NETWORK)
    assert [p.tier for p in rs_ph] == ["fabric", "network"]


def test_flat_ring_across_nodes_shares_the_nodes_nics_at_the_slower_latency() -> None:
    n, size = 16, 1e7
    slow_fabric = TierLink(FABRIC.bandwidth, 9e-6)
    (ph,) = phases("all_reduce", "ring", GroupShape(n, 2), size, slow_fabric, NETWORK)
    assert ph.tier == "network"
    assert ph.latency == pytest.approx(2 * (n - 1) * 9e-6)
    # rail-aligned rings: each of a node's 8 members carries 1/8 of the node-crossing traffic
    # through its own NIC and the 7/8 that go to the next member through its fabric port
    moved = 2 * (n - 1) / n * size
    assert ph.wire_bytes == pytest.approx(moved / 8)
    assert ph.port == 7
    # the pipelined ring runs at its slower link's pace
    solo = max(moved / 8 / NETWORK.bandwidth, moved * 7 / 8 / FABRIC.bandwidth)
    assert phase_time(ph, slow_fabric, NETWORK) == pytest.approx(ph.latency + solo)


def test_a_pcie_port_carries_the_nics_traffic_too() -> None:
    """On PCIe the NIC reads and writes GPU memory through the GPU's own x16 port, so a ring
    spanning nodes moves all of a rank's bytes through the port: a port slower than the node's
    NIC share bounds the ring, and the bound does not depend on how many NICs share the
    crossing traffic."""
    n, size = 16, 1e7
    pcie = TierLink(25e9, 2e-6, carries_nic=True)
    moved = 2 * (n - 1) / n * size
    for nic_share in (46e9, 23e9, 46e9 / 1.5):  # 8, 4 and 6 NICs for 8 GPUs
        net = TierLink(nic_share, 5e-6)
        (ph,) = phases("all_reduce", "ring", GroupShape(n, 2), size, pcie, net)
        assert ph.port == 8
        assert phase_time(ph, pcie, net) == pytest.approx(ph.latency + moved / 25e9)
    # one rank per node: only the NIC's traffic, through the port once
    (ph,) = phases("all_reduce", "ring", GroupShape(2, 2), size, pcie, NETWORK)
    assert ph.port == 1


def test_all_to_all_splits_peers_between_tiers() -> None:
    n, nodes, size = 16, 2, 1.6e7
    ph = phases("all_to_all", "ring", GroupShape(n, nodes), size, FABRIC, NETWORK)
    by_tier = {p.tier: p.wire_bytes for p in ph}
    assert by_tier["network"] == pytest.approx((n - 8) / n * size)
    assert by_tier["fabric"] == pytest.approx(7 / n * size)
    assert sum(by_tier.values()) == pytest.approx((n - 1) / n * size)
