"""NCCL's NVLink SHARP algorithms: NVLS, the all-reduce inside one node that the NVSwitch
reduces, and NVLSTree, the all-reduce across nodes that reduces inside each node in the switch
and between nodes in a tree over each GPU's NIC. Each is one :class:`Phase` for the collective
model (:mod:`simulator.network.collectives`), which decides where they apply."""

from __future__ import annotations

import math

from .nccl import (
    NCCL_NET_STEP_LATENCY,
    NVLS_LATENCY,
    Phase,
    TierLink,
    fabric_step_bytes,
    log2i,
)


def nvls(n: int, size: float, fabric: TierLink) -> Phase:
    """NCCL's NVLS all-reduce inside one node: each GPU pushes its buffer into the switch,
    which reduces it, and pulls the result, in chunks pipelined over the channels (Simple
    protocol only). Its fixed cost and its pipeline's depth come from the nccl-tests curve of
    eight H100 run with NCCL_ALGO=NVLS (scenarios/validation/nccl/, Azure ND H100 v5): the
    time is flat at ~42 us from 64 KiB to 1 MiB and reaches half the 480 GB/s peak busbw near
    16 MiB; a fixed NVLS_LATENCY on top of the fabric's two hops, and a fill of n-1 steps,
    each no larger than a Simple step nor than the buffer's share of a step, follow it within
    -16..+11% from 64 KiB to 8 GiB. On DGX H100's default curve the model's own choice (a ring
    under LL or LL128 up to 16 MiB, NVLS from 32 MiB) is within -5..+15% from 64 KiB, -4..+6%
    from 4 MiB."""
    wire = size / fabric.switch_reduce
    steps = float(n - 1)
    step = min(fabric_step_bytes(fabric.bandwidth), wire / steps)
    return Phase("fabric", 2 * fabric.alpha + NVLS_LATENCY, wire, steps, ll=False, step_bytes=step)


# NCCL's tuner rates NVLS and NVLSTree at 5/6 of their modelled bandwidth (tuning.cc,
# ``ratio *= 5.0/6.0``); NVSwitch H100 pairs measure about that (nccl-tests over 8x400G: 2 nodes
# reach ~430 GB/s busbw with NVLS against ~330 without, NVIDIA/nccl issue #1221).
NVLS_TREE_RATIO = 5.0 / 6.0


def nvls_tree(g: int, k: int, size: float, fabric: TierLink, network: TierLink) -> Phase:
    """NCCL's NVLSTree all-reduce (NVIDIA/nccl src/graph/tuning.cc, 2.19 and later): inside
    each node NVLink SHARP reduce-scatters the buffer and all-gathers the result, while each
    GPU carries its 1/g share between the nodes over its own NIC in a tree, the two tiers
    pipelined. Between two nodes every node sends its share once (up or down the one edge);
    over more, a double binary tree makes each node send it twice, which is why NCCL's model
    halves the inter-node bandwidth beyond two nodes. The slower tier sets the rate: the
    in-switch part's time, expressed as bytes at the NIC's rate, bounds the network bytes
    from below. Simple protocol only."""
    depth = math.ceil(math.log2(k))
    net_bytes = (1.0 if k == 2 else 2.0) * size / g
    fabric_bytes = size / fabric.switch_reduce * network.bandwidth / fabric.bandwidth
    lat = 2 * fabric.alpha + 2 * depth * network.alpha
    wire = max(net_bytes, fabric_bytes) / NVLS_TREE_RATIO
    # NCCL's NVLSTree network hop costs hwLat[NET][NVLSTree][Simple], over 2·log2i(k) hops
    # (tuning.cc), each of which already pays the network's α above.
    step = NCCL_NET_STEP_LATENCY[("nvls_tree", "simple")]
    hops = 2 * log2i(k) * max(0.0, step - network.alpha)
    steps = 2 * (g - 1) + 2 * depth
    return Phase("network", lat, wire, steps, ll=False, share=1.0 / g, extra_simple=hops)
