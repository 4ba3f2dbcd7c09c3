"""Memory traffic an eager PyTorch stack adds around the GEMMs: the fp32 residual stream under
autocast over fp32 weights, the packing of Q, K and V around a variable-length flash
attention call (llm-foundry's flash_attn_fn), and RMSNorm and SwiGLU run as separate eager
kernels (Hugging Face's LlamaRMSNorm and LlamaMLP)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loading import resolve_dict
from simulator.workload.ops import backward_ops, layer_ops, residual_bytes, tokens_per_rank

BASE: dict[str, Any] = {
    "name": "eager",
    "cluster": {
        "gpu": "h100-sxm-80gb",
        "gpus_per_node": 8,
        "nodes": 1,
        "fabric": "nvlink4-nvswitch",
    },
    "model": {
        "layers": 4,
        "hidden": 2048,
        "heads": 16,
        "vocab": 32000,
        "dropout": False,
        "norm": "layernorm",  # MPT's, as llm-foundry runs it: one native kernel in eager too
    },
    "training": {"seq_len": 2048, "global_batch": 8, "micro_batch": 1, "precision": "bf16"},
    "parallelism": {"sharding": {"kind": "fsdp"}},
    "software": "pytorch-fsdp",
    "run": {"stragglers": "off"},  # op times at the profile's speed
}


def _rs(software: Any = "pytorch-fsdp", **training: Any) -> Any:
    data = {**BASE, "software": software, "training": {**BASE["training"], **training}}
    return resolve_dict(data)


def _op(ops: list[Any], name: str) -> Any:
    (op,) = [o for o in ops if o.name == name]
    return op


def test_autocast_over_fp32_weights_keeps_an_fp32_residual_stream() -> None:
    pure = _rs(param_gather_dtype="bf16")
    amp = _rs(param_gather_dtype="fp32")
    assert residual_bytes(pure) == 2 and residual_bytes(amp) == 4
    n = tokens_per_rank(amp) * amp.model.hidden
    for rs, r in ((pure, 2), (amp, 4)):
        ops = layer_ops(rs)
        # a norm reads the stream and writes 16 bits; an add reads both, writes the stream
        assert _op(ops, "attn_norm").bytes == n * (r + 2)
        adds = [o for o in ops if o.name == "residual_add"]
        assert len(adds) == 2 and all(o.bytes == n * (2 * r + 2) for o in adds)
    extra = sum(o.bytes for o in layer_ops(amp)) - sum(o.bytes for o in layer_ops(pure))
    casts = _op(layer_ops(amp), "autocast_weight_cast").bytes
    assert extra == pytest.approx(casts + n * (2 * 2 + 2 * 4))  # two norms, two adds


def test_variable_length_attention_packs_and_unpacks_each_way() -> None:
    rs = _rs()
    x = tokens_per_rank(rs) * rs.model.hidden * 2  # bytes of Q, K, V or the output (MHA)
    fwd = _op(layer_ops(rs), "attention_repack")
    assert fwd.bytes == 9 * x  # gather Q, K, V (2 each); zeros + copy of the output (3)
    bwd = _op(backward_ops(layer_ops(rs)), "attention_repack_bwd")
    assert bwd.bytes == 11 * x  # zeros + scatter of three gradients (3 each); a gather (2)
    assert not [o for o in layer_ops(_rs("megatron-core")) if o.name == "attention_repack"]
    unfused = _rs(flash_attention=False)
    assert not [o for o in layer_ops(unfused) if o.name == "attention_repack"]


def test_fsdp1_copies_each_layers_gradients_into_the_flat_parameter() -> None:
    """FSDP1's weights are split views of the flat parameter, so every backward cats the
    unit's gradients into one flat tensor (read in the gathered width, written in the
    reduction's) before the reduce-scatter; with the stack's copy turned off, or without
    ZeRO-3/FSDP, there is none."""
    from simulator.engine.sim import Simulation

    off = {"profile": "pytorch-fsdp", "grad_flatten_copy": {"value": False, "source": "test"}}
    for dtype, width in (("fp32", 4), ("bf16", 2)):
        on = Simulation(_rs(param_gather_dtype=dtype))
        base = Simulation(_rs(off, param_gather_dtype=dtype))
        # read in the working weights' width, write in the reduction's (bf16 here)
        expect = on.timer.memory_time((width + 2) * on.layer_params)
        assert on.p_bwd.duration - base.p_bwd.duration == pytest.approx(expect, rel=1e-9)
        assert on.p_fwd.duration == base.p_fwd.duration
    zero1 = {**BASE, "parallelism": {"sharding": {"kind": "zero", "stage": 1}}}
    a = Simulation(resolve_dict(zero1))
    b = Simulation(resolve_dict({**zero1, "software": off}))
    assert a.p_bwd.duration == b.p_bwd.duration


def test_fsdp2_copies_gathered_parameters_out_and_gradients_in() -> None:
    """FSDP2 (torchtitan, eager PyTorch): each all-gather's output is copied into the
    per-parameter tensors on the compute stream, in the forward and again for the backward's
    re-gather, and each backward's gradients are copied into the reduce-scatter input."""
    from simulator.engine.sim import Simulation

    both_off = {
        "profile": "torchtitan",
        "gather_copy_out": {"value": False, "source": "test"},
        "grad_flatten_copy": {"value": False, "source": "test"},
    }
    on = Simulation(_rs("torchtitan"))
    off = Simulation(_rs(both_off))
    copy = on.timer.memory_time(2 * 2 * on.layer_params)  # bf16 gathers: read and write
    # bf16 gradients read, written into the fp32 reduce-scatter input (reduce_dtype float32)
    flat = on.timer.memory_time((2 + 4) * on.layer_params)
    assert on.p_fwd.duration - off.p_fwd.duration == pytest.approx(copy, rel=1e-9)
    assert on.p_bwd.duration - off.p_bwd.duration == pytest.approx(copy + flat, rel=1e-9)
    # one rank: nothing is gathered or reduce-scattered, so nothing is copied
    alone = {**BASE, "cluster": {**BASE["cluster"], "gpus_per_node": 1}, "software": "torchtitan"}
    alone["training"] = {**BASE["training"], "global_batch": 1}
    one = Simulation(resolve_dict(alone))
    none = Simulation(resolve_dict({**alone, "software": both_off}))
    assert one.p_fwd.duration == none.p_fwd.duration
    assert one.p_bwd.duration == none.p_bwd.duration


def _llama(software: str, **training: Any) -> Any:
    model = {**BASE["model"], "norm": "rmsnorm", "mlp": "swiglu"}
    data = {**BASE, "model": model, "software": software}
    data["training"] = {**BASE["training"], "param_gather_dtype": "bf16", **training}
    return resolve_dict(data)


def test_eager_rmsnorm_and_swiglu_make_a_pass_per_operation() -> None:
    fused, eager = _llama("torchtitan"), _llama("deepspeed")
    assert fused.software.fusion.rms_norm.value and not eager.software.fusion.rms_norm.value
    T, h, f = tokens_per_rank(eager), eager.model.hidden, eager.model.ffn
    n = T * h
    # Fused: read the bf16 stream, write the bf16 output.
    assert _op(layer_ops(fused), "attn_norm").bytes == n * 4
    ops = {o.name: o.bytes for o in layer_ops(eager) if o.name.startswith("attn_norm")}
    # LlamaRMSNorm: upcast (2 + 4), square (4 + 4), mean (4), eps + rsqrt per row, the scaled
    # product (4 + 4), downcast (4 + 2), weight (2 + 2): 36 bytes an element against 4.
    assert ops == {
        "attn_norm_upcast": n * 6,
        "attn_norm_square": n * 8,
        "attn_norm_mean": n * 4,
        "attn_norm_rsqrt": T * 16,
        "attn_norm_scale": n * 8,
        "attn_norm_downcast": n * 6,
        "attn_norm_weight": n * 4,
    }
    # SwiGLU: one kernel reads gate and up and writes the product (3 passes over T x f);
    # eager: SiLU reads and writes the gate (2), the multiply reads two and writes one (3).
    assert _op(layer_ops(fused), "activation").bytes == 3 * T * f * 2
    assert _op(layer_ops(eager), "activation_silu").bytes == 2 * T * f * 2
    assert _op(layer_ops(eager), "activation_mul").bytes == 3 * T * f * 2


def test_unfused_kernels_only_cost_time_and_leave_layernorm_models_alone() -> None:
    from simulator.simulate import simulate

    eager = _llama("deepspeed")
    fusion = eager.software.fusion.model_copy(update={"rms_norm": None, "swiglu": None})
    fused = eager.model_copy(
        update={"software": eager.software.model_copy(update={"fusion": fusion})}
    )
    t_eager = simulate(eager, scaling=False).metrics
    t_fused = simulate(fused, scaling=False).metrics
    assert t_eager.step_time_s > t_fused.step_time_s
    assert t_eager.model_tflops_per_gpu < t_fused.model_tflops_per_gpu  # same FLOPs, slower
    # pytorch-eager fuses RMSNorm (aten::_fused_rms_norm) but not SwiGLU.
    names = {o.name for o in layer_ops(_llama("pytorch-eager"))}
    assert "attn_norm" in names and {"activation_silu", "activation_mul"} <= names
    # A GELU/LayerNorm model takes the one-kernel forms under every stack.
    for software in ("deepspeed", "pytorch-fsdp", "pytorch-eager", "torchtitan"):
        data = {**BASE, "software": software, "model": {**BASE["model"], "mlp": "gelu"}}
        names = {o.name for o in layer_ops(resolve_dict(data))}
        assert {"attn_norm", "mlp_norm", "activation"} <= names
        assert not any(n.startswith(("attn_norm_", "activation_")) for n in names)
