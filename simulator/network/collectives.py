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
back to back (reduce-scatter inside the node, all-reduce of the 1/g shard across nodes,
all-gather inside), as Horovod's hierarchical all-reduce does. NCCL has no such algorithm: its
rings and trees pipeline both tiers at once, so :func:`choose` picks among NCCL's own
(``ALGOS``: ring, tree, NVLS), the fastest without contention, as NCCL's tuner does:
latency-bound algorithms for small messages, bandwidth-bound ones for large. (Offering the
back-to-back form too made a faster fabric slower: it wins alone, then its whole fabric phase
contends with tensor-parallel traffic, where NCCL's pipelined ring meets it only beside the
NIC's pace.) A ring or tree spanning nodes is one network phase: its wire bytes are the NIC's
share, and its hops between a node's members ride on the GPUs' fabric ports (``Phase.port``),
where they share the port with whatever else crosses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from .across import options_across
from .nccl import (
    LL128_RING_FRACTION,
    Phase,
    Tier,
    TierLink,
    ll128_extra,
    log2i,
    nccl_extra,
    net_step_bytes,
    phase_bandwidth,
    with_protocol,
)
from .nccl_tuner import nccl_choices
from .nvls import nvls, nvls_tree

Coll = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"]
Algo = Literal["ring", "tree", "hierarchical", "nvls", "nvls_tree"]

ALGOS: tuple[Algo, ...] = ("ring", "tree", "nvls", "nvls_tree")


def _nvls_applies(coll: Coll, shape: GroupShape, fabric: TierLink) -> bool:
    """NVLS is an in-switch all-reduce inside one node of a fabric that has it (not on a
    calibrated fabric: the probe's fits timed whatever algorithm NCCL chose)."""
    return (
        coll == "all_reduce" and shape.nodes <= 1 and fabric.switch_reduce > 0 and not fabric.fitted
    )


def _nvls_tree_applies(coll: Coll, shape: GroupShape, fabric: TierLink) -> bool:
    """NCCL's NVLSTree: an all-reduce spanning nodes whose fabric reduces in the switch."""
    return (
        coll == "all_reduce" and shape.nodes > 1 and shape.per_node > 1 and fabric.switch_reduce > 0
    )


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
            return [Phase(tier, 2 * log * alpha, 2.0 * size, 2 * log)]
        return [Phase(tier, 2 * (n - 1) * alpha, 2.0 * (n - 1) / n * size, 2 * (n - 1))]
    if coll == "broadcast":
        steps = log if algo == "tree" else n - 1
        return [Phase(tier, steps * alpha, size, steps)]
    # all_gather, reduce_scatter, all_to_all: ring (NCCL has no tree for these)
    return [Phase(tier, (n - 1) * alpha, (n - 1) / n * size, n - 1)]


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
    if algo == "nvls" and not _nvls_applies(coll, shape, fabric):
        algo = "ring"
    if algo == "nvls":
        return [nvls(n, size, fabric)]
    if algo == "nvls_tree" and (network is None or not _nvls_tree_applies(coll, shape, fabric)):
        algo = "ring"
    if algo == "nvls_tree":
        assert network is not None
        return [nvls_tree(shape.per_node, shape.nodes, size, fabric, network)]
    if shape.nodes <= 1 or network is None:
        flat = _flat(coll, algo, n, size, "fabric", fabric.alpha)
        if not fabric.ll128 or coll in ("p2p", "all_to_all"):
            return flat
        return [
            replace(
                p,
                ll128_fraction=LL128_RING_FRACTION,
                extra_ll128=ll128_extra(p.steps),
            )
            for p in flat
        ]
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
        # (through a PCIe GPU's port too, where the NIC's traffic crosses it)
        out = [
            Phase(
                "network",
                (n - g) * network.alpha,
                outside,
                port=1.0 if fabric.carries_nic else 0.0,
            )
        ]
        if inside > 0:
            out.append(Phase("fabric", (g - 1) * fabric.alpha, inside))
        return out
    if algo == "hierarchical":
        algo = "ring"
    # A flat ring or tree spanning nodes: every step pays the slower tier's latency. NCCL
    # builds one ring (or tree) per channel and sends each through a different NIC
    # (rail-aligned), so a node's g members share its crossing traffic: each rank's NIC carries
    # 1/g of the traffic a rank moves, and its fabric port the (g-1)/g that goes to the next
    # member inside the node (on PCIe, where the NIC's traffic crosses the port too, all of
    # it). The phase's wire bytes are the NIC's; ``port`` puts the rest on the fabric port,
    # so that a pipelined ring runs at its slowest link's pace and shares the port with
    # whatever else crosses it (tensor-parallel traffic).
    if algo == "tree" and coll == "all_reduce":
        # NCCL's tree: a chain through the g GPUs of each node, a binary tree over the k
        # nodes; reduce up and broadcast down, pipelined through every level.
        depth_net = math.ceil(math.log2(k))
        lat = 2 * ((g - 1) * fabric.alpha + depth_net * network.alpha)
        out = [Phase("network", lat, 2.0 * size, 2 * (g - 1 + depth_net))]
    else:
        out = _flat(coll, algo, n, size, "network", max(network.alpha, fabric.alpha))
    slow_fabric = network.bandwidth / fabric.bandwidth if fabric.bandwidth > 0 else 1.0
    if g <= 1:
        slow_fabric = 0.0  # one rank per node: no step crosses the fabric
    share = 1.0 / g
    port = (g - 1) + (1.0 if fabric.carries_nic else 0.0)
    # One Simple step lasts as long on the slower side; expressed at the phase's own rate.
    step_bytes = net_step_bytes(slow_fabric, network.nic_ranks) * (
        phase_bandwidth(Phase("network", 0.0, 0.0, port=port), fabric, network) / network.bandwidth
    )
    # NCCL's hops between nodes: up and down the tree's levels (NCCL counts log2i(k) of them),
    # or a ring's crossings; never more than the steps the phase already charges α for, so a
    # lower α never makes the collective slower.
    if coll == "p2p":
        extra = (0.0, 0.0)
    elif algo == "tree" and coll == "all_reduce":
        extra = nccl_extra("tree", 2 * log2i(k), network.alpha)
    else:  # each step of the flat ring (or broadcast tree) already pays the slower tier's α
        crossings = log2i(k) if algo == "tree" else (2 if coll == "all_reduce" else 1) * (k - 1)
        steps = out[0].steps if out else 0.0
        extra = nccl_extra("ring", min(crossings, steps), max(network.alpha, fabric.alpha))
    return [
        replace(
            p,
            wire_bytes=p.wire_bytes * share,
            share=share,
            port=port,
            # no more than the buffer's share of a step (see nccl.protocol_options)
            step_bytes=min(step_bytes, p.wire_bytes * share / p.steps) if p.steps else step_bytes,
            extra_ll=extra[0],
            extra_simple=extra[1],
        )
        for p in out
    ]


def as_fitted(ph: Phase, coll: Coll, link: TierLink) -> Phase:
    """A phase on a calibrated tier, timed as the probe's fit of ``coll`` (ring form: α per
    step, wire bytes at the fitted bandwidth; the tier's own α and bandwidth, the all-reduce
    fit, for a collective it did not measure), with no protocol or pipeline model on top: the
    fit measured the transport with its own. The bandwidth is carried as wire bytes at the
    tier's bandwidth, so that shared links still divide it."""
    alpha, bandwidth = link.alpha, link.bandwidth
    for name, a, b in link.fits:
        if name == coll:
            alpha, bandwidth = a, b
    wire = ph.wire_bytes * (link.bandwidth / bandwidth) if bandwidth > 0 else ph.wire_bytes
    # a phase that counts no steps (a point-to-point send: one hop) keeps its own α terms,
    # each at the fit's α (it lost them all: a 1 KiB send took 1 us against 119 measured)
    if ph.steps > 0:
        latency = ph.steps * alpha
    else:
        latency = ph.latency * (alpha / link.alpha) if link.alpha > 0 else ph.latency
    return replace(
        ph,
        latency=latency,
        wire_bytes=wire,
        port=0.0,  # the fit timed the collective whole, fabric hops included
        extra_ll=0.0,
        extra_simple=0.0,
        ll128_fraction=0.0,
        extra_ll128=0.0,
    )


def phase_time(ph: Phase, fabric: TierLink, network: TierLink | None) -> float:
    return ph.latency + ph.wire_bytes / phase_bandwidth(ph, fabric, network)


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


def _applies(
    algo: Algo, coll: Coll, shape: GroupShape, fabric: TierLink, network: TierLink | None
) -> bool:
    """Whether NCCL can run ``coll`` with ``algo`` on this group."""
    if algo == "tree":
        # NCCL's trees span nodes; inside one node a tree is a chain
        return coll in ("all_reduce", "broadcast") and shape.nodes > 1
    if algo == "nvls":
        return _nvls_applies(coll, shape, fabric)
    if algo == "nvls_tree":
        return network is not None and _nvls_tree_applies(coll, shape, fabric)
    return algo == "ring"


def choose(
    coll: Coll,
    shape: GroupShape,
    size: float,
    fabric: TierLink,
    network: TierLink | None = None,
    algos: tuple[Algo, ...] | None = None,
) -> tuple[Algo, list[Phase], float]:
    """The fastest algorithm without contention, its phases and its time: among ``algos``
    where a run restricted NCCL to them (``NCCL_ALGO``) and one of them applies, else among
    all of NCCL's."""
    allowed = ALGOS
    if algos is not None and any(_applies(a, coll, shape, fabric, network) for a in algos):
        allowed = algos
    if (
        coll == "all_reduce"
        and shape.nodes > 1
        and size > 0
        and network is not None
        and not (network.fitted or fabric.fitted)
    ):
        return _as_nccl_picks(shape, size, fabric, network, allowed)
    best: tuple[Algo, list[Phase], float] | None = None
    for algo in allowed:
        if not _applies(algo, coll, shape, fabric, network):
            continue
        ph = [
            as_fitted(p, coll, link)
            if (link := fabric if p.tier == "fabric" or network is None else network).fitted
            else with_protocol(
                p,
                phase_bandwidth(p, fabric, network),
                size if algo == "tree" and coll == "all_reduce" else None,
            )
            for p in phases(coll, algo, shape, size, fabric, network)
        ]
        t = sum(phase_time(p, fabric, network) for p in ph)
        if best is None or t < best[2]:
            best = (algo, ph, t)
    assert best is not None
    return best


def _as_nccl_picks(
    shape: GroupShape,
    size: float,
    fabric: TierLink,
    network: TierLink,
    allowed: tuple[Algo, ...],
) -> tuple[Algo, list[Phase], float]:
    """An all-reduce spanning nodes as NCCL runs it: each (algorithm, protocol) timed by the
    model, the one NCCL's tuner rates fastest taken, or the fastest of its choices for larger
    buffers where one is faster (:mod:`.nccl_tuner`)."""
    options: dict[tuple[str, str], tuple[Algo, Phase, float]] = {}
    for algo in allowed:
        if not _applies(algo, "all_reduce", shape, fabric, network):
            continue
        (ph,) = phases("all_reduce", algo, shape, size, fabric, network)
        k, g = shape.nodes, shape.per_node
        for proto, (t, q) in options_across(ph, algo, g, k, size, fabric, network).items():
            options[(algo, proto)] = (algo, q, t)
    nvlink = fabric.ll128 or fabric.switch_reduce > 0
    picks = nccl_choices(tuple(options), shape.nodes, shape.per_node, size, nvlink)
    a, q, t = min((options[p] for p in picks), key=lambda o: o[2])
    return a, [q], t
