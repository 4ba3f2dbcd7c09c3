"""Memory per GPU against the ZeRO paper (Rajbhandari et al. 2020) and the activation formulas of
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models")."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import resolve_inline

from simulator.workload.activations import activation_bytes_per_layer
from simulator.workload.memory import (
    layer_params_per_rank,
    memory_report,
    stage_params,
    zero_model_state_bytes,
)
from simulator.workload.model import param_breakdown, param_count
from simulator.workload.presets import PRESETS

GB = 1e9

# --------------------------------------------------------------------------------------------
# Model state: ZeRO
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "published_gb"),
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_paper_figure1(stage: int, published_gb: float) -> None:
    """ZeRO Fig. 1: Ψ = 7.5B, Nd = 64, K = 12 (mixed-precision Adam)."""
    got = zero_model_state_bytes(7.5e9, 64, stage, k=12) / GB
    assert round(got, 1) == published_gb


def test_zero_formulas() -> None:
    psi, nd = 1e9, 16
    assert zero_model_state_bytes(psi, nd, 0) == 16 * psi
    assert zero_model_state_bytes(psi, nd, 1) == 4 * psi + 12 * psi / nd
    assert zero_model_state_bytes(psi, nd, 2) == 2 * psi + 14 * psi / nd
    assert zero_model_state_bytes(psi, nd, 3) == 16 * psi / nd
    # With one DP rank there is nothing to shard.
    for stage in range(4):
        assert zero_model_state_bytes(psi, 1, stage) == 16 * psi


def _state_gb(stage_mem: Any) -> float:
    return stage_mem.weights_gb + stage_mem.gradients_gb + stage_mem.optimizer_gb


def _dp64(model: str = "megatron-7.5b", grads: str | None = "bf16", **par: Any) -> Any:
    """64-way DP with 16-bit gradients, as ZeRO's 16 bytes per parameter count them."""
    return resolve_inline(
        model,
        nodes=8,
        gpus_per_node=8,
        global_batch=512,
        tp=1,
        pp=1,
        grad_reduce_dtype=grads,
        **par,
    )


@pytest.mark.parametrize("model", ["megatron-7.5b", "llama3-8b"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_through_a_full_scenario(model: str, stage: int) -> None:
    """TP = PP = 1, DP = 64, AdamW, bf16: weights + grads + optimizer = ZeRO's formula."""
    rs = _dp64(model, sharding={"kind": "zero", "stage": stage})
    assert (rs.dp, rs.tp, rs.pp) == (64, 1, 1)
    assert rs.training.optimizer.kind == "adamw" and rs.training.precision == "bf16"
    psi = param_count(rs.model, rs.training.seq_len)
    assert stage_params(rs, 0) == psi
    rep = memory_report(rs)
    assert len(rep.stages) == 1
    expected = zero_model_state_bytes(psi, 64, stage) / GB
    assert _state_gb(rep.stages[0]) == pytest.approx(expected, rel=1e-9)
    # 16 bytes per parameter split 2 (weights) / 2 (grads) / 12 (fp32 master + Adam moments).
    st = rep.stages[0]
    assert st.weights_gb == pytest.approx(2 * psi / GB / (64 if stage >= 3 else 1))
    assert st.gradients_gb == pytest.approx(2 * psi / GB / (64 if stage >= 2 else 1))
    assert st.optimizer_gb == pytest.approx(12 * psi / GB / (64 if stage >= 1 else 1))


@pytest.mark.parametrize(("strategy", "stage"), [("full_shard", 3), ("shard_grad_op", 2)])
def test_fsdp_strategies_match_zero_stages(strategy: str, stage: int) -> None:
    fsdp = _dp64(sharding={"kind": "fsdp", "strategy": strategy})
    zero = _dp64(sharding={"kind": "zero", "stage": stage})
    assert fsdp.parallelism.zero_stage == stage
    assert _state_gb(memory_report(fsdp).peak) == pytest.approx(_state_gb(memory_report(zero).peak))


def test_fsdp_hybrid_shard_shards_within_a_node() -> None:
    rs = _dp64(sharding={"kind": "fsdp", "strategy": "hybrid_shard"})
    psi = param_count(rs.model, rs.training.seq_len)
    # Default shard group: the 8 GPUs of one node.
    assert _state_gb(memory_report(rs).peak) == pytest.approx(
        zero_model_state_bytes(psi, 8, 3) / GB
    )
    rs16 = _dp64(sharding={"kind": "fsdp", "strategy": "hybrid_shard", "shard_group": 16})
    assert _state_gb(memory_report(rs16).peak) == pytest.approx(
        zero_model_state_bytes(psi, 16, 3) / GB
    )


def test_optimizer_and_gradient_dtype_options() -> None:
    base = _dp64()
    psi = param_count(base.model, base.training.seq_len)
    st = memory_report(base).peak
    assert st.optimizer_gb == pytest.approx(12 * psi / GB)
    data: dict[str, Any] = {"training.grad_reduce_dtype": "fp32"}
    from simulator.config.loading import resolve_dict

    raw = dict(base.raw)
    fp32 = resolve_dict(raw, [f"{k}={v}" for k, v in data.items()])
    assert memory_report(fp32).peak.gradients_gb == pytest.approx(4 * psi / GB)
    no_master = resolve_dict(raw, ["training.optimizer={kind: adamw, master_weights_fp32: false}"])
    assert memory_report(no_master).peak.optimizer_gb == pytest.approx(8 * psi / GB)
    sgd = resolve_dict(raw, ["training.optimizer.kind=sgd"])
    assert memory_report(sgd).peak.optimizer_gb == pytest.approx(8 * psi / GB)


@pytest.mark.parametrize(("precision", "master"), [("bf16", 2), ("fp8", 2), ("fp16", 4)])
def test_master_weight_remainders_keep_half_the_fp32_copy(precision: str, master: int) -> None:
    """Apex's distributed Adam (store_param_remainders) keeps the low 16 bits of each fp32
    master weight, whose high half is the bf16 working weight: 2 bytes instead of 4. An fp16
    weight is not the high half of its fp32 value, so fp16 keeps the whole copy."""
    from simulator.config.loading import resolve_dict
    from simulator.workload.memory import bytes_per_param

    raw = dict(_dp64().raw)
    sets = [f"training.precision={precision}"]
    plain = resolve_dict(raw, sets)
    halves = resolve_dict(
        raw, [*sets, 'software={"profile": "megatron-core", "master_weight_remainders": true}']
    )
    assert bytes_per_param(plain)[2] == 12
    assert bytes_per_param(halves)[2] == 8 + master
    psi = param_count(plain.model, plain.training.seq_len)
    saved = memory_report(plain).peak.optimizer_gb - memory_report(halves).peak.optimizer_gb
    assert saved == pytest.approx((12 - 8 - master) * psi / GB)


def test_bf16_optimizer_states_take_half() -> None:
    """An optimizer run in bf16 (Apex distributed Adam with dtype bf16) keeps Adam's two
    moments in 2 bytes each, and, its dtype being the model's, no master copy: 4 bytes."""
    from simulator.config.loading import resolve_dict
    from simulator.workload.memory import bytes_per_param

    raw = dict(_dp64().raw)
    bf16 = resolve_dict(
        raw, ['training.optimizer={"master_weights_fp32": false, "state_dtype": "bf16"}']
    )
    assert bytes_per_param(bf16)[2] == 4
    psi = param_count(bf16.model, bf16.training.seq_len)
    assert memory_report(bf16).peak.optimizer_gb == pytest.approx(4 * psi / GB)


@pytest.mark.parametrize(
    ("software", "precision", "grad_bytes"),
    [
        ("megatron-core", "bf16", 4),  # Megatron forces fp32 accumulation and reduction for bf16
        ("megatron-core", "fp8", 4),  # fp8 runs under --bf16
        ("megatron-core", "fp16", 2),  # fp16 keeps fp16 gradients
        ("torchtitan", "bf16", 4),  # FSDP2 reduce_dtype float32
        ("deepspeed", "bf16", 2),
        ("pytorch-fsdp", "bf16", 2),
    ],
)
def test_gradient_dtype_follows_the_software_stack(
    software: str, precision: str, grad_bytes: int
) -> None:
    from simulator.config.loading import resolve_dict
    from simulator.workload.comm import grad_bytes_per_param

    raw = dict(_dp64(grads=None).raw)
    rs = resolve_dict(raw, [f"software={software}", f"training.precision={precision}"])
    psi = param_count(rs.model, rs.training.seq_len)
    assert rs.grad_reduce_fp32 is (grad_bytes == 4)
    assert grad_bytes_per_param(rs) == grad_bytes
    assert memory_report(rs).peak.gradients_gb == pytest.approx(grad_bytes * psi / GB)
    # The scenario's own choice wins over the stack's.
    bf16 = resolve_dict(raw, [f"software={software}", "training.grad_reduce_dtype=bf16"])
    assert grad_bytes_per_param(bf16) == 2


def test_zero3_holds_gathered_layers() -> None:
    rs = _dp64(sharding={"kind": "zero", "stage": 3})
    pb = param_breakdown(rs.model, rs.training.seq_len)
    st = memory_report(rs).peak
    # two layers, and the root unit (embedding, output layer, final norm: one stage holds all)
    root = pb.embedding + pb.positions + pb.lm_head + pb.final_norm
    assert st.gathered_params_gb == pytest.approx((2 * pb.per_layer + root) * 2 / GB)
    assert memory_report(_dp64(sharding={"kind": "zero", "stage": 2})).peak.gathered_params_gb == 0


# --------------------------------------------------------------------------------------------
# Activations: Korthikanti et al. 2022, Table 2
# --------------------------------------------------------------------------------------------

# GPT-style: GELU 4h MLP, LayerNorm, dropout, no fused attention, kv = h.
GPT_MODELS = ["megatron-1.7b", "megatron-18.4b", "gpt3-175b"]


def _gpt(model: str, *, tp: int = 1, sp: bool = False, b: int = 1, s: int = 2048, **kw: Any):
    par: dict[str, Any] = {"tp": tp, "sequence_parallel": sp}
    par.update(kw)
    return resolve_inline(
        model, seq_len=s, micro_batch=b, flash_attention=False, global_batch=8 * b, **par
    )


@pytest.mark.parametrize("model", GPT_MODELS)
@pytest.mark.parametrize(("b", "s"), [(1, 2048), (2, 1024), (4, 512)])
def test_activations_no_parallelism(model: str, b: int, s: int) -> None:
    rs = _gpt(model, b=b, s=s)
    m = rs.model
    sbh = s * b * m.hidden
    expected = sbh * (34 + 5 * m.heads * s / m.hidden)
    assert activation_bytes_per_layer(rs) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("model", GPT_MODELS)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_activations_tensor_parallel(model: str, t: int) -> None:
    s, b = 2048, 1
    m = PRESETS[model]
    sbh = s * b * m.hidden
    a_term = 5 * m.heads * s / (m.hidden * t)
    # TP without SP: sbh(10 + 24/t + 5as/(ht)).
    no_sp = _gpt(model, tp=t, sp=False)
    assert activation_bytes_per_layer(no_sp) == pytest.approx(
        sbh * (10 + 24 / t + a_term), rel=1e-12
    )
    # TP with SP: sbh(34/t + 5as/(ht)).
    sp = _gpt(model, tp=t, sp=True)
    assert activation_bytes_per_layer(sp) == pytest.approx(sbh * (34 / t + a_term), rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_selective_recompute_drops_the_attention_core(t: int) -> None:
    """Table 2: selective recomputation leaves sbh·34/t (SP) or sbh(10 + 24/t) (no SP)."""
    s, b = 2048, 1
    par = {"tp": t, "sequence_parallel": t > 1}
    rs_none = _gpt("megatron-18.4b", **par)
    rs_sel = _gpt("megatron-18.4b", recompute="selective", **par)
    m = rs_none.model
    sbh = s * b * m.hidden
    layers = m.layers
    a_none = memory_report(rs_none).peak.activations_gb
    a_sel = memory_report(rs_sel).peak.activations_gb
    scores = 5 * m.heads * s * s * b / t
    # every layer's scores are dropped, and one layer's come back while its backward runs
    assert (a_none - a_sel) * GB == pytest.approx((layers - 1) * scores, rel=1e-9)
    kept = activation_bytes_per_layer(rs_none) - scores
    assert kept == pytest.approx(sbh * 34 / t, rel=1e-12)


def _act_gb(model: dict[str, Any] | str, **kw: Any) -> float:
    return memory_report(resolve_inline(model, **kw)).stages[0].activations_gb


@pytest.mark.parametrize(("t", "sp"), [(1, False), (4, False), (4, True)])
def test_full_recompute_keeps_2sbh_per_layer(t: int, sp: bool) -> None:
    """Full recomputation keeps only each layer's input: 2sbh bytes (2sbh/t with SP)."""
    s, b = 2048, 2
    kw = dict(
        seq_len=s,
        micro_batch=b,
        global_batch=8 * b,
        flash_attention=False,
        tp=t,
        sequence_parallel=sp,
        recompute="full",
    )
    h = PRESETS["megatron-1.7b"].hidden
    a24 = _act_gb({"preset": "megatron-1.7b", "layers": 24}, **kw)
    a48 = _act_gb({"preset": "megatron-1.7b", "layers": 48}, **kw)
    per_layer = 2 * s * b * h / (t if sp else 1)
    assert (a48 - a24) * GB == pytest.approx(24 * per_layer, rel=1e-9)
    # Without recomputation each extra layer costs its full activations.
    kw["recompute"] = "none"
    n24 = _act_gb({"preset": "megatron-1.7b", "layers": 24}, **kw)
    n48 = _act_gb({"preset": "megatron-1.7b", "layers": 48}, **kw)
    rs = resolve_inline("megatron-1.7b", **kw)
    assert (n48 - n24) * GB == pytest.approx(24 * activation_bytes_per_layer(rs), rel=1e-9)


def test_fused_attention_removes_the_quadratic_term() -> None:
    def per_layer(s: int, flash: bool) -> float:
        return activation_bytes_per_layer(
            resolve_inline("llama3-8b", seq_len=s, flash_attention=flash, global_batch=8)
        )

    # Linear in s with fused attention, super-linear without.
    assert per_layer(8192, True) == pytest.approx(2 * per_layer(4096, True), rel=1e-12)
    assert per_layer(8192, False) > 2.5 * per_layer(4096, False)
    assert per_layer(4096, True) < per_layer(4096, False)


def test_gqa_shrinks_activations() -> None:
    gqa = resolve_inline("llama3-70b", tp=8)
    mha = resolve_inline({"preset": "llama3-70b", "kv_heads": None}, tp=8)
    assert activation_bytes_per_layer(gqa) < activation_bytes_per_layer(mha)


def test_context_parallel_splits_the_sequence() -> None:
    one = resolve_inline("llama3-8b", seq_len=8192, global_batch=4, cp=1, tp=2)
    two = resolve_inline("llama3-8b", seq_len=8192, global_batch=2, cp=2, tp=2)
    assert activation_bytes_per_layer(two) == pytest.approx(
        activation_bytes_per_layer(one) / 2, rel=1e-12
    )


def test_full_recompute_of_a_single_layer_holds_no_more_than_none() -> None:
    """One layer and one micro-batch in flight: full recomputation keeps the layer's input and,
    while its backward runs, the rest of its activations, which is what no recomputation
    keeps; the input is not counted twice."""
    kw: dict[str, Any] = dict(seq_len=2048, micro_batch=2, global_batch=16)
    model = {"preset": "megatron-1.7b", "layers": 1}
    full = _act_gb(model, recompute="full", **kw)
    none = _act_gb(model, recompute="none", **kw)
    assert full == pytest.approx(none, rel=1e-9)


def test_without_dropout_attention_keeps_only_the_softmax_output() -> None:
    """Unfused attention keeps the softmax output (2·a·s²·b at 16 bits); the dropout output
    and its 1-byte mask only where the model has dropout (Korthikanti's 5as/h term)."""
    kw: dict[str, Any] = dict(
        seq_len=2048, micro_batch=1, global_batch=8, flash_attention=False, recompute="none"
    )
    model = {"preset": "megatron-1.7b", "layers": 1}
    rs = resolve_inline(model, **kw)
    a, s, b = rs.model.heads, 2048, 1
    with_dropout = _act_gb({**model, "dropout": True}, **kw)
    without = _act_gb({**model, "dropout": False}, **kw)
    # dropout adds its output (2 bytes), its mask (1 byte) over the scores, and 2sbh of masks
    h = rs.model.hidden
    extra = 3 * a * s * s * b + 2 * s * b * h
    assert (with_dropout - without) * GB == pytest.approx(extra, rel=1e-6)


def test_fsdp_keeps_its_root_unit_gathered() -> None:
    """FULL_SHARD gathers the root unit (embedding, output layer, final norm) once a
    micro-batch and keeps it through the backward: it is counted beside the two layers."""
    from simulator.workload.memory import end_params, gather_bytes_per_param

    rs = resolve_inline("llama3-8b", sharding={"kind": "fsdp", "strategy": "full_shard"})
    st = memory_report(rs).stages[0]
    emb, head = end_params(rs)
    per_layer = layer_params_per_rank(rs)
    want = (2 * per_layer + emb + head) * gather_bytes_per_param(rs) / GB
    assert st.gathered_params_gb == pytest.approx(want, rel=1e-9)
