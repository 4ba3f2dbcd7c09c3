"""A pipeline whose state repeats only every few rounds (engine.steady's records of every
round from PP to 2·PP find the period) is extrapolated exactly, not left to the samples or to
the whole event simulation."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.engine.periodic import run_periodic
from simulator.engine.sim import run_engine


@pytest.mark.parametrize(
    ("stages", "count"),
    [("[0,10,10,10,10,10,10,10,10,0]", 1021), ("[8,16,16,16,16,8]", 333)],
)
def test_an_uneven_pipeline_repeats_every_few_rounds_and_is_extrapolated_exactly(
    stages: str, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a lighter first stage the step's increment beats with a pipeline send's time
    every PP - 2 micro-batches: no two consecutive rounds show one state, and such a layout
    went to the samples, or (a 130-stage pipeline, 3,072 micro-batches: 18 s) to the whole
    event simulation. The records of every round from PP to 2·PP find the period; a count not
    whole periods past the run's takes one run up to a period longer. Step and categories
    equal the event simulation to rounding."""
    from conftest import REPO

    from simulator.config.loading import load_scenario
    from simulator.engine import steady

    pp = stages.count(",") + 1
    rs = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        [f"cluster.nodes={pp}", "parallelism.tp=8", f"parallelism.pp={pp}",
         "parallelism.pp_schedule={kind: 1f1b}", f"parallelism.stage_layers={stages}",
         f"training.global_batch={count}"],
    )  # fmt: skip
    spans: list[int] = []
    first = steady._first_repeat

    def seen(recs: Any, tol: float) -> Any:
        got = first(recs, tol)
        if got is not None:
            spans.append(got[1] - got[0])
        return got

    monkeypatch.setattr(steady, "_first_repeat", seen)
    fast, exact = run_periodic(rs), run_engine(rs)
    assert spans and spans[-1] == pp - 2
    assert fast.events < exact.events / 10
    assert fast.step_time == pytest.approx(exact.step_time, rel=1e-9)
    for stage, rr in exact.classes.items():
        for cat, v in rr.acc.items():
            assert fast.classes[stage].acc[cat] == pytest.approx(v, abs=1e-9 * exact.step_time)
