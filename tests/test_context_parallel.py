"""Context parallelism: the CP ranks of a replica hold the same parameters, so gradients are
reduced, and ZeRO/FSDP state sharded, over DP×CP (Megatron-Core's data-parallel group "with
context parallel"); trading DP for CP on the same GPUs keeps the state shards the same size."""

from __future__ import annotations

import pytest
from conftest import REPO

from simulator.config.loading import load_scenario
from simulator.simulate import simulate
from simulator.workload.comm import step_comm
from simulator.workload.memory import memory_report, shard_group

SCENARIO = REPO / "scenarios" / "llama3-8b-8xh100.yaml"  # 8 GPUs, FSDP full shard


def _rs(cp: int):  # type: ignore[no-untyped-def]
    return load_scenario(SCENARIO, sets=[f"parallelism.cp={cp}"])


@pytest.mark.parametrize("cp", [1, 2, 8])
def test_state_is_sharded_over_dp_times_cp(cp: int) -> None:
    rs = _rs(cp)
    assert rs.dp * rs.cp == 8 and rs.dp_cp == 8
    assert shard_group(rs) == 8
    base = memory_report(_rs(1)).stages[0]
    st = memory_report(rs).stages[0]
    # Weights, gradients and optimizer state: the same shard whatever the DP/CP split.
    for field in ("weights_gb", "gradients_gb", "optimizer_gb"):
        assert getattr(st, field) == pytest.approx(getattr(base, field), rel=1e-12), field


def test_cp_only_layout_still_reduces_gradients() -> None:
    rs = _rs(8)  # DP 1: every GPU is a CP rank of one replica
    assert rs.dp == 1
    dp_items = [it for it in step_comm(rs) if it.group == "dp"]
    assert dp_items and all(it.group_size == 8 for it in dp_items)
    # FSDP full shard: every micro-batch's gradient is reduce-scattered over the 8 ranks.
    assert {it.op for it in dp_items} >= {"reduce_scatter", "all_gather"}
    res = simulate(rs, scaling=False)
    b = res.metrics.breakdown_s
    assert b.get("comm_dp", 0.0) + b.get("overlap", 0.0) > 0.0
    assert res.metrics.fits
