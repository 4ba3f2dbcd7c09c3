"""NCCL's own choice of algorithm and protocol for an all-reduce that spans nodes.

NCCL does not run the fastest algorithm: it runs the one its tuning model (src/graph/tuning.cc)
rates fastest, and across nodes that model and the measured times part ways. On 4 x 8 H100
over NDR it rates NVLSTree at 81 us + S / 160 GB/s and picks it from 1 MiB, where NVLSTree
really takes 150-230 us up to 8 MiB (each chunk crosses the tree's levels one after another,
:mod:`.nvls`) and a tree under LL would have been faster. So the collective model times each
(algorithm, protocol) by its own physics (:mod:`.collectives`) and lets this module pick among
them as NCCL does. Evidence that NCCL picks so: the selection log of NVIDIA/nccl issue 1453
(NCCL 2.22.3, 3 x 8 H100, 8 x 200G), whose predicted times this model reproduces to the
printed digit (Tree/LL 37.8 us at 64 KiB, Tree/LL128 51.6 and 54.7 us at 128-256 KiB, NVLSTree
59.6-472.4 us from 512 KiB to 32 MiB), and the curves in scenarios/validation/nccl/.

Everything below is NCCL 2.26.2's (NVIDIA/nccl @ f44ac759, src/graph/tuning.cc, search.cc,
init.cc), for a communicator of ``nodes`` nodes with ``per_node`` GPUs each:

- the graphs NCCL's topology search finds on the reference node, an HGX H100 with a 400G NIC
  per GPU: 8 channels (one per NIC) of 48 GB/s, search.cc's fastest ``sm90SpeedArrayInter``
  speed, for the ring and the tree (issue 1453's 8 x 200G node gives 8 x 24, the NICs' speed,
  and its times then come out to the digit); 8 NVLS heads of 40 GB/s (the fastest
  ``sm90SpeedArrayIntra`` speed with 9 x speed within NVLink4's 370.8 GB/s: the head's own
  link is charged twice) and 48 between nodes;
- ``baseLat`` and ``hwLat`` (per algorithm and protocol; NVLink or PCI inside a node, NET
  between nodes), Hopper's per-channel caps (``perChMaxTreeBws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxRingLL128Bws``), the LL cap across nodes (``llMaxBws``, an Intel host's: DGX and
  HGX H100 servers run Xeons), the "model refinements" and ``treeCorrectionFactor``.

The choice depends on the communicator's shape, the buffer and which protocols and algorithms
the cluster offers (LL128 on NVLink fabrics, NVLSTree where the switch reduces), not on its
bandwidths: on NICs of 400 Gb/s and faster it is exactly NCCL's (its search tops out at
48 GB/s a channel); on slower NICs NCCL moves the crossovers to smaller buffers, roughly in
proportion, and the model keeps the reference ones, so that more bandwidth is never slower
(with the real speeds, a faster NIC can tip NCCL's tuner into NVLSTree where it is slower).
For the same reason the model takes, among NCCL's choices for this buffer and for every larger
one, the one it times fastest (:func:`nccl_choices`): a larger buffer is never faster, where
NCCL's can be at a crossover (4 x 8 H100: 2 MiB took 155-191 us, 4 MiB 151-160 us).

Not modelled: CollNet (SHARP), PAT, NCCL before 2.22 (which priced Tree/Simple differently),
other GPU generations' caps.
"""

from __future__ import annotations

import functools

from .nccl import (
    BASE_LAT_US,
    HW_LAT_US,
    LL_MAX_BW,
    PER_CH_MAX_RING_LL128,
    PER_CH_MAX_TREE,
    PER_CH_MAX_TREE_LL128,
    TREE_CORRECTION,
    log2i,
)

# The reference node's graphs (see the module docstring): channels (one per NIC) and their
# speed (GB/s); NVLS heads' speed inside the node and between nodes.
CHANNELS = 8
SPEED = 48.0
NVLS_INTRA = 40.0
NVLS_INTER = 48.0

# getNetOverhead(): 1 us on an x86 Intel host; a ring's hop inside a node costs no less.
NET_OVERHEAD = 1.0
# comm->nChannels on an HGX H100 (16 execution channels; "Channel xx/16" in issue 1453's log):
# a ring's Simple latency grows 1.4x once each rank's share of a channel reaches 64 bytes.
COMM_CHANNELS = 16


def _estimate(
    algo: str,
    proto: str,
    nodes: int,
    per_node: int,
    size: float,
    nvlink: bool,
    speed: float = SPEED,
    nvls_inter: float = NVLS_INTER,
) -> float:
    """NCCL's predicted time (us) of an all-reduce of ``size`` bytes on the reference node
    (``speed``, ``nvls_inter``: its graphs' channel speeds, GB/s)."""
    n = nodes * per_node
    idx = min(nodes, 3) - 1
    hw = "nvlink" if nvlink else "pci"
    intra = HW_LAT_US[hw][(algo, proto)] if per_node > 1 else 0.0
    inter = HW_LAT_US["net"][("tree" if per_node == 1 else algo, proto)]
    lat = BASE_LAT_US[(algo, proto)]
    if algo == "nvls_tree":
        heads = min(per_node, CHANNELS)
        bw_inter = min(2 * NVLS_INTRA, nvls_inter)
        alg = heads * min(NVLS_INTRA, bw_inter if nodes <= 2 else bw_inter / 2) * 5.0 / 6.0
        return lat + intra + 2 * log2i(nodes) * inter + size / (1e3 * alg)
    bus = CHANNELS * speed
    if algo == "tree":
        bus = min(bus * 0.92, CHANNELS * PER_CH_MAX_TREE[idx])
        if proto == "ll":
            bus = min(bus / 3.8, LL_MAX_BW[nodes > 2])
        elif proto == "ll128":
            bus = min(bus * 120.0 / 128.0, CHANNELS * PER_CH_MAX_TREE_LL128[idx])
        bus *= 0.85  # the search's TREE pattern (issue 1453's times need it)
        alg = bus * 0.5
        log_size = log2i(int(size) >> 6)
        if log_size < 23:  # NCCL's table runs from 64 B to 256 MiB ("logSize < 23")
            alg *= TREE_CORRECTION[proto][log_size]
        lat += 2 * ((per_node - 1) * intra + log2i(nodes) * inter)
        return lat + size / (1e3 * alg)
    if proto == "ll":
        bus = min(LL_MAX_BW[nodes > 2], bus * 0.5)
    elif proto == "ll128":
        bus = min(bus * 0.92, CHANNELS * PER_CH_MAX_RING_LL128[idx])
    alg = bus * n / (2 * (n - 1))
    intra = max(intra, NET_OVERHEAD * (3 if proto == "simple" else 1))
    steps, inter_steps = 2 * (n - 1), 2 * (nodes - 1)
    lat += (steps - inter_steps) * intra + inter_steps * inter
    if proto == "simple" and size / (COMM_CHANNELS * n) >= 64:
        lat *= 1.4
    return lat + size / (1e3 * alg)


Offered = tuple[tuple[str, str], ...]


def nccl_pick(
    offered: Offered, nodes: int, per_node: int, size: float, nvlink: bool
) -> tuple[str, str]:
    """The (algorithm, protocol) among ``offered`` that NCCL's tuner rates fastest for an
    all-reduce of ``size`` bytes over ``nodes`` nodes of ``per_node`` members (ties: the first
    offered); ``nvlink``: the fabric is NVLink (else PCIe)."""
    return min(offered, key=lambda ap: _estimate(ap[0], ap[1], nodes, per_node, size, nvlink))


# Buffers past which NCCL's choice no longer changes: 2^40 bytes.
_LARGEST_LOG2 = 40


def _breaks(nodes: int, per_node: int, log2: int) -> list[float]:
    """Where NCCL's estimates change form within [2^log2, 2^(log2+1)): its ends, and where a
    ring's Simple latency steps up (its plateau rule). Between two breaks every estimate is
    affine in the size (the tree correction is one entry per power of two from 64 B)."""
    lo, hi = float(2**log2), float(2 ** (log2 + 1))
    plateau = 64.0 * COMM_CHANNELS * nodes * per_node
    return [lo, *([plateau] if lo < plateau < hi else []), hi]


@functools.lru_cache(maxsize=65536)
def _segments(
    offered: Offered, nodes: int, per_node: int, nvlink: bool, log2: int
) -> tuple[tuple[float, tuple[str, str]], ...]:
    """NCCL's choice over [2^log2, 2^(log2+1)) as (first size, choice) pieces: between breaks
    every estimate is affine in the size, so the choice is the lower envelope of lines, walked
    from each break to the next crossing of the current choice."""
    out: list[tuple[float, tuple[str, str]]] = []
    edges = _breaks(nodes, per_node, log2)
    for a, b in zip(edges, edges[1:], strict=False):
        end = max(a, b - 1.0)
        at_a = [_estimate(*ap, nodes, per_node, a, nvlink) for ap in offered]
        at_end = [_estimate(*ap, nodes, per_node, end, nvlink) for ap in offered]
        slope = [
            (e - s0) / (end - a) if end > a else 0.0 for s0, e in zip(at_a, at_end, strict=True)
        ]
        x = a
        cur = min(range(len(offered)), key=lambda i: at_a[i])  # ties: the first offered
        while True:
            out.append((x, offered[cur]))
            nxt, best = None, end
            for i in range(len(offered)):
                gap = slope[cur] - slope[i]  # how much faster i's estimate grows less
                if i == cur or gap <= 0:
                    continue
                cross = x + (at_a[i] + slope[i] * (x - a) - at_a[cur] - slope[cur] * (x - a)) / gap
                if x < cross < best:
                    nxt, best = i, cross
            if nxt is None:
                break
            x = float(int(best) + 1)
            if x >= b:
                break
            cur = min(range(len(offered)), key=lambda i: at_a[i] + slope[i] * (x - a))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _picks_from(
    offered: Offered, nodes: int, per_node: int, nvlink: bool, log2: int
) -> frozenset[tuple[str, str]]:
    """NCCL's choices for every buffer from 2^log2 bytes up."""
    return frozenset(
        pick
        for j in range(log2, _LARGEST_LOG2 + 1)
        for _, pick in _segments(offered, nodes, per_node, nvlink, j)
    )


def nccl_choices(
    offered: Offered, nodes: int, per_node: int, size: float, nvlink: bool
) -> frozenset[tuple[str, str]]:
    """NCCL's choice for ``size`` bytes and its choices for every larger buffer: the model
    takes the fastest of them, so that a larger buffer is never faster."""
    j = max(0, int(size).bit_length() - 1)  # size lies in [2^j, 2^(j+1))
    if j >= _LARGEST_LOG2:
        return frozenset({nccl_pick(offered, nodes, per_node, size, nvlink)})
    here = {p for at, p in _segments(offered, nodes, per_node, nvlink, j) if at > size}
    later = _picks_from(offered, nodes, per_node, nvlink, j + 1)
    return later | here | {nccl_pick(offered, nodes, per_node, size, nvlink)}
