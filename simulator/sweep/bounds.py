"""A floor under a plan's step time, from its programs alone, so that an automatic search can
skip plans that cannot win.

Every pass a stage runs holds its compute stream for at least the spans of its program (the
compute kernels, and whatever communication the program already times in closed form); the
step lasts at least as long as the busiest stage's spans over all its passes. Building the
programs takes a millisecond or two, where simulating a deep interleaved pipeline with hundreds
of micro-batches takes seconds, so :func:`step_floor` lets the search evaluate plans from the
lowest floor up and stop simulating a plan once its floor exceeds the best step found: that
plan's step, and its step over goodput, can only be longer. The answer is the one an
exhaustive search gives.
"""

from __future__ import annotations

from ..config.scenario import ResolvedScenario
from ..engine.program import Program
from ..engine.schedule import schedule
from ..engine.setup import PROGRAMS
from ..engine.sim import Simulation


def _spans(prog: Program) -> float:
    """Seconds of ``prog`` that hold the compute stream whatever else runs: its spans (its
    collectives through the flow network add to them, and are left out)."""
    return sum(i.dur for i in prog.items if i.kind == "span")


def step_floor(rs: ResolvedScenario) -> float:
    """A lower bound of ``rs``'s simulated step time (seconds): over the pipeline stages, the
    most of a stage's compute-stream spans over the step's micro-batches, each backward at the
    cheaper of its two programs (the last micro-batch's, which closes the gradient buckets, or
    the others'), plus the pipeline's fill and drain around them: a stage runs the first
    micro-batch's forward of its first chunk before anything else, so not before the stages
    ahead have run theirs, and the last micro-batch's backward of that chunk after everything
    else, which the stages ahead must then run in turn before the step ends (the 1F1B bubble,
    (p-1) passes of a uniform pipeline; its 1/v under the interleaved schedule)."""
    sim = Simulation(rs)
    progs = {name: getattr(sim, name) for name in PROGRAMS}
    # TP collectives and a CP ring inside a node that share links with other groups run
    # through the flow network, so the programs leave them out; each takes at least its
    # closed-form time on links of its own (the ring's exchanges sharing them with each
    # other), and blocks the compute stream as long as that time is more than the kernel that
    # may hide it. (TP inside a node beside a ring that leaves it: TP alone.)
    kinds = sim.twin_groups() or ({"tp"} if sim.tp_in_node() else set())
    if kinds:
        progs = sim.programs(kinds)
    m, p, v = rs.micro_batches, rs.pp, rs.parallelism.virtual_stages
    fwd = _spans(progs["p_fwd"])
    bwd = min(_spans(progs["p_bwd"]), _spans(progs["p_bwd_sync"]))
    emb_f = _spans(progs["p_emb_f"])
    emb_b = min(_spans(progs["p_emb_b"]), _spans(progs["p_emb_b_sync"]))
    last = _spans(progs["p_head_f"]) + min(
        _spans(progs["p_head_b"]), _spans(progs["p_head_b_sync"])
    )
    kind = rs.parallelism.pp_schedule.kind
    floor = ahead = 0.0  # ahead: the first chunk's forward and backward on the stages before
    for stage in range(p):
        per_mb = sum(rs.chunk_layers(stage)) * (fwd + bwd)
        if stage == 0:
            per_mb += emb_f + emb_b
        if stage == p - 1:
            per_mb += last
        order = schedule(kind, stage, p, m, v)
        bounded = order[0] == ("F", 0, 0) and order[-1] == ("B", m - 1, 0)
        floor = max(floor, m * per_mb + (ahead if bounded else 0.0))
        chunk0 = rs.chunk_layers(stage)[0]
        ahead += chunk0 * (fwd + bwd) + (emb_f + emb_b if stage == 0 else 0.0)
    return floor


__all__ = ["step_floor"]
