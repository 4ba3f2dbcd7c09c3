"""NCCL's LL and LL128 protocols on a ring or tree that spans nodes, as NCCL 2.22 and later
run them: the per-protocol options of one such phase that :mod:`.collectives` offers NCCL's
tuner (:mod:`.nccl_tuner`) for an all-reduce across nodes."""

from __future__ import annotations

from dataclasses import replace

from .nccl import (
    LL_BANDWIDTH_FRACTION,
    LL_MAX_BW,
    NCCL_BASE_LATENCY,
    NCCL_NET_STEP_LATENCY,
    NCCL_NVLINK_STEP_LATENCY,
    PER_CH_MAX_RING_LL128,
    PER_CH_MAX_TREE_LL128,
    Phase,
    TierLink,
    log2i,
    phase_bandwidth,
    protocol_options,
)

# LL128 across nodes (NCCL enables it on Hopper where each GPU reaches its NIC through its own
# PCIe switch, as in HGX servers; tuning.cc): NCCL rates a tree at 120/128 and a ring at 0.92
# of the Simple bandwidth, and a hop at its LL128 latencies (baseLat 14 us; hwLat NET tree
# 8.5 us, ring 4.0 us; NVLink tree 1.25 us, ring 1.9 us). A channel is one thread block that
# writes every 128-byte line with its flag, so it moves no more than NCCL's per-channel
# LL128 cap (perChMaxTreeLL128Bws, Hopper: 36.7 GB/s at 2 nodes, 29.0 beyond;
# perChMaxRingLL128Bws 36.7; Volta and Ampere: 20.0 throughout), with one channel per NIC the
# members use; by the GPU profile's compute_capability, else a fabric that reduces in the
# switch (NVLink SHARP) is taken as Hopper's or later, one that does not as Ampere's. Offered
# only where NCCL's tuner chooses the protocol (an all-reduce across nodes).
LL128_FRACTION = {"tree": 120.0 / 128.0, "ring": 0.92}
LL128_CHANNEL_CAP = {
    "tree": tuple(c * 1e9 for c in PER_CH_MAX_TREE_LL128[1:]),  # 2 nodes, more
    "ring": tuple(c * 1e9 for c in PER_CH_MAX_RING_LL128[1:]),
}
LL128_CHANNEL_CAP_AMPERE = 20.0e9
# LL across nodes does not use GPUDirect RDMA: its lines go through host memory, where the
# proxy thread polls the flags inside the data (sjeaugey, NVIDIA/nccl issue 756), so a node
# moves no more than NCCL's llMaxBws (tuning.cc, an Intel host: 39.0 GB/s at 2 nodes, 20.4
# beyond; AMD hosts 22.5 and 19.0), by tree or ring.
LL_ACROSS_CAP = tuple(c * 1e9 for c in LL_MAX_BW)


def options_across(
    ph: Phase,
    algo: str,
    per_node: int,
    nodes: int,
    size: float,
    fabric: TierLink,
    network: TierLink,
) -> dict[str, tuple[float, Phase]]:
    """The protocols an all-reduce phase over ``nodes`` nodes of ``per_node`` members may run
    (time alone, phase): LL128 offered where the fabric has it, LL capped at the host-memory
    rate."""
    g, k = per_node, nodes
    bw = phase_bandwidth(ph, fabric, network)  # (the protocol's fields do not move it)
    if fabric.ll128 and algo in LL128_FRACTION and ph.ll:
        frac = LL128_FRACTION[algo]
        net_hop = NCCL_NET_STEP_LATENCY[(algo, "ll128")]
        fab_hop = NCCL_NVLINK_STEP_LATENCY[(algo, "ll128")]
        channels = max(1.0, g / network.nic_ranks)
        # the node's rate across (its members' NIC shares), against its channels' cap
        node = bw * g
        hopper = fabric.sm90 if fabric.sm90 is not None else fabric.switch_reduce > 0
        per_channel = LL128_CHANNEL_CAP[algo][k > 2] if hopper else LL128_CHANNEL_CAP_AMPERE
        frac = min(frac, per_channel * channels / node) if node > 0 else frac
        hops = 2 * log2i(k) if algo == "tree" else 2 * (k - 1)
        inside = 2 * (g - 1) if algo == "tree" else ph.steps - hops
        # the α the phase already charges per hop: a tree's network level and NVLink hop
        # their own tier's, a flat ring's every step the slower tier's
        net_a, fab_a = (
            (network.alpha, fabric.alpha)
            if algo == "tree"
            else (max(network.alpha, fabric.alpha),) * 2
        )
        extra = (
            NCCL_BASE_LATENCY[(algo, "ll128")]
            + hops * max(0.0, net_hop - net_a)
            + inside * max(0.0, fab_hop - fab_a)
        )
        ph = replace(ph, ll128_fraction=frac, extra_ll128=extra)
    out = protocol_options(ph, bw, size if algo == "tree" else None)
    node = bw * g * LL_BANDWIDTH_FRACTION  # the node's LL rate across, uncorrected
    if "ll" in out and node > (cap := LL_ACROSS_CAP[k > 2]):
        q = out["ll"][1]
        q = replace(q, wire_bytes=q.wire_bytes * node / cap)
        out["ll"] = (q.latency + q.wire_bytes / bw, q)
    return out
