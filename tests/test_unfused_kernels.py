"""The elementwise kernels a stack runs when it does not fuse them: the softmax chain's fp32
passes (``fusion.softmax_upcast``) and the bias adds left to their own kernels
(``fusion.skip_bias_add``), against the gain Narayanan et al. (SC21, Sec. 5.8) measured from
Megatron's fused operators."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import REPO, fig, inline_scenario

from simulator.config.loading import load_scenario, resolve_dict
from simulator.simulate import simulate
from simulator.workload.elementwise import softmax_ops
from simulator.workload.ops import backward_op, backward_ops, layer_ops

SC21_T2 = REPO / "scenarios" / "validation" / "sc21-table2"
UNFUSED = (
    "software={profile: megatron-lm-2021, fusion: {bias_gelu: {value: false, source: what-if}, "
    "bias_dropout_add: {value: false, source: what-if}, scale_mask_softmax: {value: false, "
    "source: what-if}}}"
)


def _fusion(stack: str, **flags: Any) -> dict[str, Any]:
    fusion = {k: {"value": v, "source": "a test"} for k, v in flags.items()}
    return {"profile": stack, "fusion": fusion}


def _chain_bytes(rs: Any, scores: float) -> tuple[float, float]:
    ops = [o for o in softmax_ops(rs, scores) if o.name != "attn_dropout"]
    return sum(o.bytes for o in ops), sum(backward_op(o).bytes for o in ops)


def test_megatrons_unfused_softmax_runs_in_fp32_between_two_casts() -> None:
    """forward_torch_softmax: .float() (2 read, 4 written per element), scale (4+4), the
    in-place mask (4+1+4), softmax (4+4), .half() (4+2): 37 bytes an element; the backward's
    kernels 41 (softmax's reads its output and the gradient)."""
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    off = {"scale_mask_softmax": False, "bias_gelu": True, "bias_dropout_add": True}
    rs = resolve_dict({**data, "software": _fusion("megatron-lm-2021", **off)})
    n = 1e6
    fwd, bwd = _chain_bytes(rs, 2 * n)
    assert fwd == pytest.approx(37 * n)
    assert bwd == pytest.approx(41 * n)
    # fused: one kernel reads and writes the 16-bit scores
    fused = resolve_dict({**data, "software": "megatron-lm-2021"})
    assert _chain_bytes(fused, 2 * n)[0] == pytest.approx(4 * n)


@pytest.mark.parametrize(("precision", "fwd", "bwd"), [("bf16", 30, 28), ("fp16", 22, 20)])
def test_hugging_face_eager_softmax_writes_fp32_and_casts_back(
    precision: str, fwd: float, bwd: float
) -> None:
    """Scale (2+2) and an additive mask (2+2+2, no backward kernel), then softmax(dtype=
    float32) and .to(16 bits) (4+2). ATen runs an fp16 input's softmax to fp32 in one kernel
    (2+4; backward 4+4+2) but casts bf16 to fp32 first (2+4), then softmax (4+4; backward
    4+4+4)."""
    data = inline_scenario("megatron-1.7b", flash_attention=False, precision=precision)
    rs = resolve_dict({**data, "software": "deepspeed"})
    n = 1e6
    got_fwd, got_bwd = _chain_bytes(rs, 2 * n)
    assert got_fwd == pytest.approx(fwd * n)
    assert got_bwd == pytest.approx(bwd * n)
    # the add's backward runs no kernel: the backward pass has no op for it
    assert "mask_bwd" not in {o.name for o in backward_ops(layer_ops(rs))}


def test_megatron_core_folds_the_scale_into_the_score_gemm() -> None:
    """Megatron-Core (no query-key layer scaling by default) has no scale kernel: 6+9+8+6."""
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    rs = resolve_dict({**data, "software": _fusion("megatron-core", scale_mask_softmax=False)})
    fwd, bwd = _chain_bytes(rs, 2e6)
    assert fwd == pytest.approx(29e6)
    assert bwd == pytest.approx(33e6)


def test_fp32_scores_need_no_casts() -> None:
    data = inline_scenario("megatron-1.7b", flash_attention=False, precision="fp32")
    data["cluster"]["gpu"]["peak_tflops"]["fp32"] = fig(66.9)
    rs = resolve_dict({**data, "software": _fusion("megatron-lm-2021", scale_mask_softmax=False)})
    names = [o.name for o in softmax_ops(rs, 4e6)]
    assert names[:3] == ["scale", "mask", "softmax"]
    assert not any("cast" in n for n in names)


def test_a_stack_without_upcast_keeps_the_16_bit_chain() -> None:
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    rs = resolve_dict({**data, "software": "pytorch-fsdp"})
    assert _chain_bytes(rs, 2e6)[0] == pytest.approx(12e6)


def test_megatrons_unfused_bias_runs_as_a_kernel_of_its_own() -> None:
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    flags = {"scale_mask_softmax": True}
    fused = resolve_dict(
        {**data, "software": _fusion("megatron-lm-2021", bias_gelu=True, bias_dropout_add=True)}
    )
    unfused = resolve_dict(
        {
            **data,
            "software": _fusion(
                "megatron-lm-2021", bias_gelu=False, bias_dropout_add=False, **flags
            ),
        }
    )
    names = [o.name for o in layer_ops(unfused)]
    assert names.count("bias_add") == 2 and names.count("mlp_bias_add") == 1
    assert not {"bias_add", "mlp_bias_add"} & {o.name for o in layer_ops(fused)}
    # Hugging Face's nn.Linear adds its bias inside the GEMM: no bias kernel unfused
    hf = resolve_dict({**data, "software": "deepspeed"})
    assert not {"bias_add", "mlp_bias_add"} & {o.name for o in layer_ops(hf)}
    # a model without biases has none to add
    nobias = inline_scenario("megatron-1.7b", flash_attention=False)
    nobias["model"] = {**_model(nobias), "linear_bias": False}
    rs = resolve_dict(
        {**nobias, "software": _fusion("megatron-lm-2021", bias_gelu=False, bias_dropout_add=False)}
    )
    assert not {"bias_add", "mlp_bias_add"} & {o.name for o in layer_ops(rs)}


def test_an_unfused_swiglu_adds_its_biases_in_a_kernel_of_its_own() -> None:
    data = inline_scenario("megatron-1.7b", flash_attention=False)
    data["model"] = {**_model(data), "mlp": "swiglu", "ffn_hidden": 5504}
    unfused = resolve_dict({**data, "software": _fusion("megatron-lm-2022", swiglu=False)})
    fused = resolve_dict({**data, "software": "megatron-lm-2022"})
    assert "mlp_bias_add" in [o.name for o in layer_ops(unfused)]
    assert "mlp_bias_add" not in [o.name for o in layer_ops(fused)]


def _model(data: dict[str, Any]) -> dict[str, Any]:
    from simulator.config.loading import resolve_model

    return resolve_model(data["model"], None).model_dump(exclude_none=True)


@pytest.mark.parametrize(
    ("row", "gain"),
    [
        ("sc21-t2-ptd-174.6b-384gpu", 0.19),  # 113 -> 135 TFLOP/s per GPU
        ("sc21-t2-ptd-529.6b-560gpu", 0.11),  # 133 -> 148
    ],
)
def test_fused_operators_gain_what_sc21_measured(row: str, gain: float) -> None:
    """SC21 Sec. 5.8: fusion raised GPT-3 175B from 113 to 135 TFLOP/s per GPU (+19%) and the
    530B model from 133 to 148 (+11%); the paper does not give the layout, so the Table 2 rows
    of the same models stand in (the gain depends little on it)."""
    path = SC21_T2 / f"{row}.yaml"
    fused = simulate(load_scenario(path), scaling=False).metrics.hardware_tflops_per_gpu
    plain = simulate(load_scenario(path, [UNFUSED]), scaling=False).metrics
    assert fused / plain.hardware_tflops_per_gpu - 1 == pytest.approx(gain, abs=0.03)


def test_an_fp32_softmax_keeps_its_fp32_output_for_backward() -> None:
    """Unfused and upcast, the softmax's fp32 output is saved beside the 16-bit probabilities
    (4 more bytes per score element per layer); fused, only the 16-bit ones."""
    from simulator.workload.activations import activation_bytes_per_layer

    data = inline_scenario("megatron-1.7b", flash_attention=False)
    fused = resolve_dict({**data, "software": "megatron-lm-2021"})
    off = _fusion("megatron-lm-2021", scale_mask_softmax=False)
    unfused = resolve_dict({**data, "software": off})
    m = fused.model
    scores = fused.training.micro_batch * m.heads * fused.training.seq_len**2
    extra = activation_bytes_per_layer(unfused) - activation_bytes_per_layer(fused)
    assert extra == pytest.approx(4 * scores / fused.tp)
