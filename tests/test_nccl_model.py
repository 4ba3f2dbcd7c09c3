"""NCCL's cost model against its analytical limits: ring bus bandwidth tends to the link's,
the protocols (LL, LL128, Simple) take the sizes they should, NVLS and NVLSTree reduce in the
switch, rings and trees across nodes use every NIC, NCCL's per-hop software latency, and no
faster or lower-latency link ever makes a collective slower."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.network.collectives import GroupShape, bus_factor, choose, phase_time, phases
from simulator.network.nccl import (
    NET_CHANNELS_PER_NIC,
    SIMPLE_SLICE_BYTES,
    SIMPLE_STEP_BYTES,
    Phase,
    TierLink,
    nccl_extra,
    tree_correction,
    with_protocol,
)

FAB = TierLink(bandwidth=300e9 * 0.77, alpha=3.2e-6)


def test_ring_all_reduce_busbw_tends_to_link_bandwidth() -> None:
    shape = GroupShape(8, 1)
    size = 64 * 2**30
    algo, _, t = choose("all_reduce", shape, size, FAB)
    assert algo == "ring"
    busbw = size / t * bus_factor("all_reduce", 8)
    assert busbw == pytest.approx(FAB.bandwidth, rel=0.01)
    # ... and the analytical form: 2(n-1)α + 2(n-1)/n·S/B plus Simple's pipeline fill.
    expect = 14 * FAB.alpha + 14 * SIMPLE_STEP_BYTES / FAB.bandwidth + 1.75 * size / FAB.bandwidth
    assert t == pytest.approx(expect)


def test_small_messages_take_the_low_latency_protocol() -> None:
    ph = Phase("fabric", 14 * FAB.alpha, 1.75 * 2**16, 14)
    ll = with_protocol(ph, FAB.bandwidth)
    assert ll.wire_bytes == pytest.approx(2 * ph.wire_bytes)  # half the bandwidth
    assert ll.latency == ph.latency  # no pipeline fill
    big = with_protocol(Phase("fabric", 14 * FAB.alpha, 1.75 * 2**30, 14), FAB.bandwidth)
    assert big.wire_bytes == 1.75 * 2**30 and big.latency > 14 * FAB.alpha


def test_ll128_fills_the_middle_inside_an_nvlink_node_only() -> None:
    # NCCL's LL128: 0.92 of the Simple bandwidth, no chunk-sized pipeline fill, and NCCL's
    # LL128-over-LL latency (7.4 us base + 1.3 us per NVLink step) on top of the LL α.
    nvl = TierLink(FAB.bandwidth, FAB.alpha, ll128=True)
    shape, size = GroupShape(8, 1), 16 * 2**20
    plain = choose("all_reduce", shape, size, FAB)[2]
    algo, ph, t = choose("all_reduce", shape, size, nvl)
    assert algo == "ring" and t < plain
    wire = 1.75 * size
    assert t == pytest.approx(14 * FAB.alpha + 7.4e-6 + 14 * 1.3e-6 + wire / (0.92 * FAB.bandwidth))
    # Tiny messages keep LL, huge ones Simple: LL128 only takes the middle.
    for s in (2**12, 64 * 2**30):
        assert choose("all_reduce", shape, s, nvl)[2] == pytest.approx(
            choose("all_reduce", shape, s, FAB)[2]
        )
    # Never for point-to-point or all-to-all, never for NVLS; across nodes only where NCCL's
    # tuner picks it for an all-reduce (test_nccl_tuner).
    net = TierLink(bandwidth=46e9, alpha=2e-6)
    for coll, sh in (("all_to_all", GroupShape(32, 4)), ("all_to_all", shape), ("p2p", shape)):
        assert choose(coll, sh, size, nvl, net)[2] == choose(coll, sh, size, FAB, net)[2]
    for coll in ("all_gather", "reduce_scatter", "broadcast"):
        sh = GroupShape(32, 4)
        assert choose(coll, sh, size, nvl, net)[2] == choose(coll, sh, size, FAB, net)[2]
    nvls = TierLink(FAB.bandwidth, FAB.alpha, switch_reduce=2.0)
    nvls128 = TierLink(FAB.bandwidth, FAB.alpha, switch_reduce=2.0, ll128=True)
    for ph in phases("all_reduce", "nvls", shape, size, nvls128, None):
        assert ph.ll128_fraction == 0.0
    assert choose("all_reduce", shape, 8 * 2**30, nvls128) == choose(
        "all_reduce", shape, 8 * 2**30, nvls
    )


def test_no_tree_inside_one_node_and_nvls_when_the_switch_reduces() -> None:
    shape = GroupShape(8, 1)
    for size in (2**10, 2**20, 2**30):
        assert choose("all_reduce", shape, size, FAB)[0] == "ring"
    nvls = TierLink(FAB.bandwidth, FAB.alpha, switch_reduce=0.61 * 450e9 / FAB.bandwidth)
    algo, _, t = choose("all_reduce", shape, 8 * 2**30, nvls)
    assert algo == "nvls"
    assert 8 * 2**30 / t == pytest.approx(0.61 * 450e9, rel=0.01)


def test_rings_across_nodes_use_every_nic_of_the_node() -> None:
    net = TierLink(bandwidth=50e9, alpha=5e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6)
    size = 16 * 2**30
    _, ph, t = choose("all_reduce", GroupShape(16, 2), size, fab, net)
    busbw = size / t * bus_factor("all_reduce", 16)
    # eight members per node share eight NICs, not one; each sends 1/8 of its bytes through
    # its NIC and 7/8 through its NVLink port to the next member
    assert busbw > 4 * net.bandwidth
    assert busbw <= min(8 * net.bandwidth, 8 / 7 * fab.bandwidth) * 1.001


def test_nvls_tree_across_nodes_is_bound_by_the_slower_tier() -> None:
    """NCCL's NVLSTree: in-switch reduction inside each node pipelined with a tree between
    nodes, each GPU carrying 1/g of the buffer over its NIC, once each way between two nodes
    and twice beyond; at large sizes the rate is NCCL's 5/6 of the slower tier's."""
    net = TierLink(bandwidth=46e9, alpha=5e-6)
    switch = 274e9  # in-switch all-reduce rate of one node (algbw)
    fab = TierLink(bandwidth=369e9, alpha=2e-6, switch_reduce=switch / 369e9)
    size = 64 * 2**30
    for nodes, network_rate in ((2, 8 * 46e9), (4, 8 * 46e9 / 2), (8, 8 * 46e9 / 2)):
        shape = GroupShape(8 * nodes, nodes)
        ph = phases("all_reduce", "nvls_tree", shape, size, fab, net)
        t = sum(phase_time(p, fab, net) for p in ph)
        assert size / t == pytest.approx(5 / 6 * min(switch, network_rate), rel=0.01)
    # two nodes: above what the rings of eight NICs reach, so NCCL's tuner (and ours) takes it
    algo, _, t = choose("all_reduce", GroupShape(16, 2), size, fab, net)
    assert algo == "nvls_tree"
    # without an in-switch reduction, or inside one node, there is no NVLSTree
    plain = TierLink(bandwidth=369e9, alpha=2e-6)
    assert choose("all_reduce", GroupShape(16, 2), size, plain, net)[0] != "nvls_tree"
    assert choose("all_reduce", GroupShape(8, 1), size, fab)[0] == "nvls"


def test_tree_all_reduce_reaches_nccls_corrected_bandwidth() -> None:
    # NCCL's own table: Simple reaches half the tree model's bandwidth at 128 KiB-1 MiB,
    # 0.7 at 4 MiB, all of it past the table's 512 MiB end; the bytes stretch accordingly.
    assert tree_correction(1 << 20, "simple") == 0.5
    assert tree_correction(4 << 20, "simple") == 0.7
    assert tree_correction(1 << 30, "simple") == 1.0
    assert tree_correction(1 << 20, "ll") == 0.5
    net = TierLink(bandwidth=50e9, alpha=5e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6)
    shape = GroupShape(64, 8)
    size = 4 << 20
    (raw,) = phases("all_reduce", "tree", shape, size, fab, net)
    q = with_protocol(raw, net.bandwidth, size)
    plain = with_protocol(raw, net.bandwidth)
    ratio = q.wire_bytes / plain.wire_bytes
    assert ratio == pytest.approx(1 / 0.7)  # both protocols are corrected by 0.7 here
    # A ring's bandwidth is not corrected.
    (ring,) = phases("all_reduce", "ring", shape, size, fab, net)
    assert with_protocol(ring, net.bandwidth).wire_bytes == pytest.approx(
        with_protocol(ring, net.bandwidth, None).wire_bytes
    )


def test_a_cross_node_ring_fills_its_pipeline_per_nic() -> None:
    # The channels of a ring spanning nodes are spread over the node's eight NICs, so each
    # Simple-protocol step puts an eighth of the all-channel step on one NIC: a 200 MB
    # all-gather over 16 ranks runs Simple at full bandwidth, not LL at half.
    net = TierLink(bandwidth=46e9, alpha=2e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6)
    size = 200e6
    _, ph, t = choose("all_gather", GroupShape(16, 2), size, fab, net)
    (p,) = ph
    assert p.share == pytest.approx(1 / 8)
    wire = 15 / 16 * size / 8
    assert p.wire_bytes == pytest.approx(wire)  # Simple: the bytes themselves, not LL's double
    # NVLink is the slower side of each step here: its whole step at the NIC's rate (about
    # an eighth of it, as before NCCL's channels were counted per NIC).
    fill = 15 * SIMPLE_STEP_BYTES * (net.bandwidth / fab.bandwidth) / net.bandwidth
    assert fill == pytest.approx(15 * SIMPLE_STEP_BYTES / 8 / net.bandwidth, rel=0.01)
    nccl = nccl_extra("ring", 1, net.alpha)[1]  # one crossing between the two nodes
    assert t == pytest.approx(15 * net.alpha + nccl + fill + wire / net.bandwidth)


def test_network_hops_cost_nccl_software_latency_per_protocol() -> None:
    # NCCL's tuning.cc: a collective costs its base latency, and each network hop the proxy's
    # hwLat (Simple 14 us, LL 2.7/5 us), whatever the wire's own latency below that.
    net = TierLink(bandwidth=46e9, alpha=2e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6)
    ll, simple = nccl_extra("tree", 6, net.alpha)
    assert ll == pytest.approx(6.8e-6 + 6 * 3e-6)
    assert simple == pytest.approx(8.4e-6 + 6 * 12e-6)
    # A slower wire keeps its own α: no software latency is added on top of it.
    assert nccl_extra("ring", 10, 50e-6) == pytest.approx((6.6e-6, 8.4e-6))
    # A tiny tree all-reduce over 8 nodes pays the LL latency: base + 2*(7 NVLink steps +
    # 3 levels) with NCCL's 5 us per network level.
    _, ph, t = choose("all_reduce", GroupShape(64, 8), 1024.0, fab, net)
    lat = sum(p.latency for p in ph)
    assert lat == pytest.approx(6.8e-6 + 2 * (7 * fab.alpha + 3 * 5e-6))


@pytest.mark.parametrize(
    "coll", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]
)
def test_faster_or_lower_latency_links_never_slow_a_collective(coll: str) -> None:
    # NCCL's per-hop software cost is a floor over the links' α, counted on no more hops than
    # the phase charges α for: lowering either tier's α or raising its bandwidth never makes a
    # collective slower, at any size and on any number of nodes.
    fab = TierLink(bandwidth=369e9, alpha=2e-6, switch_reduce=1.0, ll128=True)
    net = TierLink(bandwidth=46e9, alpha=2e-6)
    variants = [
        (fab, TierLink(46e9, 1e-6)),
        (fab, TierLink(46e9, 0.0)),
        (TierLink(369e9, 0.5e-6, 1.0, ll128=True), net),
        (TierLink(369e9, 0.5e-6, 1.0, ll128=True), TierLink(46e9, 1e-6)),
        (TierLink(369e9, 0.0, 1.0, ll128=True), TierLink(46e9, 0.0)),
        (fab, TierLink(92e9, 2e-6)),
        (TierLink(738e9, 2e-6, 1.0, ll128=True), net),
    ]
    for nodes in (1, 2, 3, 5, 8, 12, 32):
        shape = GroupShape(8 * nodes, nodes)
        for size in (64.0, 2.0**14, 2.0**20, 2.0**24, 2.0**28, 2.0**33):
            base = choose(coll, shape, size, fab, net)[2]  # type: ignore[arg-type]
            for f, n in variants:
                assert choose(coll, shape, size, f, n)[2] <= base * (1 + 1e-12), (nodes, size)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
def test_a_ring_over_nodes_runs_no_faster_than_its_slow_fabric(coll: str) -> None:
    """PCIe through the host (~10 GB/s per GPU) with a 100 GB/s NIC: the ring crossing two
    nodes still passes every intra-node hop over PCIe, so it is no faster than the ring inside
    one node (it was 30x faster when only the NIC was charged)."""
    pcie = TierLink(bandwidth=9.6e9, alpha=5e-6, carries_nic=True)
    nic = TierLink(bandwidth=100e9, alpha=5e-6)
    size = 872e6
    _, _, one = choose(coll, GroupShape(8, 1), size, pcie, None)  # type: ignore[arg-type]
    _, _, two = choose(coll, GroupShape(16, 2), size, pcie, nic)  # type: ignore[arg-type]
    assert two >= one * 0.99
    # Every algorithm across nodes, not only the one chosen.
    for algo in ("ring", "tree"):
        ph = phases(coll, algo, GroupShape(16, 2), size, pcie, nic)  # type: ignore[arg-type]
        wire = sum(p.wire_bytes / p.share for p in ph)
        assert sum(phase_time(p, pcie, nic) for p in ph) >= wire / pcie.bandwidth


def test_a_ring_with_one_member_per_node_fills_only_its_nics_channels() -> None:
    # A data-parallel group under 8-way TP has one GPU per node: NCCL gives its NIC two
    # channels (search.cc + ncclTopoDupChannels), so each pipeline step moves two Simple slices
    # there, not the eighteen channels of a whole NVLink node.
    net = TierLink(bandwidth=46e9, alpha=2e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6)
    size = 400e6
    n = 96
    _, ph, t = choose("reduce_scatter", GroupShape(n, n), size, fab, net)
    (p,) = ph
    wire = (n - 1) / n * size
    fill = (n - 1) * NET_CHANNELS_PER_NIC * SIMPLE_SLICE_BYTES / net.bandwidth
    nccl = nccl_extra("ring", n - 1, net.alpha)[1]
    assert t == pytest.approx((n - 1) * net.alpha + nccl + fill + wire / net.bandwidth)
    # Fewer members per node never fill more per step than a full node does.
    _, _, t8 = choose("reduce_scatter", GroupShape(8 * n, n), 8 * size, fab, net)
    assert t <= t8


def test_collective_time_never_falls_as_the_buffer_grows() -> None:
    # NCCL's tree correction is a table per power of two; taken as a step it made a buffer one
    # byte larger up to 18% faster. Interpolated, time is non-decreasing in size.
    import numpy as np

    net = TierLink(bandwidth=46e9, alpha=2e-6)
    fab = TierLink(bandwidth=369e9, alpha=2e-6, switch_reduce=0.74, ll128=True)
    host = TierLink(bandwidth=20e9, alpha=5e-6)
    for f in (fab, host):
        for shape in (
            GroupShape(16, 2),
            GroupShape(64, 8),
            GroupShape(64, 64),
            GroupShape(128, 16),
        ):
            prev = 0.0
            for size in np.geomspace(1e3, 4e9, 1500):
                t = choose("all_reduce", shape, float(size), f, net)[2]
                assert t >= prev * (1 - 1e-12), (shape, size)
                prev = t
    assert tree_correction(2**20, "simple") == 0.5  # the table's own value at a power of two


def _h100_node() -> TierLink:
    from simulator.config.loading import load_scenario
    from simulator.network.topology import Topology

    rs = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "llama3-8b-8xh100.yaml")
    return Topology(rs).fabric_tier()


def test_nvls_costs_a_fixed_latency_then_streams_at_the_switch_rate() -> None:
    """A small NVLS all-reduce costs the fabric's two hops and NVLS_LATENCY (the ~42 us floor
    of the NVLS-only curve); a large one tends to the switch's rate (480 GB/s busbw on eight
    H100); a larger buffer never finishes sooner."""
    from simulator.network.nccl import NVLS_LATENCY

    fab = _h100_node()
    shape = GroupShape(8, 1)
    small = choose("all_reduce", shape, 1024.0, fab, None, ("nvls",))
    assert small[0] == "nvls"
    assert small[2] == pytest.approx(2 * fab.alpha + NVLS_LATENCY, rel=0.01)
    size = 8.0 * 2**30
    algo, _, t = choose("all_reduce", shape, size, fab, None, ("nvls",))
    bus = size / t * bus_factor("all_reduce", 8)
    assert algo == "nvls" and bus == pytest.approx(479e9, rel=0.02)
    times = [choose("all_reduce", shape, 2.0**e, fab, None, ("nvls",))[2] for e in range(10, 34)]
    assert all(b >= a for a, b in zip(times[:-1], times[1:], strict=True))


def test_a_forced_algorithm_is_used_where_it_runs_and_ignored_where_it_cannot() -> None:
    fab = _h100_node()
    # NCCL's own choice at 64 KiB on one H100 node is a ring under LL; forced NVLS is slower
    own = choose("all_reduce", GroupShape(8, 1), 65536.0, fab)
    nvls = choose("all_reduce", GroupShape(8, 1), 65536.0, fab, None, ("nvls",))
    assert own[0] == "ring" and nvls[0] == "nvls" and nvls[2] > own[2]
    # a fabric without NVLink SHARP cannot run NVLS: NCCL's own choice stands
    plain = TierLink(bandwidth=231e9, alpha=1.2e-6)
    assert choose("all_reduce", GroupShape(8, 1), 65536.0, plain, None, ("nvls",)) == choose(
        "all_reduce", GroupShape(8, 1), 65536.0, plain
    )


def test_nccl_algo_belongs_to_a_collective_benchmark_only() -> None:
    from pydantic import ValidationError

    from simulator.config.reference import Reference

    ref = Reference(metric="busbw_gbps", curve="x.csv", nccl_algo="nvls", source="test")
    assert ref.nccl_algo == "nvls"
    with pytest.raises(ValidationError, match="nccl_algo"):
        Reference(metric="step_time_s", value=1.0, nccl_algo="ring", source="test")


def test_a_calibrated_fabric_is_not_offered_nvls() -> None:
    """The probe's fits timed whatever algorithm NCCL chose: a fitted fabric runs them as
    measured, never the in-switch model on top."""
    fitted = TierLink(
        369e9, 1.2e-6, switch_reduce=0.744, fitted=True, fits=(("all_reduce", 3e-6, 300e9),)
    )
    algo, _, t = choose("all_reduce", GroupShape(8, 1), 1024.0, fitted, None, ("nvls",))
    assert algo == "ring"
    assert t == pytest.approx(14 * 3e-6 + 1024.0 * 14 / 8 / 300e9, rel=1e-6)
