"""Cluster topology built from a scenario: rank placement, links and their capacities.

Ranks are placed as Megatron-LM does by default: TP fastest, then CP, then DP, then PP; rank r
sits on node r // gpus_per_node. Links a transfer can cross:

- ``("gpu", rank)``: the GPU's port into the intra-node fabric (NVLink, PCIe, Infinity Fabric);
- ``("pcie_root", node)``: for PCIe through the host, the link between the node's CPU sockets
  (each way), which only transfers between GPUs on different sockets cross;
- ``("nic", node, i)``: NIC i of a node (GPU j uses NIC j·nics // gpus_per_node);
- ``("uplink", leaf)``: a leaf (or rail-group) switch's up-links to the spine, with the
  topology's oversubscription. A single switch has none.

Bandwidths are effective: the profile's figure times its achievable fraction.
"""

from __future__ import annotations

from collections import Counter

from ..config.cluster import FatTree, RailOptimized, default_nodes_per_leaf, down_ports
from ..config.hardware import Fitted
from ..config.scenario import ResolvedScenario
from .collectives import GroupShape
from .layout import layout_of
from .nccl import TierLink

LinkKey = tuple


class Topology:
    def __init__(self, rs: ResolvedScenario) -> None:
        self.rs = rs
        self.layout = layout_of(rs)
        f = rs.fabric
        # An NVSwitch gives each GPU what its own NVLink ports carry at most (an H800's 8
        # links on a switch built for the H100's 18 still move 200 GB/s).
        port = f.bandwidth_gbps.value
        if f.technology == "nvswitch" and rs.gpu.nvlink_gbps is not None:
            port = min(port, rs.gpu.nvlink_gbps.value)
        self.fabric_port_bw = port * 1e9
        self.fabric_bw = self.fabric_port_bw * f.achievable_fraction.value
        self.fabric_alpha = f.latency_us.value * 1e-6
        cc = rs.gpu.compute_capability
        self.sm90: bool | None = cc.value >= 9.0 if cc is not None else None
        self.pcie_root_bw: float | None = None
        self.sockets = 1
        if f.technology == "pcie_host" and f.shared_uplink_gbps is not None and f.sockets > 1:
            self.pcie_root_bw = f.shared_uplink_gbps.value * 1e9 * f.achievable_fraction.value
            self.sockets = min(f.sockets, rs.gpus_per_node)
        self._socket_share: dict[tuple[int, str], float] = {}
        self._socket_load: dict[tuple[int, str], float] = {}  # per (node, kind)
        # PCIe GPUs reach their NICs through the same x16 port as their peers.
        self.carries_nic = f.technology in ("pcie_host", "pcie_switch")
        self.nics = max(1, rs.nics_per_node)
        net = rs.network
        if net is not None:
            self.nic_bw = net.port_bytes_per_s * net.achievable_fraction.value
            self.net_alpha = net.latency_us.value * 1e-6
            radix = net.switch_ports.value
        else:
            self.nic_bw = 0.0
            self.net_alpha = 0.0
            radix = 64
        topo = rs.topology
        self.oversubscription = 1.0
        self.nodes_per_leaf = rs.nodes  # single switch: everything under one
        if isinstance(topo, FatTree):
            self.oversubscription = topo.oversubscription
            self.nodes_per_leaf = topo.nodes_per_leaf or default_nodes_per_leaf(
                radix, self.nics, topo.oversubscription
            )
        elif isinstance(topo, RailOptimized):
            self.oversubscription = topo.oversubscription
            # a rail switch takes one port of each node of its group
            self.nodes_per_leaf = topo.nodes_per_rail_group or max(
                1, down_ports(radix, topo.oversubscription)
            )
        self.leaves = -(-rs.nodes // self.nodes_per_leaf)
        self._shapes: dict[tuple[str, int], GroupShape] = {}
        self._spanned: dict[tuple[str, int], int] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._tiers: dict[tuple[str, int], TierLink] = {}
        self.uplink_bw = self.nodes_per_leaf * self.nics * self.nic_bw / self.oversubscription

    def leaf_aligned(self) -> bool:
        """Whether the leaf switches cut every group the same way: the leaves hold equal
        numbers of nodes, and each group spanning several nodes either fills whole leaves or
        fits inside one. Else, on oversubscribed up-links, some groups' traffic contends there
        and others' does not, and symmetric mode's one rank per stage may be of the faster
        kind."""
        npl, nodes = self.nodes_per_leaf, self.rs.nodes
        if npl >= nodes or self.oversubscription <= 1.0:
            return True  # one leaf, or up-links as wide as the leaf's NICs: nobody waits on them
        g = self.rs.gpus_per_node
        across = [s // g for s in self.layout.group_spans() if s > g and s % g == 0]
        if not across:
            return True
        return nodes % npl == 0 and all(k % npl == 0 or npl % k == 0 for k in across)

    def socket_aligned(self) -> bool:
        """Whether the CPU sockets (PCIe through the host) cut every group the same way: the
        sockets hold equal numbers of GPUs, and each group's span either fills whole sockets
        or fits inside one. Else some groups of a kind cross the socket link and others do not,
        and symmetric mode's one rank per stage may be of the faster kind."""
        if self.pcie_root_bw is None:
            return True
        g = self.rs.gpus_per_node
        if g % self.sockets:
            return False
        per = g // self.sockets
        return all(s % per == 0 or per % s == 0 for s in self.layout.group_spans() if s < g)

    def nic_aligned(self) -> bool:
        """Whether every NIC of a node serves as many of its GPUs as every other (GPU j uses
        NIC j·nics // gpus_per_node), and a pipeline stage smaller than a node either fills
        whole NICs' GPUs or fits inside one NIC's: 5 NICs for 8 GPUs give some GPUs a NIC of
        their own and pair others; 3 NICs for 6 GPUs and stages of 3 put one stage's third GPU
        on a NIC it shares with the next stage, the others on a NIC of their own stage.
        Symmetric mode's one rank per stage may be of either kind. Groups inside a stage (TP,
        a shard group) may split a NIC's GPUs: they run alike at the same time."""
        if self.rs.network is None or self.rs.nodes <= 1:
            return True
        g = self.rs.gpus_per_node
        counts = Counter(self.nic_of(r) for r in range(g))
        if len(set(counts.values())) != 1:
            return False
        per = g // len(counts)  # GPUs per NIC
        stage = self.layout.tp * self.layout.cp * self.layout.dp
        return stage >= g or stage % per == 0 or per % stage == 0

    # -- placement ---------------------------------------------------------------------------
    def leaf(self, node: int) -> int:
        return node // self.nodes_per_leaf

    def nic_of(self, rank: int) -> int:
        local = rank % self.rs.gpus_per_node
        return local * self.nics // self.rs.gpus_per_node

    def gpus_per_nic(self) -> float:
        return max(1.0, self.rs.gpus_per_node / self.nics)

    def _learn(self, rank: int, kind: str) -> None:
        """Shape, leaves spanned and leader of ``rank``'s group, cached for every member."""
        members = self.layout.group(rank, kind)
        nodes = {self.layout.node(r) for r in members}
        shape = GroupShape(len(members), len(nodes))
        spanned = len({self.leaf(n) for n in nodes})
        leader = min(members)
        for r in members:
            key = (kind, r)
            self._shapes[key] = shape
            self._spanned[key] = spanned
            self._leaders[key] = leader

    def shape(self, rank: int, kind: str) -> GroupShape:
        key = (kind, rank)
        cached = self._shapes.get(key)
        if cached is None:
            self._learn(rank, kind)
            cached = self._shapes[key]
        return cached

    def leaves_spanned(self, rank: int, kind: str) -> int:
        key = (kind, rank)
        if key not in self._spanned:
            self._learn(rank, kind)
        return self._spanned[key]

    def leader(self, rank: int, kind: str) -> int:
        """The lowest rank of ``rank``'s group of this kind (names the communicator)."""
        key = (kind, rank)
        if key not in self._leaders:
            self._learn(rank, kind)
        return self._leaders[key]

    # -- contention-free per-rank view (for algorithm choice) --------------------------------
    def fabric_tier(self, rank: int | None = None, kind: str | None = None) -> TierLink:
        """The fabric as one rank sees it, without contention from other traffic; for a group
        (``rank``, ``kind``) on PCIe through the host, the socket link where the group crosses
        it, shared with the node's other groups of that kind, which run their collectives at
        the same time (without a group: a ring over the whole node's sockets)."""
        bw = self.fabric_bw
        if self.pcie_root_bw is not None:
            if rank is None or kind is None:
                # a ring over the sockets crosses each socket link once each way
                bw = min(bw, self.pcie_root_bw)
            elif self.socket_share(rank, kind) > 0.0:
                # every group of this kind on the node runs its collective at once, and each
                # one's ring crosses the socket link: they divide it
                bw = min(bw, self.pcie_root_bw / self.socket_load(rank, kind))
        f = self.rs.fabric
        nvls = 0.0
        if f.switch_reduce_fraction is not None and bw > 0:
            nvls = f.switch_reduce_fraction.value * self.fabric_port_bw / bw
        return TierLink(
            bw,
            self.fabric_alpha,
            nvls,
            ll128=f.ll128 is not None and f.ll128.value,
            sm90=self.sm90,
            fitted=f.fitted is not None,
            fits=_fits(f.fitted, f.achievable_fraction.value),
            carries_nic=self.carries_nic,
        )

    def network_tier(self, rank: int | None = None, kind: str | None = None) -> TierLink | None:
        """The NIC share of one rank; for a group (``rank``, ``kind``) that spans leaves, no more
        than its share of the oversubscribed up-links when every rank of the leaf sends (the
        fraction spanned/nodes of its traffic crosses them, as in :meth:`network_links`)."""
        if self.rs.network is None:
            return None
        bw = self.nic_bw / self.gpus_per_nic()
        net = self.rs.network
        fitted, fits = net.fitted is not None, _fits(net.fitted, net.achievable_fraction.value)
        share = self.gpus_per_nic()
        if rank is None or kind is None or self.leaves <= 1:
            return TierLink(bw, self.net_alpha, fitted=fitted, fits=fits, nic_ranks=share)
        key = (kind, rank)
        tier = self._tiers.get(key)
        if tier is None:
            spanned = self.leaves_spanned(rank, kind)
            if spanned > 1:
                # The leaf's up-links carry its nodes' NICs' worth over the oversubscription
                # (``uplink_bw``), shared by every rank of those nodes: per rank, its node's
                # NICs over its GPUs, whether a rank drives one NIC, several or a share of one.
                nodes = self.shape(rank, kind).nodes
                per_rank = self.nic_bw * self.nics / self.rs.gpus_per_node
                bw = min(bw, per_rank * nodes / (spanned * self.oversubscription))
            tier = self._tiers[key] = TierLink(
                bw, self.net_alpha, fitted=fitted, fits=fits, nic_ranks=share
            )
        return tier

    # -- links a transfer crosses ------------------------------------------------------------
    def capacity(self, key: LinkKey) -> float:
        kind = key[0]
        if kind == "gpu":
            return self.fabric_bw
        if kind == "pcie_root":
            assert self.pcie_root_bw is not None
            return self.pcie_root_bw
        if kind == "nic":
            return self.nic_bw
        if kind == "uplink":
            return self.uplink_bw
        raise KeyError(key)

    def socket(self, rank: int) -> int:
        gpn = self.rs.gpus_per_node
        return (rank % gpn) * self.sockets // gpn

    def socket_share(self, rank: int, kind: str) -> float:
        """Share of one ring edge per member that crosses the socket link (each way): a ring
        over a group's members on this node, in rank order, crosses each socket boundary once
        each way, and its members' flows share that edge; 0 for a group on one socket."""
        key = (rank, kind)
        share = self._socket_share.get(key)
        if share is None:
            node = self.layout.node(rank)
            here = [r for r in self.layout.group(rank, kind) if self.layout.node(r) == node]
            spread = len({self.socket(r) for r in here}) > 1
            share = self._socket_share[key] = 1.0 / len(here) if spread else 0.0
        return share

    def socket_load(self, rank: int, kind: str) -> float:
        """Rings of group ``kind`` that cross the socket link of ``rank``'s node when all the
        node's groups of that kind run at once: the sum of its ranks' shares of a crossing
        edge (:meth:`socket_share`), one per group whose members sit on several sockets."""
        key = (self.layout.node(rank), kind)
        load = self._socket_load.get(key)
        if load is None:
            gpn = self.rs.gpus_per_node
            first = key[0] * gpn
            load = sum(self.socket_share(r, kind) for r in range(first, first + gpn))
            self._socket_load[key] = load = max(1.0, load)
        return load

    def fabric_links(
        self, rank: int, kind: str | None = None, peer: int | None = None
    ) -> list[tuple[LinkKey, float]]:
        """The fabric links one transfer of ``rank`` crosses, each with the share of the
        transfer on it: its GPU's port, and (PCIe through the host) the socket link, for a
        collective of group ``kind`` or a send to ``peer`` on another socket."""
        links: list[tuple[LinkKey, float]] = [(("gpu", rank), 1.0)]
        if self.pcie_root_bw is not None:
            if peer is not None:
                share = 1.0 if self.socket(peer) != self.socket(rank) else 0.0
            else:
                share = self.socket_share(rank, kind) if kind is not None else 1.0
            if share > 0.0:
                links.append((("pcie_root", self.layout.node(rank)), share))
        return links

    def port_links(self, rank: int, kind: str, port: float) -> list[tuple[LinkKey, float]]:
        """The fabric links a network phase of ``rank``'s group ``kind`` also crosses, weighted
        per byte on the NIC: ``port`` on the GPU's port (see ``Phase.port``) and, through the
        host, the socket link where the ring's hops inside the node cross it."""
        if port <= 0:
            return []
        out: list[tuple[LinkKey, float]] = [(("gpu", rank), port)]
        inside = port - (1.0 if self.carries_nic else 0.0)  # hops to the next member: g - 1
        if self.pcie_root_bw is not None and inside > 0:
            share = self.socket_share(rank, kind)
            if share > 0.0:
                out.append((("pcie_root", self.layout.node(rank)), share * inside))
        return out

    def network_links(
        self, rank: int, kind: str, peer: int | None = None
    ) -> list[tuple[LinkKey, float]]:
        """NIC and (if the traffic leaves the leaf) up-link of ``rank``, each with the fraction
        of this rank's flows on that link that are concurrent copies (see symmetric weights)."""
        node = self.layout.node(rank)
        out: list[tuple[LinkKey, float]] = [(("nic", node, self.nic_of(rank)), 1.0)]
        if peer is not None and self.carries_nic:
            out.append((("gpu", rank), 1.0))  # the send leaves through the GPU's PCIe port
        if self.leaves <= 1 or self.oversubscription <= 0:
            return out
        if peer is not None:
            if self.leaf(self.layout.node(peer)) != self.leaf(node):
                out.append((("uplink", self.leaf(node)), 1.0))
            return out
        spanned = self.leaves_spanned(rank, kind)
        if spanned > 1:
            shape = self.shape(rank, kind)
            # A ring over k nodes in L leaves leaves each leaf on L of its k edges.
            out.append((("uplink", self.leaf(node)), spanned / shape.nodes))
        return out


def _fits(fitted: Fitted | None, achievable: float) -> tuple[tuple[str, float, float], ...]:
    """A calibrated profile's per-collective fits as (name, α seconds, bandwidth bytes/s), the
    bandwidth at the profile's ``achievable_fraction``: the fits time each collective alone,
    and calibrate sets the fraction where a training step synchronises slower than that (as
    the tier's own bandwidth is scaled for the collectives it did not fit)."""
    if fitted is None:
        return ()
    return tuple(
        (name, f.latency_us.value * 1e-6, f.bandwidth_gbps.value * 1e9 * achievable)
        for name, f in fitted.collectives.items()
    )
