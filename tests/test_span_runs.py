"""Spans that run back to back on the compute stream while the rank's DP stream is idle are one
timeout (``Program.span_runs``): nothing can slow them (the DP collectives they would overlap)
or start under them (a collective hidden behind the span before it), so the step and every
category equal the item-by-item run to rounding, with fewer events."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO
from test_invariants_random import _draw

from simulator.config.loading import load_scenario, resolve_dict
from simulator.engine.program import Item, Program
from simulator.engine.sim import run_engine
from simulator.errors import UserError


def test_runs_stop_before_a_span_a_collective_hides_under() -> None:
    prog = Program(
        [
            Item("span", "a", 1.0),
            Item("span", "b", 2.0, "comm_tp"),
            Item("span", "c", 3.0),
            Item("coll", "ring", hide=0.5, group="cp", coll="all_gather", size=1.0),
            Item("span", "d", 4.0, wait=1.0),
            Item("span", "e", 5.0),
        ]
    )
    runs = prog.span_runs
    assert runs[0] == (2, 3.0, (("compute", 1.0), ("comm_tp", 2.0)))
    assert runs[1] is None and runs[2] is None and runs[3] is None  # "c" stays alone
    assert runs[4] == (6, 9.0, (("compute", 3.0), ("straggler", 1.0), ("compute", 5.0)))
    assert runs[5] is None


def _layouts() -> Iterator[Any]:
    """Layouts whose passes run collectives through the flow network (CP rings that leave the
    node, TP over PCIe), with and without overlapped DP traffic, then random ones."""
    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    for tp, pp, cp, nodes, shard, sched in [
        (8, 4, 4, 16, "{kind: zero, stage: 0}", "{kind: interleaved, virtual_stages: 2}"),
        (8, 2, 4, 8, "{kind: zero, stage: 2}", "{kind: 1f1b}"),
        (4, 2, 4, 4, "{kind: fsdp}", "{kind: 1f1b}"),
        (8, 4, 2, 8, "{kind: zero, stage: 1}", "{kind: 1f1b}"),
    ]:
        yield load_scenario(
            base,
            [
                f"cluster.nodes={nodes}", f"parallelism.tp={tp}", f"parallelism.pp={pp}",
                f"parallelism.cp={cp}", f"parallelism.sharding={shard}",
                f"parallelism.pp_schedule={sched}", "training.global_batch=16",
                "model.layers=16",
            ],
        )  # fmt: skip
    rnd = random.Random(3)
    while True:
        try:
            yield resolve_dict(_draw(rnd))
        except UserError:
            continue


def _same(fast: Any, slow: Any, what: str) -> None:
    """Step and every category of every simulated rank (each class's, and in full mode every
    rank's) equal to rounding."""
    assert fast.step_time == pytest.approx(slow.step_time, rel=1e-9), what
    for rank, rr in slow.ranks.items():
        for cat, v in rr.acc.items():
            got = fast.ranks[rank].acc[cat]
            assert got == pytest.approx(v, rel=1e-9, abs=1e-12 * slow.step_time), (cat, what)


def _unmerged(m: pytest.MonkeyPatch) -> None:
    m.setattr(Program, "span_runs", property(lambda self: [None] * len(self.items)))


def test_merged_spans_equal_the_item_by_item_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random layouts until ten have merged runs (most random layouts time every collective in
    closed form, and where the DP stream is busy at a run's start the run is not merged: both
    kinds are compared too), at least 40 in all."""
    merged = compared = 0
    for rs in _layouts():
        if compared >= 40 and merged >= 10:
            break
        assert compared < 600, (compared, merged)
        fast = run_engine(rs)
        with monkeypatch.context() as m:
            _unmerged(m)
            slow = run_engine(rs)
        compared += 1
        merged += fast.events < slow.events
        _same(fast, slow, rs.layout())


def test_merging_holds_in_full_mode_and_in_the_steady_state_extrapolation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Full mode (every rank simulated) and the one-run steady path run the same passes."""
    from simulator.engine.periodic import run_periodic

    layouts = list(itertools.islice(_layouts(), 4))
    for rs in (layouts[0], layouts[3]):
        fast = run_engine(rs, full=True)
        with monkeypatch.context() as m:
            _unmerged(m)
            slow = run_engine(rs, full=True)
        assert fast.events < slow.events
        _same(fast, slow, f"full {rs.layout()}")
    rs = layouts[0].model_copy(
        update={"training": layouts[0].training.model_copy(update={"global_batch": 64})}
    )
    fast = run_periodic(rs)
    with monkeypatch.context() as m:
        _unmerged(m)
        slow = run_periodic(rs)
    assert fast.events < slow.events
    _same(fast, slow, f"periodic {rs.layout()}")
