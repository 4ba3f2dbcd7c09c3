"""Spans that run back to back on the compute stream while the rank's DP stream is idle are one
timeout (``Program.span_runs``): nothing can slow them (the DP collectives they would overlap)
or start under them (a collective hidden behind the span before it), so the step and every
category equal the item-by-item run to rounding, with fewer events."""

from __future__ import annotations

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


def test_merged_spans_equal_the_item_by_item_run(monkeypatch: pytest.MonkeyPatch) -> None:
    merged = compared = 0
    for rs in _layouts():
        if compared == 40:
            break
        fast = run_engine(rs)
        with monkeypatch.context() as m:
            m.setattr(Program, "span_runs", property(lambda self: [None] * len(self.items)))
            slow = run_engine(rs)
        compared += 1
        merged += fast.events < slow.events
        assert fast.step_time == pytest.approx(slow.step_time, rel=1e-9), rs.layout()
        for stage, rr in slow.classes.items():
            for cat, v in rr.acc.items():
                got = fast.classes[stage].acc[cat]
                assert got == pytest.approx(v, rel=1e-9, abs=1e-12 * slow.step_time), cat
    assert merged >= 4, merged
