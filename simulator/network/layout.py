"""Where the ranks sit: Megatron-LM's default placement (TP fastest, then CP, then DP, then PP;
rank r on node r // gpus_per_node), each rank's coordinates and its groups' members."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..config.scenario import ResolvedScenario
from ..workload.memory import shard_group


@dataclass(frozen=True)
class Layout:
    tp: int
    cp: int
    dp: int
    pp: int
    gpus_per_node: int
    shard: int = 0  # ZeRO/FSDP shard group over DP (hybrid sharding); 0: all of DP

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        t = rank % self.tp
        c = (rank // self.tp) % self.cp
        d = (rank // (self.tp * self.cp)) % self.dp
        p = rank // (self.tp * self.cp * self.dp)
        return t, c, d, p

    def rank(self, t: int, c: int, d: int, p: int) -> int:
        return t + self.tp * (c + self.cp * (d + self.dp * p))

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def group(self, rank: int, kind: str) -> list[int]:
        t, c, d, p = self.coords(rank)
        if kind == "tp":
            return [self.rank(i, c, d, p) for i in range(self.tp)]
        if kind == "cp":
            return [self.rank(t, i, d, p) for i in range(self.cp)]
        if kind in ("dp", "dp_shard", "dp_rep"):
            # The ranks holding the same parameters: every DP replica's CP ranks (index
            # j = c + cp·d). Hybrid sharding: consecutive ones form a shard group; the replica
            # group links the ranks holding the same shard in each group.
            n = self.cp * self.dp
            g = self.shard or n
            me = c + self.cp * d
            keep = {
                "dp": lambda j: True,
                "dp_shard": lambda j: j // g == me // g,
                "dp_rep": lambda j: j % g == me % g,
            }[kind]
            return [self.rank(t, j % self.cp, j // self.cp, p) for j in range(n) if keep(j)]
        if kind == "pp":
            return [self.rank(t, c, d, i) for i in range(self.pp)]
        raise ValueError(f"unknown group kind {kind!r}")

    def node_aligned(self) -> bool:
        """Whether every TP, CP, shard, DP and pipeline group sits on nodes the same way as the
        first one: each group's span of consecutive ranks (TP; TP×CP; a shard group's TP×shard,
        its members TP apart; a stage's TP×CP×DP) either fills whole nodes or fits inside one.
        Symmetric mode simulates one rank per stage and is exact only then (with 6 GPUs a node
        and TP 4, the second TP group straddles two nodes and is slower than the first)."""
        g = self.gpus_per_node
        return all(span % g == 0 or g % span == 0 for span in self.group_spans())

    def group_spans(self) -> list[int]:
        """Ranks from the first to the last member of each kind of group, as placed: TP; TP×CP;
        a stage's TP×CP×DP; a shard group's TP×shard (its members TP apart)."""
        spans = [self.tp, self.tp * self.cp, self.tp * self.cp * self.dp]
        if self.shard:
            spans.append(self.tp * self.shard)
        return spans

    def stage_members(self, stage: int) -> range:
        block = self.tp * self.cp * self.dp
        return range(stage * block, (stage + 1) * block)

    @functools.cache  # noqa: B019 (a frozen, hashable value: one entry per layout)
    def loader_ranks_per_node(self, pipeline_ends: bool = True) -> tuple[int, ...]:
        """Ranks per node that read training data. ``pipeline_ends``: TP rank 0 of every DP×CP
        coordinate on the first and the last pipeline stage (Megatron builds its data iterators
        there; the first stage needs the tokens, the last the labels, and TP rank 0 broadcasts
        to its group); else every rank."""
        nodes = -(-self.world // self.gpus_per_node)
        if not pipeline_ends:
            return tuple(
                min(self.gpus_per_node, self.world - n * self.gpus_per_node) for n in range(nodes)
            )
        block = self.tp * self.cp * self.dp
        counts = [0] * nodes
        for stage in {0, self.pp - 1}:
            for rank in range(stage * block, (stage + 1) * block, self.tp):
                counts[rank // self.gpus_per_node] += 1
        return tuple(counts)


def layout_of(rs: ResolvedScenario) -> Layout:
    """The scenario's ranks laid out (TP fastest, then CP, DP, PP) with its shard group."""
    return Layout(rs.tp, rs.cp, rs.dp, rs.pp, rs.gpus_per_node, shard_group(rs))


__all__ = ["Layout", "layout_of"]
