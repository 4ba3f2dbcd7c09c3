"""NCCL's cost model as the collective algorithms use it: the per-rank view of one tier's link
(:class:`TierLink`), one phase of a collective (:class:`Phase`), NCCL's latency tables (base
latency per algorithm and protocol, per-hop latency by link) and its three protocols (LL,
LL128, Simple), each with its bandwidth share and its latency. The algorithms that build the
phases are :mod:`simulator.network.collectives`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

Tier = Literal["fabric", "network"]


@dataclass(frozen=True)
class TierLink:
    """Per-rank view of one tier: effective bandwidth (bytes/s) and per-step latency (s)."""

    bandwidth: float
    alpha: float
    # In-switch all-reduce (NVLink SHARP): its bandwidth per GPU relative to ``bandwidth`` when
    # each GPU sends its buffer once and receives the result once; 0: the fabric has none.
    switch_reduce: float = 0.0
    # NCCL may run its LL128 protocol inside a node of this fabric (NVLink).
    ll128: bool = False
    # The GPUs are Hopper's or later (compute capability 9.0+), whose LL128 channels NCCL rates
    # faster across nodes; None: not known (inferred from the fabric, engine.across).
    sm90: bool | None = None
    # A calibrated tier: collectives take the probe's α-β fits as measured (per collective,
    # (name, α s, bandwidth B/s); others the tier's own α and bandwidth), no protocol model.
    fitted: bool = False
    fits: tuple[tuple[str, float, float], ...] = ()
    # A fabric whose GPU port also carries the GPU's network traffic (PCIe: the NIC reads and
    # writes GPU memory through the same x16 link as the GPU's peer traffic; NVLink GPUs reach
    # their NICs over a PCIe link of their own).
    carries_nic: bool = False
    # Ranks whose traffic shares one NIC (a network tier): ``bandwidth`` is this rank's share
    # of the NIC, so a NIC's pipeline step is this rank's in the same proportion.
    nic_ranks: float = 1.0


@dataclass(frozen=True)
class Phase:
    tier: Tier
    latency: float  # seconds of α terms
    wire_bytes: float  # bytes one rank sends on this tier's link
    steps: float = 0.0  # sequential pipeline steps (ring hops, tree levels)
    ll: bool = True  # the LL protocol may carry it (NVLS runs the Simple protocol only)
    # Share of the collective's channels this rank's link carries: a ring or tree spanning
    # nodes spreads its channels over the node's NICs, so each NIC moves that share of every
    # pipeline step (as of the wire bytes).
    share: float = 1.0
    # Bytes of one Simple-protocol pipeline step on this rank's link (None: the share of a
    # whole node's step, ``SIMPLE_STEP_BYTES * share``); see ``net_step_bytes``.
    step_bytes: float | None = None
    # NCCL's per-protocol latency beyond the links' own α (NCCL_BASE_LATENCY and
    # NCCL_NET_STEP_LATENCY below): the base cost of a collective that spans nodes plus its
    # network hops' software cost, under LL and under Simple (added once, by with_protocol).
    extra_ll: float = 0.0
    extra_simple: float = 0.0
    # LL128 (inside a node whose fabric has it): the share of the Simple bandwidth it reaches
    # (0: not offered) and its latency beyond the links' α (see ll128_extra()).
    ll128_fraction: float = 0.0
    extra_ll128: float = 0.0
    # A network phase whose ring or tree also runs through each rank's fabric port (the hops
    # between the node's members, and on PCIe the NIC's own traffic): bytes on the port per
    # byte on the NIC (0: the phase crosses no fabric link).
    port: float = 0.0


def phase_bandwidth(ph: Phase, fabric: TierLink, network: TierLink | None) -> float:
    """The rate one rank moves a phase's wire bytes alone: its tier's bandwidth, or for a
    network phase that also crosses the fabric port, the slower of the NIC share and the port
    (a pipelined ring runs at its slowest link's pace)."""
    if ph.tier == "fabric" or network is None:
        return fabric.bandwidth
    if ph.port > 0 and fabric.bandwidth > 0:
        return min(network.bandwidth, fabric.bandwidth / ph.port)
    return network.bandwidth


# NCCL's latency model (NVIDIA/nccl src/graph/tuning.cc, ``baseLat`` and ``hwLat`` as of 2.22-2.28,
# here 2.26.2 @ f44ac759; 2.19-2.21 had no base latency for tree Simple and 28 us per tree hop):
# a collective costs a base latency per algorithm and protocol, plus per pipeline step a
# hardware latency by the link it crosses (NVLink, PCI inside a node; NET between nodes); a
# network step goes through the proxy thread and the NIC, so it costs far more than the wire's
# own latency (ring: LL 2.7 us, Simple 14 us; tree: LL 5 us, Simple 14 us, against
# InfiniBand's ~2 us). Microseconds, per (algorithm, protocol), as NCCL writes them; NCCL's
# tuner (:mod:`.nccl_tuner`) reads them whole.
BASE_LAT_US = {
    ("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 8.4,
    ("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4,
    ("nvls_tree", "simple"): 0.0,
}  # fmt: skip
HW_LAT_US = {
    "nvlink": {
        ("tree", "ll"): 0.6, ("tree", "ll128"): 1.25, ("tree", "simple"): 4.0,
        ("ring", "ll"): 0.6, ("ring", "ll128"): 1.9, ("ring", "simple"): 3.4,
        ("nvls_tree", "simple"): 25.0,
    },
    "pci": {
        ("tree", "ll"): 1.0, ("tree", "ll128"): 1.9, ("tree", "simple"): 4.0,
        ("ring", "ll"): 1.0, ("ring", "ll128"): 2.5, ("ring", "simple"): 5.7,
        ("nvls_tree", "simple"): 0.0,
    },
    "net": {
        ("tree", "ll"): 5.0, ("tree", "ll128"): 8.5, ("tree", "simple"): 14.0,
        ("ring", "ll"): 2.7, ("ring", "ll128"): 4.0, ("ring", "simple"): 14.0,
        ("nvls_tree", "simple"): 14.0,
    },
}  # fmt: skip
# The same tuning.cc's bandwidth caps (GB/s): Hopper's per channel, indexed by nodes (1, 2,
# more), and the LL cap across nodes (llMaxBws[0], an Intel host: 2 nodes, more).
PER_CH_MAX_TREE = (38.7, 41.4, 36.0)
PER_CH_MAX_TREE_LL128 = (36.7, 36.7, 29.0)
PER_CH_MAX_RING_LL128 = (36.7, 36.7, 36.7)
LL_MAX_BW = (39.0, 20.4)


def _seconds(us: float) -> float:
    """``us`` microseconds in seconds, the double the literal ``<us>e-6`` is (a product or a
    quotient can be one unit in the last place off it)."""
    return float(f"{us!r}e-6")


# The model's use of them, in seconds. The links' own α is a floor: a slower network (TCP)
# keeps its larger α.
NCCL_BASE_LATENCY = {k: _seconds(v) for k, v in BASE_LAT_US.items() if k[0] != "nvls_tree"}
NCCL_NET_STEP_LATENCY = {k: _seconds(v) for k, v in HW_LAT_US["net"].items()}
# A step over NVLink (ll128_extra uses the ring's LL and LL128 ones: only their difference
# matters, the fabric's α being measured where LL runs).
NCCL_NVLINK_STEP_LATENCY = {k: _seconds(v) for k, v in HW_LAT_US["nvlink"].items()}


# NVLS's fixed cost per all-reduce beyond the fabric's two hops (collectives._nvls), fitted to
# the nccl-tests curve of eight H100 run with NCCL_ALGO=NVLS (Azure ND H100 v5, NCCL 2.18.5:
# ~42 us from 64 KiB to 1 MiB); NCCL's own tuning model charges 25 us (nvlink NVLS Simple).
NVLS_LATENCY = 35e-6


def log2i(k: int) -> int:
    """NCCL's log2i: floor(log2 k) for k >= 1."""
    return max(0, int(k).bit_length() - 1)


def nccl_extra(algo: str, net_steps: float, net_alpha: float) -> tuple[float, float]:
    """NCCL's latency beyond the links' α for ``algo`` with ``net_steps`` network hops, under
    LL and under Simple (seconds)."""
    return tuple(  # type: ignore[return-value]
        NCCL_BASE_LATENCY[(algo, p)]
        + net_steps * max(0.0, NCCL_NET_STEP_LATENCY[(algo, p)] - net_alpha)
        for p in ("ll", "simple")
    )


# NCCL's LL128 protocol (NVIDIA/nccl src/device/prims_ll128.h): 128-byte lines of 120 data
# bytes and an 8-byte flag, written by whole warps, so the receiver forwards each line as it
# lands (no chunk-sized store-and-forward, unlike Simple) at close to the full bandwidth ("LL128
# can achieve 95% peak", sjeaugey, NVIDIA/nccl issue #281). NCCL enables it only where 128-byte
# stores arrive in order, NVLink on Volta to Blackwell (the fabric profile's ``ll128``), and its
# tuner rates a ring at 0.92 of the Simple bandwidth (tuning.cc, "model refinements", 2.22).
# Offered inside a node only: the published 4- and 8-node H100 curves
# (scenarios/validation/nccl/) show no LL128-like gain across nodes at 4-64 MiB, where NCCL's
# own model would pick it, so rings and trees that span nodes keep LL and Simple.
LL128_RING_FRACTION = 0.92


def ll128_extra(steps: float) -> float:
    """LL128's latency beyond the fabric's α for a ring of ``steps`` steps inside a node: the
    α is measured where LL runs, so LL128 pays NCCL's LL128 latencies less its LL ones (base and
    per NVLink step, tuning.cc ``baseLat`` and ``hwLat``)."""
    base = NCCL_BASE_LATENCY[("ring", "ll128")] - NCCL_BASE_LATENCY[("ring", "ll")]
    step = NCCL_NVLINK_STEP_LATENCY[("ring", "ll128")] - NCCL_NVLINK_STEP_LATENCY[("ring", "ll")]
    return base + steps * step


# NCCL's protocols (NVIDIA/nccl src/device/prims_ll.h, prims_simple.h; "NCCL protocols" in the
# NCCL docs' environment-variable page): LL moves 8-byte lines of 4 data bytes and 4 flag bytes,
# so it reaches half the link bandwidth but needs no synchronisation per step; Simple reaches
# the full bandwidth but each pipeline step waits for a whole chunk, so a ring of k steps pays
# k chunk times before data flows end to end. NCCL picks the faster per size.
LL_BANDWIDTH_FRACTION = 0.5
# Bytes one Simple-protocol step moves across all channels before the next hop can start:
# fitted to the nccl-tests all-reduce curve of 8 A100 over NVLink3 (Azure ND A100 v4,
# scenarios/validation/published/nccl_allreduce_8xA100_nvlink.csv): the 1-8 GiB points give
# t = 141 us + W / 232 GB/s, i.e. 14 steps of ~2.3 MB at the link rate; about 18 channels of
# 128 KiB (NCCL's Simple slice on NVLink), so carried to other fabrics and networks as is.
SIMPLE_STEP_BYTES = 2.3e6
# Across the network a pipeline step moves the slices of the channels one NIC carries. NCCL
# sizes an inter-node ring or tree to the NICs, not to NVLink: its search (src/graph/search.cc,
# ncclTopoCompute with speedArrayInter / sm90SpeedArrayInter, first speed 48 GB/s) finds one
# channel per NIC of a 400G-class port, and ncclTopoDupChannels doubles them, so each NIC
# carries two channels whether a node has one member of the communicator (a data-parallel
# group under 8-way TP) or eight; each moves a Simple slice of SIMPLE_STEP_BYTES / 18 (the
# NVLink fit above: about 18 channels of 128 KiB).
NET_CHANNELS_PER_NIC = 2
FIT_CHANNELS = 18
SIMPLE_SLICE_BYTES = SIMPLE_STEP_BYTES / FIT_CHANNELS
# Inside a node NCCL likewise sizes its channels to the fabric (ncclTopoCompute searches
# per-channel speeds up to the link's bandwidth): the NVLink fit above is 18 channels at
# 231 GB/s, about 12.8 GB/s a channel, so a slower fabric (PCIe: 19-48 GB/s) runs fewer
# channels, never fewer than two (ncclTopoDupChannels), and moves smaller Simple steps.
FIT_FABRIC_BANDWIDTH = 231e9


def fabric_step_bytes(bandwidth: float) -> float:
    """Bytes of one Simple pipeline step inside a node whose fabric moves ``bandwidth``
    bytes/s per GPU: a slice per channel, channels in proportion to the bandwidth."""
    channels = FIT_CHANNELS * bandwidth / FIT_FABRIC_BANDWIDTH
    return SIMPLE_SLICE_BYTES * min(float(FIT_CHANNELS), max(2.0, channels))


def net_step_bytes(fabric_bytes_share: float, nic_ranks: float = 1.0) -> float:
    """Bytes of one rank's Simple pipeline step in a ring or tree spanning nodes, in the
    per-rank view whose bandwidth is the rank's share of its NIC: the NIC's own channels'
    slices over the ``nic_ranks`` ranks that share it (the NIC moves them at its whole rate, a
    rank at its share), or, where the node's fabric is the slower side of every step, the
    fabric's whole step expressed at the rank's NIC rate (``fabric_bytes_share`` = the rank's
    NIC bandwidth / fabric bandwidth, 0 where no step crosses the fabric)."""
    nic_step = NET_CHANNELS_PER_NIC * SIMPLE_SLICE_BYTES / max(1.0, nic_ranks)
    return max(nic_step, SIMPLE_STEP_BYTES * fabric_bytes_share)


# NCCL's own correction of its tree model (NVIDIA/nccl src/graph/tuning.cc, later
# src/tuning/cost_model.cc, treeCorrectionFactor: "Trees are not perfectly sticking to the model
# for medium sizes"): the fraction of the modelled tree all-reduce bandwidth reached at each
# power-of-two buffer size from 64 B (index log2(size / 64)); 1 beyond the table.
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
              .9, 1.0, 1.0),
}  # fmt: skip


def tree_correction(size: float, protocol: str) -> float:
    """NCCL's measured share of the tree model's bandwidth at buffer ``size`` (bytes): the
    table's value at each power of two, and in between interpolated in log size. NCCL's tuner
    steps from one entry to the next, which is harmless for choosing an algorithm but, taken
    as a time, made a buffer one byte larger up to 18% faster; interpolated, the time never
    falls as the buffer grows (no entry is more than 1.25 times the one before)."""
    table = TREE_CORRECTION[protocol]
    if size < 128:
        return table[0]
    x = math.log2(size / 64.0)
    i = int(x)
    if i >= len(table):
        return 1.0
    nxt = table[i + 1] if i + 1 < len(table) else 1.0
    return table[i] + (nxt - table[i]) * (x - i)


def protocol_options(
    ph: Phase, bandwidth: float, tree_size: float | None = None
) -> dict[str, tuple[float, Phase]]:
    """The phase under each of NCCL's protocols it may run (LL, LL128 where the phase offers
    it, Simple) at ``bandwidth``, with its time alone: the protocol's extra latency moved into
    the latency and its bytes into the wire bytes. A tree all-reduce of ``tree_size`` bytes
    reaches only NCCL's corrected share of that bandwidth."""
    if ph.wire_bytes <= 0 or ph.steps <= 0:
        return {"simple": (ph.latency + max(0.0, ph.wire_bytes) / bandwidth, ph)}

    def share(protocol: str) -> float:
        return 1.0 if tree_size is None else tree_correction(tree_size, protocol)

    def done(lat: float, wire: float) -> tuple[float, Phase]:
        q = replace(
            ph,
            latency=lat,
            wire_bytes=wire,
            extra_ll=0.0,
            extra_simple=0.0,
            ll128_fraction=0.0,
            extra_ll128=0.0,
        )
        return lat + wire / bandwidth, q

    if ph.step_bytes is not None:
        step = ph.step_bytes  # (the algorithm sized its own steps)
    else:
        step = fabric_step_bytes(bandwidth) if ph.tier == "fabric" else SIMPLE_STEP_BYTES
        # a pipeline step moves no more than the buffer's share of one (NCCL's chunk shrinks
        # to the data each channel holds), so a small buffer fills no deeper than it is long
        step = min(step * ph.share, ph.wire_bytes / ph.steps)
    fill = ph.steps * step / bandwidth
    out = {"simple": done(ph.latency + ph.extra_simple + fill, ph.wire_bytes / share("simple"))}
    if ph.ll:
        ll_bytes = ph.wire_bytes / (LL_BANDWIDTH_FRACTION * share("ll"))
        out["ll"] = done(ph.latency + ph.extra_ll, ll_bytes)
        if ph.ll128_fraction > 0:
            b = ph.wire_bytes / (ph.ll128_fraction * share("ll128"))
            out["ll128"] = done(ph.latency + ph.extra_ll128, b)
    return out


def with_protocol(ph: Phase, bandwidth: float, tree_size: float | None = None) -> Phase:
    """The phase under the fastest of NCCL's protocols (:func:`protocol_options`)."""
    if ph.wire_bytes <= 0 or ph.steps <= 0:
        return ph
    opts = protocol_options(ph, bandwidth, tree_size)
    # ties go to Simple, then LL, then LL128 (the order they were first compared in)
    return min((opts[p] for p in ("simple", "ll", "ll128") if p in opts), key=lambda o: o[0])[1]
