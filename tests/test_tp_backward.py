"""Megatron's asynchronous TP backward (workload.tp_backward): each column-parallel layer's
input-gradient reduction runs beside its weight-gradient GEMM, and under sequence parallelism
its input's re-gather beside the input-gradient GEMM; only what a collective takes beyond the
GEMM it overlaps stays exposed."""

from __future__ import annotations

import pytest
from conftest import resolve_inline

from simulator.config.sourced import Flag
from simulator.engine.compute import OpTimer
from simulator.engine.program import build_program
from simulator.simulate import simulate
from simulator.workload.comm import step_comm
from simulator.workload.ops import Op, backward_ops, layer_ops
from simulator.workload.tp_backward import async_tp_backward


def _rs(sp: bool, on: bool = True, **kw):
    return resolve_inline(
        "llama3-8b",
        tp=4,
        sequence_parallel=sp,
        overlap={"tp_backward": on},
        global_batch=kw.pop("global_batch", 8),
        **kw,
    )


@pytest.mark.parametrize("sp", [False, True])
def test_the_rewrite_keeps_the_work_and_marks_what_overlaps(sp: bool) -> None:
    rs = _rs(sp)
    bwd = backward_ops(layer_ops(rs))
    out = async_tp_backward(bwd, sp)
    flops = sum(o.flops for o in bwd if o.kind == "gemm")
    assert sum(o.flops for o in out if o.kind == "gemm") == pytest.approx(flops)
    timer = OpTimer(rs.gpu, "bf16")
    for name in ("qkv_proj", "mlp_up"):
        both = next(o for o in bwd if o.name == f"{name}_bwd")
        parts = [o for o in out if o.name in (f"{name}_dgrad", f"{name}_wgrad")]
        assert [o.part for o in parts] == ["dgrad", "wgrad"]
        assert sum(timer.time(o) for o in parts) == pytest.approx(timer.time(both))
    tp_in = [o for o in bwd if o.group == "tp"]
    tp_out = [o for o in out if o.group == "tp"]
    # non-SP: the same two all-reduces, moved; SP: two re-gathers more
    assert len(tp_out) == len(tp_in) + (2 if sp else 0)
    for i, o in enumerate(out):
        if o.overlapped:
            assert out[i - 1].part in ("dgrad", "wgrad")
    # the row-parallel layers' collectives (SP: the gradient's all-gather) stay in line
    assert sum(o.overlapped for o in tp_out) == (4 if sp else 2)


def _program(ops: list[Op], t_ar: float, timer: OpTimer):
    times = {f"tp:{o.collective}:{o.msg_bytes}": t_ar for o in ops if o.group == "tp"}
    return build_program(ops, timer, times)


def test_a_reduction_hides_behind_the_weight_gradient_and_only_its_excess_shows() -> None:
    rs = _rs(sp=False)
    timer = OpTimer(rs.gpu, "bf16")
    out = async_tp_backward(backward_ops(layer_ops(rs)), False)
    wgrads = [timer.time(o) for o in out if o.part == "wgrad"]
    short = _program(out, 0.5 * min(wgrads), timer)
    assert short.categories.get("comm_tp", 0.0) == 0.0
    t = 2.0 * max(wgrads)
    long = _program(out, t, timer)
    assert long.categories["comm_tp"] == pytest.approx(sum(t - w for w in wgrads))
    # in line (the stack without the overlap), every collective is exposed whole
    inline = _program(backward_ops(layer_ops(rs)), t, timer)
    assert inline.categories["comm_tp"] == pytest.approx(2 * t)
    assert long.duration < inline.duration


def test_under_sp_the_regather_hides_behind_the_input_gradient() -> None:
    rs = _rs(sp=True)
    timer = OpTimer(rs.gpu, "bf16")
    out = async_tp_backward(backward_ops(layer_ops(rs)), True)
    t = 3.0 * max(timer.time(o) for o in out if o.part != "both")
    prog = _program(out, t, timer)
    hidden = sum(timer.time(o) for o in out if o.part != "both")
    # two gradient all-gathers in line, four overlapped collectives less their GEMM each
    assert prog.categories["comm_tp"] == pytest.approx(2 * t + 4 * t - hidden)


def gathers_of(rs) -> float:
    return sum(
        it.calls * it.bytes for it in step_comm(rs) if it.group == "tp" and it.op == "all_gather"
    )


def test_the_overlap_never_slows_a_step_and_sp_pays_for_its_regather() -> None:
    off, on = _rs(False, on=False), _rs(False)
    s_off = simulate(off, scaling=False).metrics
    s_on = simulate(on, scaling=False).metrics
    assert s_on.step_time_s < s_off.step_time_s
    # SP re-gathers each column-parallel input in the backward, whether or not the overlap
    # hides it: two more all-gathers per layer and micro-batch than a stack that keeps the
    # gathered input (software.sp_keeps_gathered_input)
    sp_on = _rs(True)
    keeps = sp_on.software.model_copy(
        update={"sp_keeps_gathered_input": Flag(value=True, source="test")}
    )
    sp_off = sp_on.model_copy(update={"software": keeps})
    assert gathers_of(_rs(True, on=False)) == gathers_of(sp_on)

    gathers = gathers_of
    layers, m = sp_on.model.layers, sp_on.micro_batches
    act = sp_on.training.seq_len * sp_on.model.hidden * 2
    # and the output layer's input, once per micro-batch
    assert gathers(sp_on) - gathers(sp_off) == pytest.approx((2 * layers + 1) * m * act)


@pytest.mark.parametrize("sp", [False, True])
def test_the_output_layer_reduces_its_input_gradient_beside_its_weight_gradient(sp: bool) -> None:
    """Megatron's output layer is column-parallel too: its input gradient's all-reduce (SP:
    reduce-scatter, after re-gathering its input) runs beside its own backward GEMMs."""
    from simulator.workload.ops import head_ops

    rs = _rs(sp)
    out = async_tp_backward(backward_ops(head_ops(rs)), sp)
    names = [(o.name, o.overlapped) for o in out if o.group == "tp" or o.part != "both"]
    want = [("logits_dgrad", False)]
    want += [("logits_regather", True)] if sp else []
    want += [("logits_wgrad", False), ("tp_head_in_bwd", True)]
    assert names == want


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_with_tp_communication_overlap_the_switch_never_slows_a_step_without_sp(
    precision: str,
) -> None:
    """TP communication overlap can only start a backward collective once the GEMM producing
    its input has run, so under ``tp_comm`` the collectives already sit where the asynchronous
    backward puts them: without SP (no re-gather) the switch changes nothing. (Placed at their
    forward's mirror they had hidden behind the next layer's GEMM, before their data existed.)"""

    def step(on: bool) -> float:
        rs = resolve_inline(
            "llama3-8b",
            tp=8,
            precision=precision,
            overlap={"tp_comm": True, "tp_backward": on},
            global_batch=8,
        )
        return simulate(rs, scaling=False).metrics.step_time_s

    assert step(True) <= step(False) * (1 + 1e-12)
