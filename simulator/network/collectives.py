"""Collective algorithms in the alpha-beta form, with nccl-tests' bus-bandwidth factors.

A collective over ``n`` ranks of message size ``S`` (nccl-tests' buffer size) is a sequence of
:class:`Phase` objects, one per tier it crosses (the intra-node fabric, the NIC, the spine).
Each phase has a latency term (number of sequential steps × α) and the bytes each rank puts on
the wire, which the engine moves through the shared link of that tier. Without contention a
phase lasts ``latency + wire_bytes / bandwidth``, which gives the textbook forms:

- ring all-reduce: 2(n-1)·α + 2(n-1)/n · S/B
- ring all-gather / reduce-scatter / all-to-all: (n-1)·α + (n-1)/n · S/B
- tree all-reduce (double binary tree): 2·⌈log2 n⌉·α + 2·S/B
- broadcast: ring (n-1)·α + S/B, tree ⌈log2 n⌉·α + S/B
- point-to-point: α + S/B

``hierarchical`` runs the intra-node part on the fabric and the inter-node part on the network
(reduce-scatter inside the node, all-reduce of the 1/g shard across nodes, all-gather inside).
``auto`` picks the fastest without contention, as NCCL's tuner does: latency-bound algorithms for
small messages, bandwidth-bound ones for large.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Coll = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]
Algo = Literal["ring", "tree", "hierarchical"]
Tier = Literal["fabric", "network"]

ALGOS: tuple[Algo, ...] = ("ring", "tree", "hierarchical")


@dataclass(frozen=True)
class TierLink:
    """Per-rank view of one tier: effective bandwidth (bytes/s) and per-step latency (s)."""

    bandwidth: float
    alpha: float


@dataclass(frozen=True)
class Phase:
    tier: Tier
    latency: float  # seconds of α terms
    wire_bytes: float  # bytes one rank sends on this tier's link


@dataclass(frozen=True)
class GroupShape:
    """Where a communicator's ranks sit: ``n`` ranks over ``nodes`` nodes, ``per_node`` each."""

    n: int
    nodes: int

    @property
    def per_node(self) -> int:
        return max(1, self.n // max(1, self.nodes))


def bus_factor(coll: Coll, n: int) -> float:
    """nccl-tests' busbw = algbw × factor."""
    if n <= 1:
        return 0.0
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _flat(coll: Coll, algo: Algo, n: int, size: float, tier: Tier, alpha: float) -> list[Phase]:
    if n <= 1 or size <= 0:
        return []
    log = math.ceil(math.log2(n))
    if coll == "p2p":
        return [Phase(tier, alpha, size)]
    if coll == "all_reduce":
        if algo == "tree":
            return [Phase(tier, 2 * log * alpha, 2.0 * size)]
        return [Phase(tier, 2 * (n - 1) * alpha, 2.0 * (n - 1) / n * size)]
    if coll == "broadcast":
        steps = log if algo == "tree" else n - 1
        return [Phase(tier, steps * alpha, size)]
    # all_gather, reduce_scatter, all_to_all: ring (NCCL has no tree for these)
    return [Phase(tier, (n - 1) * alpha, (n - 1) / n * size)]


def phases(
    coll: Coll,
    algo: Algo,
    shape: GroupShape,
    size: float,
    fabric: TierLink,
    network: TierLink | None,
) -> list[Phase]:
    """The phases of one collective for one rank (see the module docstring)."""
    n = shape.n
    if n <= 1 or size <= 0:
        return []
    if shape.nodes <= 1 or network is None:
        return _flat(coll, algo, n, size, "fabric", fabric.alpha)
    g = shape.per_node
    k = shape.nodes
    if (
        algo == "hierarchical"
        and g > 1
        and coll in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    ):
        if coll == "all_reduce":
            return (
                _flat("reduce_scatter", "ring", g, size, "fabric", fabric.alpha)
                + _flat("all_reduce", "ring", k, size / g, "network", network.alpha)
                + _flat("all_gather", "ring", g, size, "fabric", fabric.alpha)
            )
        if coll == "all_gather":
            return _flat("all_gather", "ring", k, size / g, "network", network.alpha) + _flat(
                "all_gather", "ring", g, size, "fabric", fabric.alpha
            )
        if coll == "reduce_scatter":
            return _flat("reduce_scatter", "ring", g, size, "fabric", fabric.alpha) + _flat(
                "reduce_scatter", "ring", k, size / g, "network", network.alpha
            )
        return _flat("broadcast", "tree", k, size, "network", network.alpha) + _flat(
            "broadcast", "ring", g, size, "fabric", fabric.alpha
        )
    if coll == "all_to_all":
        # Pairwise exchange: the share of peers inside the node goes over the fabric.
        inside = (g - 1) / n * size
        outside = (n - g) / n * size
        out = [Phase("network", (n - g) * network.alpha, outside)]
        if inside > 0:
            out.append(Phase("fabric", (g - 1) * fabric.alpha, inside))
        return out
    if algo == "hierarchical":
        algo = "ring"
    # A flat ring or tree spanning nodes: every step pays the slower tier's latency and every
    # rank's traffic crosses the network (NCCL rings leave each node through its NICs).
    return _flat(coll, algo, n, size, "network", max(network.alpha, fabric.alpha))


def phase_time(ph: Phase, fabric: TierLink, network: TierLink | None) -> float:
    link = fabric if ph.tier == "fabric" or network is None else network
    return ph.latency + ph.wire_bytes / link.bandwidth


def collective_time(
    coll: Coll,
    algo: Algo,
    shape: GroupShape,
    size: float,
    fabric: TierLink,
    network: TierLink | None = None,
) -> float:
    """Time without contention."""
    return sum(
        phase_time(p, fabric, network) for p in phases(coll, algo, shape, size, fabric, network)
    )


def choose(
    coll: Coll,
    shape: GroupShape,
    size: float,
    fabric: TierLink,
    network: TierLink | None = None,
) -> tuple[Algo, list[Phase], float]:
    """The fastest algorithm without contention, its phases and its time."""
    best: tuple[Algo, list[Phase], float] | None = None
    for algo in ALGOS:
        if algo == "hierarchical" and (shape.nodes <= 1 or shape.per_node <= 1):
            continue
        if algo == "tree" and coll not in ("all_reduce", "broadcast"):
            continue
        ph = phases(coll, algo, shape, size, fabric, network)
        t = sum(phase_time(p, fabric, network) for p in ph)
        if best is None or t < best[2]:
            best = (algo, ph, t)
    assert best is not None
    return best
