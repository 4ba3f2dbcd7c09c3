"""torchtitan's op-level selective recomputation (every second matmul, the elementwise ops and
the TP collectives whose outputs it does not keep run again): what it runs again, its FLOPs,
its collectives under TP with and without sequence parallelism, and where it sits between no
recomputation and full recomputation. (Split from test_stack_rules.py, which keeps the
scenario helper.)"""

from __future__ import annotations

import pytest
from conftest import inline_scenario
from test_stack_rules import _titan

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate
from simulator.workload.memory import memory_report


def test_torchtitan_selective_recomputes_every_second_matmul_and_the_elementwise_ops() -> None:
    from simulator.workload.model import (
        alternate_recomputed,
        layer_matmul_params,
        recompute_flops_per_token,
    )
    from simulator.workload.ops import layer_ops
    from simulator.workload.recompute import recomputed_ops

    data = inline_scenario("llama3-8b")
    data["parallelism"] = {"recompute": "selective"}
    data["software"] = "torchtitan"
    rs = resolve_dict(data)
    m = rs.model
    assert rs.selective_policy == "alternate_matmuls"
    # wq wk wv wo w1 w3 w2: wk, wo and w3 run again.
    assert alternate_recomputed(m) == {"wk", "wo", "w3"}
    again = 2.0 * (m.hidden * m.kv_dim + m.hidden**2 + m.hidden * m.ffn)
    assert recompute_flops_per_token(m, 8192, "selective", "alternate_matmuls") == pytest.approx(
        m.layers * again
    )
    assert again / (2.0 * layer_matmul_params(m)) == pytest.approx(0.3654, abs=1e-3)
    fwd = layer_ops(rs)
    redo = recomputed_ops(rs, fwd)
    assert {o.name for o in redo if o.kind == "memory"} == {
        o.name for o in fwd if o.kind == "memory"
    }
    assert not [o for o in redo if o.kind == "attention"]
    assert sum(o.flops for o in redo if o.kind == "gemm") == pytest.approx(
        again * rs.training.micro_batch * rs.training.seq_len / rs.tp, rel=1e-3
    )


def test_torchtitan_selective_sits_between_none_and_full_in_time_and_memory() -> None:
    def run(rc: str) -> tuple[float, float]:
        data = inline_scenario("llama3-8b", seq_len=4096, micro_batch=2, global_batch=16)
        data["parallelism"] = {"recompute": rc}
        data["software"] = "torchtitan"
        rs = resolve_dict(data)
        return simulate(rs, scaling=False).metrics.step_time_s, memory_report(rs).peak.total_gb

    (t0, m0), (t1, m1), (t2, m2) = run("none"), run("selective"), run("full")
    assert t0 < t1 < t2
    assert m0 > m1 > m2


def test_torchtitan_selective_reruns_sp_gathers_and_keeps_the_reduce_scatters() -> None:
    from simulator.workload.comm import step_comm
    from simulator.workload.ops import layer_ops
    from simulator.workload.recompute import recomputed_ops

    rs = resolve_dict(_titan(tp=4, sequence_parallel=True))
    redo = [o for o in recomputed_ops(rs, layer_ops(rs)) if o.kind == "collective"]
    assert redo and {o.collective for o in redo} == {"all_gather"}
    again = [i for i in step_comm(rs, 0) if i.phase == "recompute"]
    assert {i.op for i in again} == {"all_gather"}
    # Without SP the closing all-reduces are not kept either.
    no_sp = resolve_dict(_titan(tp=4))
    assert {
        o.collective for o in recomputed_ops(no_sp, layer_ops(no_sp)) if o.kind == "collective"
    } == {"all_reduce"}
    # SP's reduce-scatter outputs stay in memory: two a*h/t per token per layer.
    from simulator.workload.activations import _alternate_saved_per_layer

    plain = resolve_dict(_titan(tp=4, sequence_parallel=True))
    tokens = plain.training.micro_batch * plain.training.seq_len
    with_rs = _alternate_saved_per_layer(plain)
    assert with_rs > 2 * 2 * plain.model.hidden / 4 * tokens


def test_torchtitan_selective_with_biases_or_without_flash_reruns_more() -> None:
    from simulator.workload.model import alternate_recomputed
    from simulator.workload.ops import layer_ops
    from simulator.workload.recompute import recomputed_ops

    biased = {"preset": "llama3-8b", "linear_bias": True}
    rs = resolve_dict(_titan(biased))
    assert alternate_recomputed(rs.model) == {"wq", "wk", "wv", "wo", "w1", "w3", "w2"}
    gemms = [o for o in recomputed_ops(rs, layer_ops(rs)) if o.kind == "gemm"]
    # every matmul but the last, which torchtitan's early-stopping checkpoint does not reach
    # (tests/test_recompute_alternate_stop.py)
    assert sum(o.flops for o in gemms) == pytest.approx(
        sum(
            o.flops
            for o in layer_ops(rs)
            if o.kind == "gemm" and o.name not in ("attn_scores", "mlp_down")
        )
    )
    eager = _titan()
    eager["training"]["flash_attention"] = False
    rs = resolve_dict(eager)
    names = {o.name for o in recomputed_ops(rs, layer_ops(rs))}
    assert {"attn_scores", "attn_values"} <= names


def test_torchtitan_selective_reruns_one_whole_kv_head_where_tp_exceeds_them() -> None:
    from simulator.workload.ops import kv_per_rank, layer_ops
    from simulator.workload.recompute import recomputed_ops

    rs = resolve_dict(_titan({"preset": "llama3-8b", "kv_heads": 2}, tp=4))
    (qkv,) = [o for o in recomputed_ops(rs, layer_ops(rs)) if o.name == "qkv_proj"]
    assert qkv.dims is not None and qkv.dims[2] == kv_per_rank(rs) == rs.model.head_dim
