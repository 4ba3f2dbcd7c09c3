"""Which traffic can share which links, for one step's simulation.

Link capacities and the symmetric-mode weights (how many class members share a node's root,
a NIC or a leaf's up-links), the communicator kinds whose collectives stay on links nothing else
uses and can be timed analytically, and the condition under which TP (with a CP ring on the same
ports inside the node) may be timed analytically for a pass even though DP or pipeline traffic
can reach its links at other times. A mixin of
:class:`simulator.engine.setup.SimulationBase`, which holds the state it reads.
"""

from __future__ import annotations

from ..config.parallelism import Overlap
from ..config.scenario import ResolvedScenario
from ..network.layout import Layout
from ..network.topology import Topology
from ..workload.memory import shard_group
from .comm import Comm


class LinkSharing:
    rs: ResolvedScenario
    full: bool
    topo: Topology
    lay: Layout
    p: int
    ranks: list[int]
    comm: Comm
    ov: Overlap
    _weights: dict[tuple[int, str], float]
    _analytic: set[str]

    # -- links ---------------------------------------------------------------------------------
    def _capacity(self, key: tuple) -> float:
        st = self.rs.storage
        if key[0] == "storage_client":  # a node's clients: one per host
            return st.read_gbps_per_client.value * 1e9 * self.rs.fabric.hosts(self.rs.gpus_per_node)
        if key[0] == "storage_agg":
            assert st.aggregate_read_gbps is not None
            return st.aggregate_read_gbps.value * 1e9
        return self.topo.capacity(key)

    def _symmetric_weights(self) -> dict[tuple[int, str], float]:
        """For each stage representative: class members sharing its node / NIC / leaf."""
        w: dict[tuple[int, str], float] = {}
        gpn = self.rs.gpus_per_node
        for s in range(self.p):
            members = self.lay.stage_members(s)
            rep = members[0]
            node = self.lay.node(rep)
            nic = self.topo.nic_of(rep)
            leaf = self.topo.leaf(node)
            on_node = [r for r in range(node * gpn, (node + 1) * gpn) if r in members]
            w[(s, "node")] = len(on_node)
            w[(s, "nic")] = sum(1 for r in on_node if self.topo.nic_of(r) == nic)
            lo = leaf * self.topo.nodes_per_leaf * gpn
            hi = lo + self.topo.nodes_per_leaf * gpn
            w[(s, "leaf")] = max(0, min(hi, members.stop) - max(lo, members.start))
        return w

    def _link_weights(
        self, rank: int, links: list[tuple[tuple, float]]
    ) -> list[tuple[tuple, float]]:
        if self.full:
            return links
        stage = self.lay.coords(rank)[3]
        out = []
        for key, frac in links:
            kind = key[0]
            if kind == "nic":
                mult = self._weights[(stage, "nic")]
            elif kind == "uplink":
                mult = self._weights[(stage, "leaf")]
            elif kind == "pcie_root":
                mult = self._weights[(stage, "node")]
            else:
                mult = 1.0
            out.append((key, frac * mult))
        return out

    def _uses_fabric(self, kind: str) -> bool:
        """Whether ``kind``'s traffic crosses the GPUs' fabric ports: between members on one
        node, and on PCIe (where the NIC's traffic goes through the port) between nodes too."""
        rep = self.ranks[0]
        nic_via_port = self.topo.carries_nic
        if kind == "pp":
            return self.p > 1 and (
                nic_via_port
                or any(
                    self.lay.node(r) == self.lay.node(r + len(self.lay.stage_members(0)))
                    for r in (self.lay.stage_members(s)[0] for s in range(self.p - 1))
                )
            )
        size = {"tp": self.rs.tp, "cp": self.rs.cp, "dp": self.rs.dp_cp}[kind]
        shape = self.topo.shape(rep, kind)
        return size > 1 and (shape.per_node > 1 or (nic_via_port and shape.nodes > 1))

    def _analytic_groups(self) -> set[str]:
        """Group kinds whose traffic stays on links nothing else uses: timed analytically.
        Where groups sit on nodes unevenly (TP4 on 6-GPU nodes), one rank's group shape does
        not stand for the others': every collective then goes through the flow network, rank
        by rank."""
        out: set[str] = set()
        if not self.lay.node_aligned():
            return out
        active = [
            k
            for k, n in (
                ("tp", self.rs.tp),
                ("cp", self.rs.cp),
                ("dp", self.rs.dp_cp),
                ("pp", self.rs.pp),
            )
            if n > 1
        ]
        for kind in ("tp", "cp"):
            if kind not in active:
                continue
            shape = self.topo.shape(self.ranks[0], kind)
            if shape.nodes > 1:
                continue
            others = [k for k in active if k != kind and self._uses_fabric(k)]
            if not others:
                out.add(kind)
        return out

    def tp_in_node(self) -> bool:
        """TP groups of two or more GPUs that each sit inside one node, alike on every node."""
        return (
            self.rs.tp > 1
            and self.lay.node_aligned()
            and self.topo.shape(self.ranks[0], "tp").nodes == 1
        )

    def twin_groups(self) -> set[str] | None:
        """The groups of a layer pass whose collectives go through the flow network and that
        its analytic twin times in closed form: TP and the context-parallel ring, each inside
        the node (a pass runs them one after another, so they never share their fabric ports).
        ``None`` where there are none, or one of them leaves the node (its flows meet other
        traffic on the NICs)."""
        rs = self.rs
        kinds = {k for k, n in (("tp", rs.tp), ("cp", rs.cp)) if n > 1 and k not in self._analytic}
        if not kinds or not self.lay.node_aligned():
            return None
        if any(self.topo.shape(self.ranks[0], k).nodes > 1 for k in kinds):
            return None
        return kinds

    def _pass_guards(self) -> dict[int, tuple[str, ...]] | None:
        """Where a pass's TP and CP traffic (``twin_groups``) goes through the flow network
        only because its own class's DP collectives or pipeline sends can share its links (no
        other class's traffic crosses them): for each class, the streams whose transfers can
        cross those links. A pass that starts while those are idle (and launches nothing on
        them) has the links to itself. ``None`` where this does not hold."""
        rs = self.rs
        kinds = self.twin_groups()
        if self.full or kinds is None:
            return None
        comm = self.comm
        dp_kinds = ["dp"] + (["dp_shard", "dp_rep"] if shard_group(rs) < rs.dp_cp else [])

        def links(rank: int, kind: str, tiers: tuple[str, ...]) -> set[int]:
            ep = comm.endpoint(rank, kind)
            return {id(link) for tier in tiers for link, _ in comm.links(ep, tier)}

        def pp_links(i: int, r: int) -> set[int]:
            peers = [p for p in self.ranks[max(0, i - 1) : i + 2] if p != r]
            return {id(link) for p in peers for link, _ in comm.p2p_links(r, p)[1]}

        own = {r: set().union(*(links(r, k, ("fabric",)) for k in kinds)) for r in self.ranks}
        pp = {r: pp_links(i, r) for i, r in enumerate(self.ranks)}
        dp = {
            r: set().union(*(links(r, k, ("fabric", "network")) for k in dp_kinds))
            for r in self.ranks
        }
        if any(own[r] & (own[o] | pp[o] | dp[o]) for r in self.ranks for o in self.ranks if o != r):
            return None
        # A class's own DP and pipeline traffic is left to the run-time check.
        return {
            r: ("dp",) * bool(own[r] & dp[r]) + ("pp-fwd", "pp-bwd") * bool(own[r] & pp[r])
            for r in self.ranks
        }


__all__ = ["LinkSharing"]
