"""Gradient groups. The CP ranks of a replica hold the same parameters, so gradients are
reduced, and ZeRO/FSDP state sharded, over DP×CP (Megatron-Core's data-parallel group "with
context parallel"); trading DP for CP on the same GPUs keeps the state shards the same size.
ZeRO-2 reduces every micro-batch's gradients, ZeRO-1 once a step."""

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


def test_zero2_reduces_every_micro_batch_zero1_once() -> None:
    """ZeRO-2 keeps only its shard of the gradients, so each micro-batch's are reduce-scattered
    (DeepSpeed stage 2 reduces at every micro-step); ZeRO-1 accumulates whole gradients and
    reduces once a step. Their DP traffic differs by the micro-batch count."""
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    sets = ["training.global_batch=64", "training.micro_batch=1"]

    def dp_bytes(stage: int) -> tuple[float, int]:
        rs = load_scenario(base, [*sets, f"parallelism.sharding={{kind: zero, stage: {stage}}}"])
        rs_items = [it for it in step_comm(rs) if it.group == "dp" and it.op == "reduce_scatter"]
        return sum(it.total_bytes for it in rs_items), rs.micro_batches

    one, m = dp_bytes(1)
    two, _ = dp_bytes(2)
    assert m == 8 and two == pytest.approx(m * one)
    s1 = simulate(load_scenario(base, [*sets, "parallelism.sharding={kind: zero, stage: 1}"]))
    s2 = simulate(load_scenario(base, [*sets, "parallelism.sharding={kind: zero, stage: 2}"]))
    assert s2.metrics.step_time_s > s1.metrics.step_time_s


def test_hybrid_shard_default_group_is_a_nodes_worth_of_dp_times_cp() -> None:
    """Hybrid sharding shards within a node: with TP2 and CP2 on 8-GPU nodes, a node holds 4
    ranks of the DP×CP group (TP is laid out fastest), so state is sharded 4 ways."""
    from conftest import inline_scenario

    from simulator.config.loading import resolve_dict

    data = inline_scenario(
        "llama3-8b",
        nodes=2,
        seq_len=4096,
        tp=2,
        cp=2,
        sequence_parallel=True,
        sharding={"kind": "fsdp", "strategy": "hybrid_shard"},
    )
    rs = resolve_dict(data)
    assert rs.dp_cp == 8 and shard_group(rs) == 4


def test_overlapped_zero2_reduces_embedding_and_head_every_micro_batch_too() -> None:
    """With the reduction overlapped with backward, ZeRO-2 reduce-scatters every micro-batch's
    gradients, the embedding's and output layer's included: the engine's reduce-scatters add
    up to the bytes step_comm counts."""
    import re

    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    sets = [
        "training.global_batch=64",
        "parallelism.sharding={kind: zero, stage: 2}",
        "software=deepspeed",
        "parallelism.overlap.dp_grad=true",
    ]
    rs = load_scenario(base, sets)
    res = simulate(rs, scaling=False, trace=True)
    assert res.engine.trace is not None
    launched = sum(
        float(mb.group(1)) * 1e6
        for e in res.engine.trace
        if e.get("pid") == 1 and (mb := re.fullmatch(r"reduce_scatter (\d+) MB", e.get("name", "")))
    )
    counted = sum(it.total_bytes for it in step_comm(rs) if it.op == "reduce_scatter")
    assert launched == pytest.approx(counted, rel=0.01)  # labels are rounded to the MB


def test_engine_and_memory_agree_on_a_layers_parameters_with_replicated_kv() -> None:
    from conftest import inline_scenario

    from simulator.config.loading import resolve_dict
    from simulator.engine.sim import Simulation
    from simulator.workload.memory import layer_params_per_rank, stage_params

    rs = resolve_dict(inline_scenario("llama3-70b", nodes=2, tp=16, pp=1))
    sim = Simulation(rs)
    assert sim.layer_params == pytest.approx(layer_params_per_rank(rs))
    layers = rs.stage_layers()[0]
    assert stage_params(rs, 0) == pytest.approx(
        layers * sim.layer_params + sim.extra_params[0], rel=1e-12
    )
