"""Communication bytes per step: TP collectives with and without sequence parallelism,
recomputation's repeats, the DP gradient reduction (in the stack's dtype), ZeRO-3 gathers and
pipeline sends."""

from __future__ import annotations

import pytest
from conftest import REPO, resolve_inline

from simulator.config.loading import resolve_dict
from simulator.config.sourced import Flag
from simulator.workload.buckets import end_params, layer_tensors
from simulator.workload.comm import dp_bucket_bytes, gather_buckets, step_comm
from simulator.workload.memory import stage_params
from simulator.workload.model import param_breakdown


def _comm(rs, stage: int = 0, group: str | None = None, phase: str | None = None):
    return [
        it
        for it in step_comm(rs, stage)
        if (group is None or it.group == group) and (phase is None or it.phase == phase)
    ]


def test_tp_all_reduces_per_layer_without_sp() -> None:
    """Megatron TP: two all-reduces per layer forward and two backward, each of the full
    micro-batch activation (b·s·h 16-bit values)."""
    rs = resolve_inline("llama3-8b", tp=8, pp=1, global_batch=16, seq_len=4096)
    m = rs.micro_batches
    act = 4096 * rs.model.hidden * 2
    fwd = _comm(rs, group="tp", phase="forward")
    layer_fwd = [it for it in fwd if it.calls == rs.model.layers * m]
    assert len(layer_fwd) == 2
    assert all(it.op == "all_reduce" and it.bytes == act for it in layer_fwd)
    bwd = _comm(rs, group="tp", phase="backward")
    assert sum(it.calls for it in bwd if it.bytes == act) == sum(
        it.calls for it in fwd if it.bytes == act
    )


def test_without_sp_the_embedding_reduces_forward_and_the_output_layer_backward() -> None:
    """The vocabulary-parallel embedding sums its shards' lookups in the forward pass (its
    backward sends nothing); the output layer's input gradient is summed over the vocabulary
    shards in the backward pass (its forward sends nothing): Megatron's reduce_from_ and
    copy_to_tensor_model_parallel_region. Under PP the first stage has the one, the last the
    other; each step moves the same bytes either way."""
    rs = resolve_inline("llama3-8b", tp=4, pp=2, global_batch=16, seq_len=4096)
    m, act = rs.micro_batches, 4096 * rs.model.hidden * 2

    def big(stage: int, phase: str) -> float:
        items = _comm(rs, stage, group="tp", phase=phase)
        return sum(it.calls for it in items if it.bytes == act)

    per_stage = 2 * rs.stage_layers()[0] * m
    assert big(0, "forward") == per_stage + m and big(0, "backward") == per_stage
    assert big(1, "forward") == per_stage and big(1, "backward") == per_stage + m
    from simulator.engine.sim import Simulation

    sim = Simulation(rs)
    emb_b = [i for i in sim.p_emb_b.items if i.cat == "comm_tp" or i.kind == "coll"]
    head_b = [i for i in sim.p_head_b.items if i.cat == "comm_tp" or i.kind == "coll"]
    assert not emb_b and [i.name for i in head_b] == ["tp_head_in_bwd"]


def test_sp_replaces_all_reduce_by_reduce_scatter_and_all_gather() -> None:
    kw = dict(tp=8, pp=1, global_batch=16, seq_len=4096)
    no_sp = resolve_inline("llama3-8b", **kw)
    # a stack that keeps the gathered input, so without the backward's re-gathers
    # (tests/test_sp_regather.py)
    sp = resolve_inline("llama3-8b", sequence_parallel=True, overlap={"tp_backward": False}, **kw)
    keeps = Flag(value=True, source="test")
    sp = sp.model_copy(
        update={"software": sp.software.model_copy(update={"sp_keeps_gathered_input": keeps})}
    )
    ops = {it.op for it in _comm(sp, group="tp") if it.bytes > 1e6}
    assert ops == {"all_gather", "reduce_scatter"}

    def layer_bytes(rs):
        return sum(it.total_bytes for it in _comm(rs, group="tp") if it.bytes > 1e6)

    # Same buffer sizes; an all-reduce is a reduce-scatter plus an all-gather.
    assert layer_bytes(sp) == pytest.approx(2 * layer_bytes(no_sp), rel=0.01)


def test_full_recompute_repeats_only_the_layer_collectives() -> None:
    kw = dict(tp=8, pp=1, global_batch=16, seq_len=4096)
    rs = resolve_inline("llama3-8b", recompute="full", **kw)
    rec = _comm(rs, group="tp", phase="recompute")
    m = rs.micro_batches
    # The two closing all-reduces of every layer, once more per micro-batch; not the
    # embedding's reduction nor the loss statistics (neither is recomputed).
    assert sum(it.calls for it in rec) == 2 * rs.model.layers * m
    assert all(it.bytes == 4096 * rs.model.hidden * 2 for it in rec)
    none = resolve_inline("llama3-8b", recompute="none", **kw)
    assert not _comm(none, phase="recompute")


def test_dp_gradient_bytes() -> None:
    rs = resolve_inline("llama3-8b", tp=2, pp=1, global_batch=64, grad_reduce_dtype="bf16")
    dp = _comm(rs, group="dp")
    assert {it.op for it in dp} == {"all_reduce"}
    assert sum(it.total_bytes for it in dp) == pytest.approx(stage_params(rs, 0) * 2)
    # a bucket holds whole tensors: at most the bucket size, or one tensor larger than it
    pb = param_breakdown(rs.model)
    biggest = 2.0 * max(max(layer_tensors(rs)), pb.embedding / rs.tp, pb.lm_head / rs.tp)
    assert all(it.bytes <= max(dp_bucket_bytes(rs, 2.0), biggest) + 1 for it in dp)
    fp32 = resolve_dict(rs.raw, ["training.grad_reduce_dtype=fp32"])
    assert sum(it.total_bytes for it in _comm(fp32, group="dp")) == pytest.approx(
        stage_params(rs, 0) * 4
    )
    # Unset, the default stack's choice: Megatron reduces bf16 training's gradients in fp32.
    raw = dict(rs.raw)
    raw["training"] = {k: v for k, v in raw["training"].items() if k != "grad_reduce_dtype"}
    stack = resolve_dict(raw)
    assert sum(it.total_bytes for it in _comm(stack, group="dp")) == pytest.approx(
        stage_params(rs, 0) * 4
    )


def test_zero3_gathers_weights_every_microbatch() -> None:
    rs = resolve_inline("llama3-8b", global_batch=32, sharding={"kind": "zero", "stage": 3})
    gathers = [it for it in _comm(rs, group="dp") if it.op == "all_gather"]
    # the layers before each forward and each backward; the root unit (embedding and output
    # layer), kept through the backward, once a micro-batch
    layers, root = gathers
    assert layers.calls == 2 * rs.micro_batches and root.calls == rs.micro_batches
    assert layers.bytes + root.bytes == pytest.approx(stage_params(rs, 0) * 2)
    assert root.bytes == pytest.approx(2 * sum(end_params(rs)))
    z1 = resolve_inline("llama3-8b", global_batch=32, sharding={"kind": "zero", "stage": 1})
    g1 = [it for it in _comm(z1, group="dp") if it.op == "all_gather"]
    # ZeRO-1 gathers once a step, in its gradient buckets
    each, n = gather_buckets(z1, stage_params(z1, 0), 0)
    assert g1[0].calls == n and g1[0].bytes == pytest.approx(each)
    assert g1[0].bytes * g1[0].calls == pytest.approx(stage_params(z1, 0) * 2)
    rs_ops = {it.op for it in _comm(z1, group="dp")}
    assert rs_ops == {"reduce_scatter", "all_gather"}


def test_pipeline_p2p_bytes() -> None:
    rs = resolve_inline("llama3-8b", tp=2, pp=4, global_batch=8, micro_batch=1, seq_len=4096)
    m = rs.micro_batches
    expected = 4096 * rs.model.hidden * 2 / 2  # one micro-batch's activation, per TP rank
    for stage, sends in [(0, m), (1, 2 * m), (2, 2 * m), (3, m)]:
        (p2p,) = _comm(rs, stage, group="pp")
        assert p2p.bytes == expected
        assert p2p.calls == sends


def test_gradient_buckets_are_counted_not_listed() -> None:
    """A bucket size of a kilobyte: buckets hold whole tensors, so one per tensor (four a
    layer, and the embedding or output layer), counted as one item; the bytes on the wire do
    not depend on the bucket size."""
    from simulator.config.loading import load_scenario
    from simulator.workload.comm import comm_summary, dp_buckets

    path = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    coarse = load_scenario(path)
    fine = load_scenario(path, ["parallelism.dp_bucket_mb=0.001"])
    size, count = dp_buckets(fine, 0)
    assert count == fine.stage_layers()[0] * 4 + 1
    assert len(step_comm(fine, 0)) == len(step_comm(coarse, 0))  # listed: millions of items
    assert comm_summary(coarse)["dp"] == pytest.approx(comm_summary(fine)["dp"], rel=1e-9)
