"""Rank placement and topology: Megatron's rank order, the groups it makes, nodes, NICs,
PCIe sockets and fat-tree up-links (collective costs are in ``test_network``)."""

from __future__ import annotations

import pytest

from simulator.config.loading import resolve_dict
from simulator.network.collectives import GroupShape, bus_factor, choose
from simulator.network.layout import Layout
from simulator.network.topology import Topology

LAY = Layout(tp=2, cp=2, dp=3, pp=2, gpus_per_node=4)


def test_megatron_rank_order_tp_fastest_then_cp_dp_pp() -> None:
    assert LAY.world == 24
    assert LAY.coords(0) == (0, 0, 0, 0)
    assert LAY.coords(1) == (1, 0, 0, 0)  # TP fastest
    assert LAY.coords(2) == (0, 1, 0, 0)  # then CP
    assert LAY.coords(4) == (0, 0, 1, 0)  # then DP
    assert LAY.coords(12) == (0, 0, 0, 1)  # then PP
    for r in range(LAY.world):
        assert LAY.rank(*LAY.coords(r)) == r


@pytest.mark.parametrize("kind", ["tp", "cp", "dp", "pp"])
def test_groups_partition_the_world(kind: str) -> None:
    # The "dp" group is the gradient-reduction group: every replica's CP ranks hold the same
    # parameters too, so it spans the CP and DP coordinates (Megatron-Core's data-parallel
    # group with context parallel).
    size = {"tp": LAY.tp, "cp": LAY.cp, "dp": LAY.dp * LAY.cp, "pp": LAY.pp}[kind]
    varies = {"tp": {0}, "cp": {1}, "dp": {1, 2}, "pp": {3}}[kind]
    groups = {tuple(LAY.group(r, kind)) for r in range(LAY.world)}
    assert all(len(g) == size for g in groups)
    assert sorted(r for g in groups for r in g) == list(range(LAY.world))
    for r in range(LAY.world):
        assert r in LAY.group(r, kind)
        # Members differ from r only in this kind's coordinates.
        for m in LAY.group(r, kind):
            a, b = LAY.coords(r), LAY.coords(m)
            assert all(a[i] == b[i] for i in range(4) if i not in varies)


def test_group_members() -> None:
    assert LAY.group(5, "tp") == [4, 5]
    assert LAY.group(5, "cp") == [5, 7]
    # rank 5 = (t1, c0, d1): the gradient group is every rank with t1 on its stage
    assert LAY.group(5, "dp") == [1, 3, 5, 7, 9, 11]
    assert LAY.group(5, "pp") == [5, 17]
    assert list(LAY.stage_members(1)) == list(range(12, 24))


def test_hybrid_shard_groups() -> None:
    lay = Layout(tp=1, cp=1, dp=8, pp=1, gpus_per_node=4, shard=4)
    assert lay.group(5, "dp_shard") == [4, 5, 6, 7]
    assert lay.group(5, "dp_rep") == [1, 5]
    with pytest.raises(ValueError):
        lay.group(0, "nonsense")


def test_node_mapping() -> None:
    assert [LAY.node(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert LAY.node(23) == 5


def _scenario(
    nodes: int = 4,
    gpn: int = 8,
    nics: int = 2,
    topo: dict | None = None,
    fabric: str = "nvlink4-nvswitch",
    **par: object,
) -> Topology:
    cluster: dict = {
        "gpu": "h100-sxm-80gb",
        "gpus_per_node": gpn,
        "nodes": nodes,
        "fabric": fabric,
        "storage": "lustre",
    }
    if nodes > 1:
        cluster["network"] = {
            "profile": "ib-ndr-400",
            "nics_per_node": nics,
            "topology": topo or {"kind": "single_switch"},
        }
    gpus = nodes * gpn
    rs = resolve_dict(
        {
            "name": "topo",
            "cluster": cluster,
            "model": {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000},
            "training": {"seq_len": 1024, "global_batch": gpus},
            "parallelism": dict(par),
        }
    )
    return Topology(rs)


def test_topology_group_shapes_and_nics() -> None:
    topo = _scenario(nodes=4, gpn=8, nics=2, tp=4, pp=2)
    assert topo.layout.world == 32
    assert topo.shape(0, "tp") == GroupShape(4, 1)
    assert topo.shape(0, "dp") == GroupShape(4, 2)  # DP: ranks 0, 4, 8, 12 on nodes 0, 0, 1, 1
    assert topo.shape(0, "pp") == GroupShape(2, 2)
    assert [topo.nic_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.nic_of(9) == 0
    net = topo.rs.network
    assert net is not None
    nic_bw = net.port_gbps.value * 1e9 / 8 * net.achievable_fraction.value
    assert topo.capacity(("nic", 0, 1)) == pytest.approx(nic_bw)
    tier = topo.network_tier()
    assert tier is not None
    assert tier.bandwidth == pytest.approx(nic_bw / 4)  # four GPUs per NIC
    assert topo.network_links(13, "dp") == [(("nic", 1, 1), 1.0)]  # single switch: no up-link


def test_pcie_host_fabric_crosses_the_socket_link_only_between_sockets() -> None:
    """Two sockets, GPUs 0-1 on one and 2-3 on the other: a ring over all four crosses the
    socket link once each way (a quarter of an edge per member); TP pairs inside one socket
    and sends between GPUs of one socket never touch it."""
    topo = _scenario(nodes=1, gpn=4, fabric="pcie4-host", tp=4)
    assert topo.pcie_root_bw is not None and topo.sockets == 2
    assert [topo.socket(r) for r in range(4)] == [0, 0, 1, 1]
    assert topo.fabric_links(2, "tp") == [(("gpu", 2), 1.0), (("pcie_root", 0), 0.25)]
    assert topo.fabric_links(0, peer=1) == [(("gpu", 0), 1.0)]
    assert topo.fabric_links(1, peer=2) == [(("gpu", 1), 1.0), (("pcie_root", 0), 1.0)]
    assert topo.fabric_tier().bandwidth == pytest.approx(min(topo.fabric_bw, topo.pcie_root_bw))
    pairs = _scenario(nodes=1, gpn=4, fabric="pcie4-host", tp=2)
    assert pairs.fabric_links(2, "tp") == [(("gpu", 2), 1.0)]
    # DP pairs {0, 2} and {1, 3} each span both sockets: half an edge per member.
    assert pairs.fabric_links(0, "dp") == [(("gpu", 0), 1.0), (("pcie_root", 0), 0.5)]


def test_pcie_host_ring_all_reduce_tends_to_the_port_not_a_shared_bus() -> None:
    """Eight GPUs on two sockets: each ring edge runs at a GPU's PCIe port, and the socket link
    carries one edge each way, so large all-reduces reach the port's bandwidth (8x RTX 4090 on
    PCIe Gen4 through two EPYC sockets measure 14.5-20.6 GB/s busbw: SOURCES.md file 9), not an
    eighth of the socket link; smaller Simple steps on this slow fabric fill the ring sooner
    than NVLink's 18 channels would."""
    from simulator.network.nccl import FIT_CHANNELS, SIMPLE_SLICE_BYTES, fabric_step_bytes

    topo = _scenario(nodes=1, gpn=8, fabric="pcie4-host", tp=8)
    assert topo.pcie_root_bw is not None and topo.pcie_root_bw >= topo.fabric_bw
    shape = GroupShape(8, 1)
    size = 8 * 2**30
    _, _, t = choose("all_reduce", shape, size, topo.fabric_tier())
    busbw = size / t * bus_factor("all_reduce", 8)
    assert busbw == pytest.approx(topo.fabric_bw, rel=0.01)
    assert fabric_step_bytes(topo.fabric_bw) == 2 * SIMPLE_SLICE_BYTES
    assert fabric_step_bytes(1e12) == FIT_CHANNELS * SIMPLE_SLICE_BYTES  # NVLink: the fit


def test_fat_tree_up_links_and_oversubscribed_tier() -> None:
    topo = _scenario(
        nodes=4,
        gpn=8,
        nics=8,
        topo={"kind": "fat_tree", "oversubscription": 2.0, "nodes_per_leaf": 2},
    )
    assert topo.leaves == 2
    assert topo.uplink_bw == pytest.approx(2 * 8 * topo.nic_bw / 2.0)
    # DP over 4 nodes in 2 leaves: a ring leaves each leaf on 2 of its 4 edges.
    assert topo.network_links(0, "dp") == [(("nic", 0, 0), 1.0), (("uplink", 0), 0.5)]
    # Point to point: the up-link only when the peer is on another leaf.
    assert topo.network_links(0, "pp", peer=8) == [(("nic", 0, 0), 1.0)]
    assert topo.network_links(0, "pp", peer=16) == [(("nic", 0, 0), 1.0), (("uplink", 0), 1.0)]
    flat = topo.network_tier()
    spans = topo.network_tier(0, "dp")
    assert flat is not None and spans is not None
    # A fully loaded leaf gives each rank nodes/(leaves·oversubscription) = 4/(2·2) of its NIC
    # share for the traffic that crosses: no less than the NIC share here.
    assert spans.bandwidth == pytest.approx(flat.bandwidth)
    topo4 = _scenario(
        nodes=4,
        gpn=8,
        nics=8,
        topo={"kind": "fat_tree", "oversubscription": 4.0, "nodes_per_leaf": 1},
    )
    flat4, spans4 = topo4.network_tier(), topo4.network_tier(0, "dp")
    assert flat4 is not None and spans4 is not None
    assert spans4.bandwidth == pytest.approx(flat4.bandwidth / 4.0)


def test_oversubscribed_tier_counts_every_nic_of_the_node() -> None:
    """With more NICs than GPUs a rank drives one NIC, but its share of the leaf's up-links is
    its node's NICs over its GPUs (the flow network's up-link carries all of them): the
    contention-free tier agrees, so oversubscription never turns into a speed-up by hiding a
    slower fabric behind a network the flows never slow down."""
    kw = {"nodes": 2, "gpn": 2, "nics": 4, "fabric": "pcie4-switch"}
    tiers = []
    for x in (1.0, 2.0, 4.0, 8.0):
        topo = _scenario(
            topo={"kind": "fat_tree", "oversubscription": x, "nodes_per_leaf": 1}, **kw
        )
        t = topo.network_tier(0, "dp")
        assert t is not None
        # the up-link share per rank: 4 NICs over 2 GPUs over the oversubscription
        assert t.bandwidth == pytest.approx(min(topo.nic_bw, 2 * topo.nic_bw * 2 / (2 * x)))
        tiers.append(t.bandwidth)
    assert tiers == sorted(tiers, reverse=True)


def test_more_oversubscription_is_never_faster() -> None:
    from simulator.simulate import simulate

    steps = []
    for x in (1.0, 2.0, 4.0, 8.0, 16.0):
        topo = _scenario(
            nodes=2, gpn=2, nics=4, fabric="pcie4-switch",
            topo={"kind": "fat_tree", "oversubscription": x, "nodes_per_leaf": 1},
        )  # fmt: skip
        steps.append(simulate(topo.rs, scaling=False).engine.step_time)
    assert all(b >= a * (1 - 1e-9) for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps[-1] > steps[0]


def test_a_fabric_file_may_write_its_sockets_with_a_source() -> None:
    """Every count in a profile file may be written ``{value, source}``; sockets was refused so
    ('Input should be a valid integer')."""
    from simulator.catalog import validate_profile

    fab = validate_profile(
        {
            "kind": "fabric",
            "name": "two-socket",
            "display_name": "PCIe through two sockets",
            "technology": "pcie_host",
            "bandwidth_gbps": {"value": 32, "source": "PCIe Gen4 x16 specification"},
            "latency_us": {"value": 10, "source": "estimate: a root complex hop"},
            "achievable_fraction": {"value": 0.6, "source": "estimate: host-staged copies"},
            "max_gpus": {"value": 8, "source": "the server's eight slots"},
            "sockets": {"value": 2, "source": "the server's two EPYC sockets"},
        },
        "two-socket.yaml",
    )
    assert fab.sockets == 2  # type: ignore[union-attr]
