"""Compute slowed by overlapping data-parallel collectives (engine.passes, ``comm_sms``).

While a rank's DP stream holds a collective, its NCCL kernels hold ``comm_sms`` of the GPU's SMs,
so compute beside it runs at 1 - s of its speed, s = comm_sms / sm_count: each second of overlap
costs s / (1 - s) more. Communication that compute waits for is exposed, not overlapped, and
costs nothing extra.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.engine.sim import Simulation

BASE: dict[str, Any] = {
    "name": "contention",
    "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 8, "fabric": "nvlink4-nvswitch"},
    "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000},
    "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 1},
    "parallelism": {"sharding": {"kind": "fsdp", "strategy": "full_shard"}},
    "software": "pytorch-fsdp",
}


def _run(
    comm_sms: float | None = None, ddp: bool = False, **overlap: bool
) -> tuple[Simulation, float]:
    sc = copy.deepcopy(BASE)
    if ddp:
        sc["parallelism"] = {"sharding": {"kind": "zero", "stage": 0}}
    stack: dict[str, Any] = {"profile": "pytorch-fsdp"}
    if comm_sms is not None:
        stack["comm_sms"] = {"value": comm_sms, "source": "test: what-if value"}
    if overlap:
        stack["overlap"] = {
            k: {"value": v, "source": "test: what-if switch"} for k, v in overlap.items()
        }
    sc["software"] = stack
    sim = Simulation(resolve_dict(sc))
    res = sim.run()
    return sim, res.step_time


def _dp_busy(sim: Simulation, rank: int) -> float:
    st = sim.dp_streams.get(rank)
    return st.busy_time() if st is not None else 0.0


def test_overlap_costs_the_sm_share_of_the_overlapped_time() -> None:
    sim, step = _run()
    rank = sim.ranks[0]
    acc = sim.results[rank].acc
    s = sim.rs.software.comm_sms.value / sim.rs.gpu.sm_count.value  # type: ignore[union-attr]
    assert sim.contention == pytest.approx(s / (1 - s))
    assert acc["overlap"] > 0
    # The overlapped part of the DP stream's time is at most all of it, less what compute
    # waited for (exposed DP time).
    hidden = _dp_busy(sim, rank) - acc["comm_dp"]
    assert acc["overlap"] <= sim.contention * _dp_busy(sim, rank) + 1e-12
    assert acc["overlap"] == pytest.approx(sim.contention * hidden, rel=0.02)


def test_no_sms_held_means_no_slowdown_and_a_faster_step() -> None:
    sim0, step0 = _run(comm_sms=0)
    assert sim0.contention == 0
    assert all(r.acc["overlap"] == 0 for r in sim0.results.values())
    sim, step = _run()
    assert step > step0
    # The extra time is the category the breakdown shows (the schedule around it is the same:
    # nothing waits on the slowed compute but the compute stream itself).
    assert step - step0 == pytest.approx(sim.results[sim.ranks[0]].acc["overlap"], rel=0.02)


def test_more_sms_held_is_slower() -> None:
    steps = [_run(comm_sms=n)[1] for n in (0, 8, 24, 48)]
    assert steps == sorted(steps)
    assert steps[0] < steps[-1]


def test_communication_that_overlaps_nothing_costs_nothing_extra() -> None:
    # DDP whose gradient all-reduce starts after the backward: compute waits for all of it, so
    # all of it is exposed and none of it slows compute. Overlapped, it costs its share.
    sim, _ = _run(ddp=True, dp_grad=False)
    acc = sim.results[sim.ranks[0]].acc
    assert acc["comm_dp"] > 0
    assert acc["overlap"] == pytest.approx(0.0, abs=1e-9)
    sim, _ = _run(ddp=True, dp_grad=True)
    assert sim.results[sim.ranks[0]].acc["overlap"] > 0


def test_busy_plus_idle_is_still_the_step() -> None:
    sim, step = _run()
    for r in sim.results.values():
        assert sum(r.acc.values()) == pytest.approx(step, rel=1e-9)
