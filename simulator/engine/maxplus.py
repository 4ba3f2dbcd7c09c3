"""A pipeline of blocking passes as a max-plus system, solved a stage at a time with numpy.

Stage ``s`` runs its passes in a fixed order. Pass ``i`` starts at the later of the end of
pass ``i-1`` and the delivery of its input, then holds the stage for ``w_i``: its programs and,
when it sends, the send it blocks on (so an input is delivered exactly when the sending pass
ends). With ``S`` the prefix sums of ``w`` and ``A_i`` the delivery of pass ``i``'s input::

    end_i = S_i + max(0, max_{j <= i} (A_j - S_{j-1}))

one cumulative maximum over the stage once its inputs are known. Inputs come from the
neighbouring stages (and, for the interleaved schedule, from the other end of the pipeline),
so the stages are evaluated in sweeps up and down the pipeline, starting from lower bounds
(every delivery at 0), re-evaluating a stage only when one of its inputs moved. Every term is
monotone in the deliveries, so the values only grow, and since the passes form a DAG the
sweeps reach its longest paths: the exact schedule. A sweep costs a few numpy calls per stage
whatever the micro-batch count, and a pipeline settles in a few sweeps (about one per chunk and
direction its longest path takes). A pipeline that has not settled after ``max_sweeps`` (a
schedule that deadlocks never does), that waits for an input nobody sends, or that has a pass
of no duration, is refused: ``None``, and the caller runs the event engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StagePasses:
    """One stage's passes in order of execution (arrays of equal length)."""

    hold: np.ndarray  # seconds the pass holds the stage: its programs and its blocking send
    need: np.ndarray  # key of the input it waits for, -1 for none
    sends: np.ndarray  # key its send delivers, -1 for none
    send_cost: np.ndarray  # of ``hold``, the send's share (latency and transfer), 0 for none
    targets: tuple[int, ...]  # stages that receive its sends


@dataclass
class StageTimes:
    ends: np.ndarray  # when each pass ends (its send delivered)
    bubble: float  # waiting for an input whose sender had not finished computing
    comm: float  # waiting for an input in flight, and blocked on its own sends


def solve(stages: list[StagePasses], keys: int, max_sweeps: int = 64) -> list[StageTimes] | None:
    """Every pass's end on every stage, with each stage's bubble and pipeline-communication
    time as the pass-by-pass walk books them; ``None`` when the sweeps do not settle."""
    p = len(stages)
    sent_somewhere = np.zeros(keys, dtype=bool)
    for st in stages:
        sent_somewhere[st.sends[st.sends >= 0]] = True
        if np.any(st.hold <= 0):
            return None  # a cycle of empty passes would settle at once: no proof of progress
    for st in stages:
        if not np.all(sent_somewhere[st.need[st.need >= 0]]):
            return None  # an input nobody sends: the schedule cannot finish
    delivered = np.zeros(keys)
    sent = np.zeros(keys)  # when the sending pass finished computing
    prefix = [np.cumsum(st.hold) for st in stages]
    gathers = [st.need >= 0 for st in stages]
    need_at = [np.where(g, st.need, 0) for st, g in zip(stages, gathers, strict=True)]
    scatters = [st.sends >= 0 for st in stages]
    send_keys = [st.sends[m] for st, m in zip(stages, scatters, strict=True)]
    ends: list[np.ndarray] = [np.zeros(0)] * p
    dirty = [True] * p
    up = True
    for _ in range(max_sweeps):
        for s in range(p) if up else range(p - 1, -1, -1):
            if not dirty[s]:
                continue
            dirty[s] = False
            st, total = stages[s], prefix[s]
            arrive = np.where(gathers[s], delivered[need_at[s]], 0.0)
            lead = np.maximum(arrive - (total - st.hold), 0.0)
            end = total + np.maximum.accumulate(lead)
            ends[s] = end
            out = end[scatters[s]]
            keys_out = send_keys[s]
            if not np.array_equal(delivered[keys_out], out):
                delivered[keys_out] = out
                sent[keys_out] = out - st.send_cost[scatters[s]]
                for d in st.targets:
                    dirty[d] = True
        up = not up
        if not any(dirty):
            break
    else:
        return None
    out_times = []
    for s, st in enumerate(stages):
        end = ends[s]
        before = np.concatenate(([0.0], end[:-1]))
        g = gathers[s]
        done = delivered[need_at[s]][g]
        start = before[g]
        began = sent[need_at[s]][g]
        late = done > start
        done, start, began = done[late], start[late], began[late]
        split = np.minimum(np.maximum(began, start), done)
        bubble = float(np.sum(split - start))
        comm = float(np.sum(done - split)) + float(np.sum(st.send_cost))
        out_times.append(StageTimes(end, bubble, comm))
    return out_times


__all__ = ["StagePasses", "StageTimes", "solve"]
