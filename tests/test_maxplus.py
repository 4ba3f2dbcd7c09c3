"""The max-plus pipeline solver (engine.maxplus) against a pass-by-pass walk and the 1F1B and
interleaved bubbles, and its refusal of a schedule that deadlocks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from simulator.engine.maxplus import StagePasses, solve
from simulator.engine.schedule import bubble_fraction, schedule_arrays


def _pipeline(
    kind: str, p: int, m: int, v: int, work: list[float], send: float
) -> tuple[list[StagePasses], int]:
    """Stage s runs ``work[s]`` per pass (forward and backward alike) and blocks ``send`` on
    every send; keys are (micro-batch, chunk, direction, receiving stage)."""
    stride = 2 * v * p

    def key(mb: np.ndarray, ch: np.ndarray | int, fwd: bool, stage: int) -> np.ndarray:
        return mb * stride + (np.asarray(ch) * p + stage) * 2 + int(fwd)

    stages = []
    for s in range(p):
        fwd, mb, ch = schedule_arrays(kind, s, p, m, v)
        first = fwd & (s == 0) & (ch == 0)
        last_b = ~fwd & (s == p - 1) & (ch == v - 1)
        need = np.where(
            first | last_b, -1, np.where(fwd, key(mb, ch, True, s), key(mb, ch, False, s))
        )
        # a forward sends on unless it ends the model; a backward unless it ends at stage 0
        f_to = (s + 1, ch) if s < p - 1 else (0, ch + 1)  # past the last stage: next chunk
        b_to = (s - 1, ch) if s > 0 else (p - 1, ch - 1)
        ends_f = fwd & (s == p - 1) & (ch == v - 1)
        ends_b = ~fwd & (s == 0) & (ch == 0)
        sends = np.where(fwd, key(mb, f_to[1], True, f_to[0]), key(mb, b_to[1], False, b_to[0]))
        sends = np.where(ends_f | ends_b, -1, sends)
        cost = np.where(sends >= 0, send, 0.0)
        targets = tuple({f_to[0], b_to[0]} - {s})
        stages.append(
            StagePasses(np.full(len(mb), work[s]) + cost, need, sends, cost, targets or (s,))
        )
    return stages, m * stride


def _walk(stages: list[StagePasses]) -> list[tuple[np.ndarray, float, float]]:
    """The reference: each stage runs its passes in order, waiting for its inputs; per stage
    its passes' ends, the wait for inputs whose sender was still computing (bubble) and the
    wait for inputs in flight plus its own blocking sends (pipeline communication)."""
    delivered: dict[int, tuple[float, float]] = {}  # key -> (sender done computing, delivered)
    pos = [0] * len(stages)
    now = [0.0] * len(stages)
    ends: list[list[float]] = [[] for _ in stages]
    bubble = [0.0] * len(stages)
    comm = [0.0] * len(stages)
    moved = True
    while moved:
        moved = False
        for s, st in enumerate(stages):
            while pos[s] < len(st.hold):
                i = pos[s]
                k = int(st.need[i])
                if k >= 0 and k not in delivered:
                    break
                if k >= 0:
                    began, done = delivered[k]
                    if done > now[s]:
                        split = min(max(began, now[s]), done)
                        bubble[s] += split - now[s]
                        comm[s] += done - split
                        now[s] = done
                now[s] += float(st.hold[i])
                comm[s] += float(st.send_cost[i])
                ends[s].append(now[s])
                if st.sends[i] >= 0:
                    delivered[int(st.sends[i])] = (now[s] - float(st.send_cost[i]), now[s])
                pos[s] += 1
                moved = True
    return [(np.array(e), b, c) for e, b, c in zip(ends, bubble, comm, strict=True)]


@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "interleaved"])
def test_solver_equals_the_walk_on_random_pipelines(kind: str) -> None:
    rnd = random.Random(kind)
    for _ in range(40):
        p = rnd.choice([2, 3, 4, 8])
        v = rnd.choice([2, 3]) if kind == "interleaved" else 1
        m = p * rnd.randint(1, 5)
        work = [rnd.uniform(0.5, 2.0) for _ in range(p)]
        stages, keys = _pipeline(kind, p, m, v, work, rnd.uniform(0.0, 0.3))
        got = solve(stages, keys)
        assert got is not None
        for g, (ends, bubble, comm) in zip(got, _walk(stages), strict=True):
            np.testing.assert_allclose(g.ends, ends, rtol=1e-12)
            assert g.bubble == pytest.approx(bubble, rel=1e-9, abs=1e-9)
            assert g.comm == pytest.approx(comm, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("kind", "v"), [("1f1b", 1), ("interleaved", 2), ("interleaved", 4)])
def test_uniform_stages_reach_the_analytical_bubble(kind: str, v: int) -> None:
    """Equal stages, free sends: each stage idles (p-1)/(v·m+p-1) of the step, the bubble of
    Narayanan et al. (SC21) for 1F1B and the interleaved schedule."""
    p, m = 8, 32
    work = 1.0 / v  # a chunk holds 1/v of the stage's layers
    stages, keys = _pipeline(kind, p, m, v, [work] * p, 0.0)
    got = solve(stages, keys)
    assert got is not None
    step = max(float(g.ends[-1]) for g in got)
    busy = 2 * m * v * work
    assert (step - busy) / step == pytest.approx(bubble_fraction(kind, p, m, v), rel=1e-9)
    for g in got:
        assert g.comm == 0.0
        # each stage's wait inside its own passes, plus its idle tail, is the bubble
        assert g.bubble + (step - float(g.ends[-1])) == pytest.approx(step - busy, rel=1e-9)


def test_a_deadlock_or_a_missing_input_is_refused() -> None:
    """Two stages that each wait first for the other's output never settle; an input nobody
    sends never arrives."""
    a = StagePasses(np.ones(1), np.array([1]), np.array([0]), np.zeros(1), (1,))
    b = StagePasses(np.ones(1), np.array([0]), np.array([1]), np.zeros(1), (0,))
    assert solve([a, b], 2) is None
    lone = StagePasses(np.ones(1), np.array([1]), np.array([-1]), np.zeros(1), (0,))
    assert solve([lone], 2) is None
    # a pass that takes no time proves no progress: a cycle of them would settle at once
    empty = StagePasses(np.zeros(1), np.array([-1]), np.array([-1]), np.zeros(1), (0,))
    assert solve([empty], 1) is None
