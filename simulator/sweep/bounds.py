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
from ..engine.sim import Simulation


def _spans(prog: Program) -> float:
    """Seconds of ``prog`` that hold the compute stream whatever else runs: its spans (its
    collectives through the flow network add to them, and are left out)."""
    return sum(i.dur for i in prog.items if i.kind == "span")


def step_floor(rs: ResolvedScenario) -> float:
    """A lower bound of ``rs``'s simulated step time (seconds): the busiest pipeline stage's
    compute-stream spans over the step's micro-batches, each backward at the cheaper of its
    two programs (the last micro-batch's, which closes the gradient buckets, or the others')."""
    sim = Simulation(rs)
    m = rs.micro_batches
    fwd = _spans(sim.p_fwd)
    bwd = min(_spans(sim.p_bwd), _spans(sim.p_bwd_sync))
    first = _spans(sim.p_emb_f) + min(_spans(sim.p_emb_b), _spans(sim.p_emb_b_sync))
    last = _spans(sim.p_head_f) + min(_spans(sim.p_head_b), _spans(sim.p_head_b_sync))
    busiest = 0.0
    for stage in range(rs.pp):
        per_mb = sum(rs.chunk_layers(stage)) * (fwd + bwd)
        if stage == 0:
            per_mb += first
        if stage == rs.pp - 1:
            per_mb += last
        busiest = max(busiest, m * per_mb)
    return busiest


__all__ = ["step_floor"]
