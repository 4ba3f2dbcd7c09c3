"""Compute beside a busy DP stream runs as one timeout per stretch (engine.stretch), the time
each span loses to the DP collectives beside it folded in; where the stream goes idle inside
a stretch the rest is recomputed. The step and every category must equal the span-by-span run
(``PassRunner.stretches`` off: each slowdown a timeout of its own) to rounding, with fewer
events; a stretch the stream leaves early must be exercised, not only assumed."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import REPO
from test_invariants_random import _draw
from test_span_runs import _same

from simulator.config.loading import load_scenario, resolve_dict
from simulator.engine import stretch
from simulator.engine.passes import PassRunner
from simulator.engine.sim import run_engine
from simulator.errors import UserError

BASE = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


def _both(rs: Any, monkeypatch: pytest.MonkeyPatch, full: bool = False) -> tuple[Any, Any]:
    fast = run_engine(rs, full=full)
    with monkeypatch.context() as m:
        m.setattr(PassRunner, "stretches", False)
        slow = run_engine(rs, full=full)
    return fast, slow


def _moves(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the stretches whose stream went idle inside them (and so were re-timed)."""
    moved = [0]
    idle = stretch.Stretch.idle

    def counted(self: stretch.Stretch) -> None:
        before = self.timeout
        idle(self)
        moved[0] += self.timeout is not before

    monkeypatch.setattr(stretch.Stretch, "idle", counted)
    return moved


@pytest.mark.parametrize(
    "sets",
    [
        # per-layer FSDP gathers: the stream goes idle inside stretches thousands of times
        ["cluster.nodes=4", "parallelism.tp=2", "parallelism.pp=4",
         "parallelism.sharding={kind: fsdp}",
         "parallelism.pp_schedule={kind: interleaved, virtual_stages: 2}",
         "training.global_batch=16", "model.layers=16"],
        # ZeRO-2 reduce-scatters per micro-batch beside CP rings crossing the network
        ["cluster.nodes=16", "parallelism.tp=8", "parallelism.pp=4", "parallelism.cp=4",
         "parallelism.sharding={kind: zero, stage: 2}", "parallelism.pp_schedule={kind: 1f1b}",
         "training.global_batch=8", "model.layers=16"],
        # ZeRO-3 on one node
        ["cluster.nodes=1", "parallelism.tp=2", "parallelism.pp=2",
         "parallelism.sharding={kind: zero, stage: 3}", "parallelism.pp_schedule={kind: 1f1b}",
         "training.global_batch=8"],
    ],
)  # fmt: skip
def test_stretches_equal_the_span_by_span_run(
    sets: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rs = load_scenario(BASE, sets)
    moved = _moves(monkeypatch)
    fast, slow = _both(rs, monkeypatch)
    _same(fast, slow, rs.layout())
    assert fast.events < slow.events
    if "parallelism.sharding={kind: fsdp}" in sets:
        assert moved[0] > 0  # the re-timing path ran


def test_stretches_hold_in_full_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    rs = load_scenario(
        BASE,
        ["cluster.nodes=2", "parallelism.tp=4", "parallelism.pp=2",
         "parallelism.sharding={kind: fsdp}", "parallelism.pp_schedule={kind: 1f1b}",
         "training.global_batch=8", "model.layers=8"],
    )  # fmt: skip
    fast, slow = _both(rs, monkeypatch, full=True)
    _same(fast, slow, rs.layout())
    assert fast.events < slow.events


def test_stretches_on_random_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random layouts (stacks, overlaps, stragglers, uneven pipelines) until 30 are compared."""
    rnd = random.Random(11)
    compared = tries = 0
    while compared < 30:
        tries += 1
        assert tries < 600
        try:
            rs = resolve_dict(_draw(rnd))
        except UserError:
            continue
        fast, slow = _both(rs, monkeypatch)
        _same(fast, slow, rs.layout())
        compared += 1


def test_a_stream_that_goes_idle_mid_span_shortens_the_slowdown() -> None:
    """The re-timing itself: two segments of 1 s and 2 s at contention 0.5, the stream idle
    0.5 s into the second: the first pays 0.5 s, the second 0.25 s (its busy half second)."""
    import simpy

    from simulator.engine.comm import Job, Stream

    env = simpy.Environment()
    st = Stream(env, 0, "dp", None)
    job = Job(lambda j: None)
    st.submit(job)
    ends: list[float] = []
    pays: list[float] = []

    def proc() -> Any:
        s = stretch.Stretch(env, st, [(1.0, 1.0), (2.0, 1.0)], 0.5)
        yield s.timeout
        ends.append(env.now)
        pays.append(s.done())

    def finish() -> Any:
        yield env.timeout(2.0)  # 1 s + 0.5 s slowdown, then 0.5 s into the second segment
        job.complete()

    env.process(proc())
    env.process(finish())
    env.run()
    assert pays == [pytest.approx(0.75)]
    assert ends == [pytest.approx(1.0 + 0.5 + 2.0 + 0.25)]
    assert st.on_idle is None
