"""What a step may cost to simulate before it is refused rather than run: full mode's ranks,
rank-passes and the layer collectives it would move through the flow network one by one, the DP
gradient buckets, and a trace's events. Each bound says why and what to change."""

from __future__ import annotations

from .config.scenario import ResolvedScenario
from .errors import UserError

# Full mode holds every rank's state and runs every rank's passes: 16,384 GPUs of the Llama-3
# 405B layout (32 passes each, 524,288 rank-passes) take about 23 s and 380 MB on a 2-core
# machine (benchmarks/engine_speed.py --full-16k); beyond these a run is refused, not started.
FULL_MODE_LIMIT = 16384
FULL_MODE_PASS_LIMIT = 1 << 20
# TP/CP collectives through the network, all ranks together: about three events each, and
# full mode runs ~400,000 events a second on that machine, so this bounds a step at ~20 s (a
# 64-GPU plan with TP 16 across nodes and 512 micro-batches made 7.9M and took 70 s).
FULL_MODE_COLLECTIVE_LIMIT = 2_500_000


def check_full_size(rs: ResolvedScenario) -> None:
    """Refuse a full-mode run whose ranks or rank-passes are past what it can do in about a
    minute and under a gigabyte."""
    hint = "drop --full (symmetric mode is exact for uniform clusters)"
    if rs.gpus > FULL_MODE_LIMIT:
        raise UserError(
            f"--full simulates every rank; {rs.gpus} GPUs is above the limit of {FULL_MODE_LIMIT}",
            hint=hint,
        )
    passes = rs.micro_batches * rs.parallelism.virtual_stages * 2
    if rs.gpus * passes > FULL_MODE_PASS_LIMIT:
        raise UserError(
            f"--full simulates every rank's passes; {rs.gpus} GPUs x {passes} passes each is "
            f"above the limit of {FULL_MODE_PASS_LIMIT:,} rank-passes",
            hint=hint + ", or fewer micro-batches per step",
        )
    flows = flow_layer_groups(rs)
    if flows:
        # TP or CP collectives full mode moves through the flow network, each a few events per
        # rank: groups that cross nodes or CPU sockets, or share their node's links with
        # another group's traffic (a group with its links to itself runs a pass analytically).
        from .workload.comm import step_comm

        per_rank = max(
            sum(i.calls for i in step_comm(rs, s) if i.group in flows) for s in range(rs.pp)
        )
        if per_rank * rs.gpus > FULL_MODE_COLLECTIVE_LIMIT:
            raise UserError(
                f"--full simulates every rank's collectives; TP/CP groups that cross nodes "
                f"or CPU sockets, that nodes hold unevenly or whose links other groups' "
                f"traffic shares make {per_rank:,.0f} collectives "
                f"per rank per step ({per_rank * rs.gpus:,.0f} in all), above the limit of "
                f"{FULL_MODE_COLLECTIVE_LIMIT:,}",
                hint="drop --full (one rank per stage stands for the rest; exact where the "
                "groups sit on nodes alike), or fewer micro-batches per step",
            )


def flow_layer_groups(rs: ResolvedScenario) -> set[str]:
    """The layer groups (``tp``, ``cp``) whose collectives full mode runs through the flow
    network rank by rank: every one where :func:`layer_collectives_shared`, else those the
    engine does not time analytically (another group's traffic shares their links, as data
    parallelism inside a 36-GPU node shares TP's NVLink ports)."""
    active = {k for k, n in (("tp", rs.tp), ("cp", rs.cp)) if n > 1}
    if not active or layer_collectives_shared(rs):
        return active
    from .engine.sim import Simulation

    return active - Simulation(rs)._analytic_groups()


def layer_collectives_shared(rs: ResolvedScenario) -> bool:
    """Whether full mode moves TP or CP collectives through the flow network rank by rank:
    where groups cross nodes, where any group cuts the nodes unevenly (the engine then times
    no group analytically: ``LinkSharing._analytic_groups``), or where CPU sockets of a
    PCIe-through-host fabric cut any TP or CP group."""
    g, k = rs.gpus_per_node, rs.tp * rs.cp
    if k <= 1:
        return False
    if k > g or g % k:
        return True
    from .network.layout import layout_of
    from .network.topology import Topology

    if not layout_of(rs).node_aligned():
        return True
    topo = Topology(rs)
    ranks = range(min(rs.gpus, g))  # one node's ranks: every group the sockets can cut
    return any(topo.socket_share(r, kind) > 0 for r in ranks for kind in ("tp", "cp"))


# Each DP collective is a few events per simulated rank, as a pass is: past as many as the
# rank-passes full mode allows, a step takes minutes and gigabytes (a 0.001 MB gradient bucket
# without overlap made 2.4M events for an 8B model). The 405B layout on 16,384 GPUs in full
# mode reduces 24 buckets a rank, 393,216 collectives, within it.
DP_COLLECTIVE_LIMIT = FULL_MODE_PASS_LIMIT


def check_dp_collectives(rs: ResolvedScenario, full: bool) -> None:
    """Refuse a step whose DP gradient buckets are too many collectives to simulate."""
    if rs.dp_cp <= 1:
        return
    from .workload.comm import dp_buckets

    per_mb = rs.micro_batches if rs.zero_stage >= 2 else 1
    per_rank = max(dp_buckets(rs, s)[1] for s in range(rs.pp)) * per_mb
    ranks = rs.gpus if full else rs.pp
    if per_rank * ranks > DP_COLLECTIVE_LIMIT:
        raise UserError(
            f"the DP gradient reduction is {per_rank:,} collectives per rank per step "
            f"({per_rank * ranks:,} over the simulated ranks), above the limit of "
            f"{DP_COLLECTIVE_LIMIT:,}",
            path="parallelism.dp_bucket_mb",
            hint="use larger gradient buckets (PyTorch DDP's default is 25 MB), or leave "
            "dp_bucket_mb unset for the software stack's own",
        )


# A trace holds an event per operation span of every traced rank (one rank per stage, or every
# rank under --full); past this estimate the JSON would be gigabytes and take minutes to write.
TRACE_EVENT_LIMIT = 2_000_000


def check_trace_size(rs: ResolvedScenario, full: bool) -> None:
    """Refuse, before the run, a trace estimated at more than twice TRACE_EVENT_LIMIT events.
    A traced layer pass draws its compute spans around each collective on the compute stream,
    each collective, and its memory-bound
    and gradient-bucket work: about 4 + 2 x (collectives per layer) events, and 2 more where
    ZeRO-3/FSDP gathers the layer's weights; within about 15% of the traces of the bundled and
    tested layouts (11 a layer for TP 8 with sequence parallelism, 4 for plain DP). A pass adds
    its sends, receives and waits (4)."""
    from .workload.ops import layer_ops

    ranks = rs.gpus if full else rs.pp
    passes = rs.micro_batches * rs.parallelism.virtual_stages * 2
    per_layer = 4 + 2 * sum(1 for op in layer_ops(rs) if op.kind == "collective")
    if rs.zero_stage >= 3:
        per_layer += 2
    per_pass = max(1, rs.model.layers // (rs.pp * rs.parallelism.virtual_stages)) * per_layer + 4
    events = ranks * passes * per_pass
    # The estimate is within about 2x of the count (0.5-1.2x on the layouts a review traced),
    # so only a trace that is surely too large is refused before the run; the tracer itself
    # stops a run whose trace reaches the limit (engine.tracing).
    if events > 2 * TRACE_EVENT_LIMIT:
        raise UserError(
            f"the trace would hold about {events:,} events (traced ranks x passes x layers x "
            "spans a layer), "
            f"above the limit of {TRACE_EVENT_LIMIT:,}",
            path="--trace",
            hint="trace a step with fewer micro-batches (training.global_batch), or drop --trace",
        )


__all__ = [
    "DP_COLLECTIVE_LIMIT",
    "FULL_MODE_COLLECTIVE_LIMIT",
    "FULL_MODE_LIMIT",
    "FULL_MODE_PASS_LIMIT",
    "TRACE_EVENT_LIMIT",
    "check_dp_collectives",
    "check_full_size",
    "check_trace_size",
    "flow_layer_groups",
    "layer_collectives_shared",
]
