"""Parameter and FLOP counts against published figures.

Sources: Meta, "The Llama 3 Herd of Models" (2024) and the released checkpoints; Brown et al.
2020 (GPT-3); Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM" (SC21), Table 1 and its FLOP formula; Korthikanti et al. 2022.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simulator.config.workload import ModelSpec
from simulator.workload.model import (
    attention_core_flops_per_token,
    forward_flops_per_token,
    hardware_flops_per_token,
    layer_matmul_params,
    megatron_sc21_flops,
    model_flops_per_token,
    param_breakdown,
    param_count,
    recompute_flops_per_token,
)
from simulator.workload.presets import PRESETS

VALIDATION = Path("/work/shared/validation/megatron_sc21_table1.csv")


def _table1() -> list[dict[str, float]]:
    with VALIDATION.open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


TABLE1 = _table1()
SEQ = 2048  # SC21 Table 1: every row uses sequence length 2048
VOCAB = 51200  # ... and vocabulary 51,200


def _preset_name(billions: float) -> str:
    return "megatron-1t" if billions >= 1000 else f"megatron-{billions}b"


def _row_id(row: dict[str, float]) -> str:
    return f"{row['params_billion']:g}B"


# --------------------------------------------------------------------------------------------
# Parameter counts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama3-8b", 8.03e9),
        ("llama3-70b", 70.6e9),
        ("llama3-405b", 405.9e9),  # HF checkpoint: 405.85B (paper: "405B")
        ("llama3-405b", 405e9),
        ("gpt3-175b", 175e9),
    ],
)
def test_preset_param_counts_match_published(name: str, published: float) -> None:
    p = param_count(PRESETS[name], SEQ)
    assert p == pytest.approx(published, rel=0.01)


def test_gpt3_exact_count() -> None:
    # 96 layers of 12h² + 13h, 50257·h tied embedding, 2048·h learned positions, final norm:
    # about 174.6B, which the paper rounds to 175B.
    p = param_count(PRESETS["gpt3-175b"], SEQ)
    assert 174.5e9 < p < 174.7e9


def test_presets_record_their_published_size() -> None:
    for name, m in PRESETS.items():
        assert m.published_params is not None, name
        assert param_count(m, SEQ) == pytest.approx(m.published_params, rel=0.03), name


def test_csv_and_presets_agree_on_architecture() -> None:
    assert len(TABLE1) == 10
    for row in TABLE1:
        m = PRESETS[_preset_name(row["params_billion"])]
        assert (m.heads, m.hidden, m.layers) == (
            int(row["attention_heads"]),
            int(row["hidden_size"]),
            int(row["layers"]),
        )
        assert m.vocab == VOCAB


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_megatron_table1_param_counts(row: dict[str, float]) -> None:
    m = PRESETS[_preset_name(row["params_billion"])]
    p = param_count(m, SEQ)
    published = row["params_billion"] * 1e9
    # Table 1 rounds to one decimal (1.652B is published as "1.7"): accept either.
    within_1pct = abs(p / published - 1) <= 0.01
    same_after_rounding = round(p / 1e9, 1) == pytest.approx(row["params_billion"])
    assert within_1pct or same_after_rounding, f"{p / 1e9:.4f}B vs {row['params_billion']}B"


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_sc21_parameter_formula(row: dict[str, float]) -> None:
    """SC21 §5.1: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)).

    The formula counts per layer 12h² + 13h (QKV/out/MLP weights and biases, two LayerNorms)
    plus V·h (tied embedding) and s·h (learned positions). It leaves out the final LayerNorm
    (2h), which the model has and `param_count` includes."""
    m = PRESETS[_preset_name(row["params_billion"])]
    lyr, h, v, s = m.layers, m.hidden, m.vocab, SEQ
    # Integer form of the formula, to compare exactly.
    sc21 = 12 * lyr * h * h + 13 * lyr * h + (v + s) * h
    pb = param_breakdown(m, s)
    assert pb.final_norm == 2 * h
    assert param_count(m, s) - pb.final_norm == sc21
    # ... and the formula as the paper writes it, in floating point.
    as_written = 12 * lyr * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * lyr * h))
    assert param_count(m, s) - pb.final_norm == pytest.approx(as_written, rel=1e-12)


def test_megatron_per_layer_breakdown() -> None:
    m = PRESETS["megatron-1.7b"]
    h = m.hidden
    pb = param_breakdown(m, SEQ)
    assert pb.attention_per_layer == 4 * h * h + 4 * h  # QKV + out weights, their biases
    assert pb.mlp_per_layer == 8 * h * h + 5 * h  # 4h GELU MLP and biases
    assert pb.norms_per_layer == 4 * h  # two LayerNorms, weight + bias
    assert pb.lm_head == 0  # tied
    assert pb.positions == SEQ * h


def test_llama3_8b_breakdown_matches_checkpoint_shapes() -> None:
    m = PRESETS["llama3-8b"]
    pb = param_breakdown(m)
    # Shapes of the released checkpoint: q 4096², k/v 1024×4096, o 4096², gate/up/down
    # 14336×4096, two RMSNorms per layer, untied 128256×4096 embedding and output.
    assert pb.attention_per_layer == 4096 * 4096 * 2 + 2 * 1024 * 4096
    assert pb.mlp_per_layer == 3 * 14336 * 4096
    assert pb.norms_per_layer == 2 * 4096
    assert pb.embedding == pb.lm_head == 128256 * 4096
    assert pb.positions == 0
    assert param_count(m) == 8_030_261_248


def test_learned_positions_depend_on_sequence_only_without_max_positions() -> None:
    base = PRESETS["megatron-1.7b"].model_dump()
    fixed = ModelSpec.model_validate(base)
    assert param_count(fixed, 1024) == param_count(fixed, 4096)  # max_positions = 2048
    free = ModelSpec.model_validate({**base, "max_positions": None})
    h = free.hidden
    assert param_count(free, 4096) - param_count(free, 1024) == 3072 * h


def test_rope_models_do_not_depend_on_sequence() -> None:
    m = PRESETS["llama3-70b"]
    assert param_count(m, 128) == param_count(m, 131072)


# --------------------------------------------------------------------------------------------
# Grouped-query attention, SwiGLU vs GELU
# --------------------------------------------------------------------------------------------


def test_gqa_kv_projection_smaller_than_q() -> None:
    m = PRESETS["llama3-70b"]
    assert m.n_kv_heads == 8 and m.heads == 64
    assert m.kv_dim == 8 * 128 == m.hidden // 8
    pb = param_breakdown(m)
    q = m.hidden * m.hidden
    kv = 2 * m.hidden * m.kv_dim
    assert pb.attention_per_layer == 2 * q + kv
    assert m.hidden * m.kv_dim < q
    # GQA saves parameters and FLOPs against full multi-head attention.
    mha = ModelSpec.model_validate({**m.model_dump(), "kv_heads": None})
    assert param_breakdown(mha).attention_per_layer == 4 * m.hidden**2
    assert param_count(m) < param_count(mha)
    assert forward_flops_per_token(m, 4096) < forward_flops_per_token(mha, 4096)
    # ... but the attention core (QK^T, AV) works on every query head either way.
    assert attention_core_flops_per_token(m, 4096) == attention_core_flops_per_token(mha, 4096)


def test_swiglu_has_three_matrices_gelu_two() -> None:
    common = dict(layers=2, hidden=1024, heads=16, vocab=1000, ffn_hidden=4096)
    sw = ModelSpec(mlp="swiglu", **common)
    ge = ModelSpec(mlp="gelu", **common)
    assert param_breakdown(sw).mlp_per_layer == 3 * 1024 * 4096
    assert param_breakdown(ge).mlp_per_layer == 2 * 1024 * 4096
    mlp_flops = layer_matmul_params(sw) - layer_matmul_params(ge)
    assert mlp_flops == 1024 * 4096
    # Per token, the SwiGLU MLP costs 1.5× the GELU MLP at the same ffn width.
    attn = 4 * 1024 * 1024
    assert (layer_matmul_params(sw) - attn) / (layer_matmul_params(ge) - attn) == 1.5
    s = 2048
    assert forward_flops_per_token(sw, s) - forward_flops_per_token(ge, s) == pytest.approx(
        2 * common["layers"] * 1024 * 4096
    )


def test_default_ffn_widths() -> None:
    ge = ModelSpec(layers=1, hidden=4096, heads=32, vocab=10, mlp="gelu")
    sw = ModelSpec(layers=1, hidden=4096, heads=32, vocab=10, mlp="swiglu")
    assert ge.ffn == 4 * 4096
    assert sw.ffn == 11008  # Llama: 8/3·h rounded up to a multiple of 256
    # Llama's width keeps the SwiGLU MLP about as large as a 4h GELU MLP.
    ratio = param_breakdown(sw).mlp_per_layer / param_breakdown(ge).mlp_per_layer
    assert ratio == pytest.approx(1.0, rel=0.01)


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_hardware_flops_reproduce_sc21_formula(row: dict[str, float]) -> None:
    m = PRESETS[_preset_name(row["params_billion"])]
    b = int(row["global_batch_size"])
    ours = hardware_flops_per_token(m, SEQ, "full") * b * SEQ
    theirs = megatron_sc21_flops(b, SEQ, m.layers, m.hidden, m.vocab)
    assert ours == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_sc21_helper_is_the_papers_formula(row: dict[str, float]) -> None:
    b, s = int(row["global_batch_size"]), SEQ
    lyr, h, v = int(row["layers"]), int(row["hidden_size"]), VOCAB
    expected = 96 * b * s * lyr * h**2 * (1 + s / (6 * h) + v / (16 * lyr * h))
    assert megatron_sc21_flops(b, s, lyr, h, v) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_model_flops_formula(row: dict[str, float]) -> None:
    """Model FLOPs (no recomputation): 72·B·s·l·h²·(1 + s/(6h) + V/(12lh))."""
    m = PRESETS[_preset_name(row["params_billion"])]
    b, s, lyr, h, v = int(row["global_batch_size"]), SEQ, m.layers, m.hidden, m.vocab
    expected = 72 * b * s * lyr * h**2 * (1 + s / (6 * h) + v / (12 * lyr * h))
    assert model_flops_per_token(m, s) * b * s == pytest.approx(expected, rel=1e-9)
    # Full recomputation adds one forward pass of the transformer layers (not the logits):
    # hardware / model = 4/3 up to the logits term.
    hw = hardware_flops_per_token(m, s, "full")
    assert hw - model_flops_per_token(m, s) == pytest.approx(
        m.layers * (24 * h**2 + 4 * s * h), rel=1e-12
    )


def test_model_flops_about_six_n_at_short_sequence() -> None:
    m = PRESETS["llama3-70b"]
    n = param_count(m)
    per_token = model_flops_per_token(m, 128)
    assert per_token == pytest.approx(6 * n, rel=0.05)
    # Attention's s-dependent term makes it grow with sequence length.
    assert model_flops_per_token(m, 8192) > per_token * 1.05


def test_embedding_lookup_costs_no_flops() -> None:
    # 6N overstates the work by the (untied) input embedding, which is a lookup.
    m = PRESETS["llama3-8b"]
    non_embedding = param_count(m) - param_breakdown(m).embedding
    assert model_flops_per_token(m, 1) == pytest.approx(6 * non_embedding, rel=1e-3)


def test_recompute_flops_ordering() -> None:
    m = PRESETS["llama3-70b"]
    s = 8192
    none = hardware_flops_per_token(m, s, "none")
    sel = hardware_flops_per_token(m, s, "selective")
    full = hardware_flops_per_token(m, s, "full")
    assert none == model_flops_per_token(m, s)
    assert none < sel < full
    assert recompute_flops_per_token(m, s, "selective") == m.layers * 4 * s * m.hidden
    # Selective recompute is cheap (Korthikanti et al.: a few percent), full about a third.
    assert (sel - none) / none < 0.1
    assert (full - none) / none == pytest.approx(1 / 3, abs=0.03)


# --------------------------------------------------------------------------------------------
# Data consistency of the validation table itself
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_table1_aggregate_pflops_consistent(row: dict[str, float]) -> None:
    aggregate = row["tflops_per_gpu"] * row["gpus"] / 1000
    assert aggregate == pytest.approx(row["aggregate_pflops"], rel=0.02)


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_table1_percent_of_peak_consistent(row: dict[str, float]) -> None:
    assert 100 * row["tflops_per_gpu"] / 312 == pytest.approx(row["percent_of_peak"], abs=1)


@pytest.mark.parametrize("row", TABLE1, ids=_row_id)
def test_table1_layout_is_whole(row: dict[str, float]) -> None:
    gpus, tp, pp = int(row["gpus"]), int(row["tensor_parallel"]), int(row["pipeline_parallel"])
    assert gpus % (tp * pp) == 0
    dp = gpus // (tp * pp)
    assert int(row["global_batch_size"]) % dp == 0
    assert int(row["attention_heads"]) % tp == 0
    assert int(row["layers"]) % pp == 0
