"""An owned cluster's energy counts compute stretched by overlapping DP collectives at the power
of computing: the step's accounting books that stretch apart (``overlap``, with the idle
categories), but the SMs are busy then, so only idle and exposed-communication time draw the
idle fraction (a review finding: FSDP's 8.7% of overlap was billed at idle power)."""

from __future__ import annotations

import pytest

from simulator.config.loading import resolve_dict
from simulator.cost import compute_cost
from simulator.simulate import simulate


def test_overlapped_compute_draws_computing_power() -> None:
    rs = resolve_dict(
        {
            "name": "owned-fsdp",
            "cluster": {
                "gpu": "h100-sxm-80gb",
                "gpus_per_node": 8,
                "nodes": 4,
                "fabric": "nvlink4-nvswitch",
                "network": {"profile": "ib-ndr-400", "nics_per_node": 8},
                "storage": "local-nvme",
                "pricing": {"profile": "own-dgx-h100"},
            },
            "model": "llama3-8b",
            "training": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1},
            "parallelism": {"sharding": {"kind": "fsdp", "strategy": "full_shard"}},
            "software": "pytorch-fsdp",
        }
    )
    res = simulate(rs, scaling=False)
    met = res.metrics
    overlap = met.idle_s.get("overlap", 0.0)
    assert overlap > 0.01 * met.step_time_s  # the case that matters
    drawing = (met.busy_s + overlap) / met.step_time_s
    assert met.drawing_fraction == pytest.approx(drawing)
    assert res.cost is not None
    idle = met.idle_fraction
    as_busy = compute_cost(rs, met.step_time_s, idle, drawing)
    as_idle = compute_cost(rs, met.step_time_s, idle)  # 1 - idle: overlap at idle power
    assert as_busy is not None and as_idle is not None
    assert res.cost.breakdown["energy"] == pytest.approx(as_busy.breakdown["energy"])
    assert as_busy.breakdown["energy"] > as_idle.breakdown["energy"]
