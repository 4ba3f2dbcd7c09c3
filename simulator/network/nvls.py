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


# NCCL's NVLSTree chunking (NVIDIA/nccl 2.26.2 src/enqueue.cc calcCollChunking, src/transport/
# nvls.cc): 16 channels on Hopper (NVLS_NCHANNELS_SM90), each moving one chunk per head per loop;
# a chunk of NVLS_CHUNKSIZE (128 KiB), at most 64 KiB from 4 nodes (NCCL_NVLSTREE_MAX_CHUNKSIZE's
# default), halved where a channel's share of the buffer holds fewer than 16, 4 or 1 chunks per
# head ("if (nBytes < 16*co*cs && cs > 131072) cs = 131072" and so on), down to 32 KiB.
NVLS_TREE_CHANNELS = 16
NVLS_CHUNK = 128 * 1024
NVLS_TREE_CHUNK_FROM_4_NODES = 64 * 1024
NVLS_TREE_SHRINK = ((16, 128 * 1024), (4, 64 * 1024), (1, 32 * 1024))
# NCCL runs an NVLS head per NIC (at most 32, NCCL_MAX_NVLS_ARITY). The chunk rule and the
# fill were checked on 8-head HGX nodes; a loop of more heads is counted as 8 heads' (where
# the switch sets the pace, counting more would let more NICs lengthen the fill).
NVLS_TREE_HEADS = 8.0


def nvls_tree_loop_bytes(size: float, heads: float, nodes: int) -> float:
    """Bytes of the buffer one loop of NCCL's NVLSTree kernel moves: a chunk per channel and
    head, no more than the buffer."""
    chunk = float(NVLS_CHUNK if nodes < 4 else NVLS_TREE_CHUNK_FROM_4_NODES)
    per_channel = size / NVLS_TREE_CHANNELS
    for times, smaller in NVLS_TREE_SHRINK:
        if per_channel < times * heads * chunk and chunk > smaller:
            chunk = float(smaller)
    return min(size, NVLS_TREE_CHANNELS * heads * chunk)


def nvls_tree(g: int, k: int, size: float, fabric: TierLink, network: TierLink) -> Phase:
    """NCCL's NVLSTree all-reduce (NVIDIA/nccl src/graph/tuning.cc, 2.19 and later): inside
    each node NVLink SHARP reduce-scatters the buffer and all-gathers the result, while each
    GPU carries its 1/g share between the nodes over its own NIC in a tree, the two tiers
    pipelined. Between two nodes every node sends its share once (up or down the one edge);
    over more, a double binary tree makes each node send it twice, which is why NCCL's model
    halves the inter-node bandwidth beyond two nodes. The slower tier sets the rate: the
    in-switch part's time, expressed as bytes at the NIC's rate, bounds the network bytes
    from below. Simple protocol only.

    The kernel moves the buffer in loops of a chunk per channel and head
    (:func:`nvls_tree_loop_bytes`), each reduced up the tree and broadcast down it; a loop's
    chunk crosses the levels one after another, so the first one's way up and back adds
    :func:`nvls_tree_fill` loops' time to the streaming time. Below 8 MiB on 4 or more nodes
    the whole buffer is one loop: the collective is mostly fill, which NCCL's tuner does not
    price; it picks NVLSTree from 1-2 MiB, where it takes 150-230 us on 4 nodes up to 8 MiB."""
    depth = math.ceil(math.log2(k))
    net_bytes = (1.0 if k == 2 else 2.0) * size / g
    fabric_bytes = size / fabric.switch_reduce * network.bandwidth / fabric.bandwidth
    # the in-switch reduction's own fixed cost, as inside one node (NCCL's tuner charges
    # 25 us, hwLat[NVLINK][NVLSTree][Simple])
    lat = 2 * fabric.alpha + 2 * depth * network.alpha + NVLS_LATENCY
    wire = max(net_bytes, fabric_bytes) / NVLS_TREE_RATIO
    # NCCL's NVLSTree network hop costs hwLat[NET][NVLSTree][Simple], over 2·log2i(k) hops
    # (tuning.cc), each of which already pays the network's α above.
    step = NCCL_NET_STEP_LATENCY[("nvls_tree", "simple")]
    hops = 2 * log2i(k) * max(0.0, step - network.alpha)
    # A loop's time: its chunks through the NICs (a head per NIC) or through the switch,
    # whichever is slower. The switch's share is counted as if every GPU had its NIC, so that
    # more NICs, which add heads and so a larger loop, never lengthen the fill where the
    # switch sets the pace (NCCL's would: a larger loop on the same switch).
    nic_heads = max(1.0, min(float(g), g / network.nic_ranks, NVLS_TREE_HEADS))
    gpu_heads = min(float(g), NVLS_TREE_HEADS)
    loop = max(
        net_bytes * nvls_tree_loop_bytes(size, nic_heads, k),
        fabric_bytes * nvls_tree_loop_bytes(size, gpu_heads, k),
    ) / (NVLS_TREE_RATIO * size)
    # The phase's steps are its hops (a calibrated network charges its fitted α on each);
    # the fill is spread over them.
    steps = 2 * (g - 1) + 2 * depth
    return Phase(
        "network",
        lat,
        wire,
        steps,
        ll=False,
        share=1.0 / g,
        step_bytes=nvls_tree_fill(k) * loop / steps,
        extra_simple=hops,
    )


def nvls_tree_fill(nodes: int) -> float:
    """Loops' time the first chunk adds beyond streaming the buffer: a
    pipeline of D stages moving L loops takes (L + D - 1) stage times. A chunk goes up the
    tree's h = ceil(log2 nodes) levels and back down, 2h network hops. Beyond two nodes each
    NIC carries two trees' traffic (a node is inside one of the double binary trees and a
    leaf of the other), so a loop takes two hops' time and the 2h hops are h loops: h - 1
    more than the streaming. Between two nodes the one edge carries a loop in one hop's time:
    2 hops, 1 more loop. The published curves (scenarios/validation/nccl/, 2, 4 and 8 nodes
    of H100 over NDR) put NVLSTree's time beyond NCCL's own estimate at 1.1-1.8 loops on 2
    nodes, 1.3-1.7 on 4 and 2.4-3.3 on 8 (a cluster some 12% slower than the others
    throughout)."""
    if nodes <= 2:
        return 1.0
    return max(1.0, math.ceil(math.log2(nodes)) - 1.0)
