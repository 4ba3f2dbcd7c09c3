"""Collectives that start together on the same links, timed in closed form.

A context-parallel ring's backward passes K and V round the ring again while the K and V
gradients go the other way (``workload.ops.layer_ops``): two collectives a rank launches at the
same instant on the same fabric ports. The flow network runs them as the engine runs every
collective (each phase an α wait, then one flow of its wire bytes) and shares the ports fairly
between the flows in progress. :func:`finish_together` does the same without the event
queue, so that a pass timed analytically (``engine.program.build_program``) ends when the
flow network would have ended it.
"""

from __future__ import annotations

from .collectives import phase_bandwidth
from .nccl import Phase, TierLink


def finish_together(
    plans: list[list[Phase]], fabric: TierLink, network: TierLink | None = None
) -> list[float]:
    """Seconds after a common start at which each of ``plans`` (one collective's phases each)
    ends, when every flow in progress moves at its phase's own rate over their number (fair
    shares of the same links)."""
    # per collective: phase index, seconds of α left, bytes of the phase left
    at = [0] * len(plans)
    wait = [0.0] * len(plans)
    left = [0.0] * len(plans)
    done: list[float | None] = [None] * len(plans)
    now = 0.0

    def enter(i: int) -> None:
        """Collective ``i`` starts its phase ``at[i]`` (or ends, past the last)."""
        while (
            at[i] < len(plans[i]) and max(plans[i][at[i]].latency, plans[i][at[i]].wire_bytes) <= 0
        ):
            at[i] += 1
        if at[i] == len(plans[i]):
            done[i] = now
            return
        ph = plans[i][at[i]]
        wait[i], left[i] = max(0.0, ph.latency), max(0.0, ph.wire_bytes)

    for i in range(len(plans)):
        enter(i)
    while any(d is None for d in done):
        live = [i for i, d in enumerate(done) if d is None]
        flowing = [i for i in live if wait[i] <= 0.0]
        rate = {
            i: phase_bandwidth(plans[i][at[i]], fabric, network) / len(flowing) for i in flowing
        }
        ends = {
            i: left[i] / rate[i] if rate[i] > 0 else (0.0 if left[i] <= 0 else float("inf"))
            for i in flowing
        }
        dt = min([wait[i] for i in live if wait[i] > 0.0] + list(ends.values()))
        now += dt
        for i in live:
            if wait[i] > 0.0:
                wait[i] = max(0.0, wait[i] - dt)
            elif ends[i] <= dt:  # this flow is over: the next phase
                at[i] += 1
                enter(i)
            else:
                left[i] -= rate[i] * dt
    return [d for d in done if d is not None]


__all__ = ["finish_together"]
