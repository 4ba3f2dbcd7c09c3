"""Model presets: published architectures, each with its source and published size."""

from __future__ import annotations

from ..config.workload import ModelSpec

_LLAMA3 = dict(mlp="swiglu", norm="rmsnorm", position="rope", vocab=128256, kv_heads=8)
# Megatron-LM GPT as in Narayanan et al. SC21, Table 1: GELU MLP of 4h, LayerNorm, learned
# positions over 2048 tokens, embeddings tied to the output layer, biases, dropout.
_MEGATRON = dict(
    mlp="gelu",
    norm="layernorm",
    position="learned",
    max_positions=2048,
    tied_embeddings=True,
    linear_bias=True,
    dropout=True,
    vocab=51200,
)

_LLAMA2 = dict(mlp="swiglu", norm="rmsnorm", position="rope", vocab=32000)

PRESETS: dict[str, ModelSpec] = {
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (GPT-3 175B).
    "gpt3-175b": ModelSpec(
        name="gpt3-175b",
        layers=96,
        hidden=12288,
        heads=96,
        vocab=50257,
        mlp="gelu",
        norm="layernorm",
        position="learned",
        max_positions=2048,
        tied_embeddings=True,
        linear_bias=True,
        dropout=True,
        published_params=175e9,
    ),
    # Black et al. 2022, "GPT-NeoX-20B: An Open-Source Autoregressive Language Model", and its
    # training config (EleutherAI/gpt-neox configs/20B.yml @252ddc52: 44 layers, hidden 6144,
    # 64 heads, rotary, "gpt_j_residual": true, "no-weight-tying": true, dropout 0, biases);
    # the model card (EleutherAI/gpt-neox-20b): D_ff 24,576, vocabulary padded to 50,432,
    # 20,556,201,984 parameters. Rotary on a quarter of each head is counted as full RoPE.
    "gpt-neox-20b": ModelSpec(
        name="gpt-neox-20b",
        layers=44,
        hidden=6144,
        heads=64,
        vocab=50432,
        mlp="gelu",
        norm="layernorm",
        position="rope",
        linear_bias=True,
        parallel_residual=True,
        published_params=20556201984,
    ),
    # Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1 and
    # Sec. 2.2 (grouped-query attention with 8 KV heads for 70B only); hidden, layers, heads and
    # MLP widths from the released checkpoints' config.json (meta-llama/Llama-2-*-hf).
    "llama2-7b": ModelSpec(
        name="llama2-7b",
        layers=32,
        hidden=4096,
        heads=32,
        ffn_hidden=11008,
        published_params=6.74e9,
        **_LLAMA2,  # type: ignore[arg-type]
    ),
    "llama2-13b": ModelSpec(
        name="llama2-13b",
        layers=40,
        hidden=5120,
        heads=40,
        ffn_hidden=13824,
        published_params=13.0e9,
        **_LLAMA2,  # type: ignore[arg-type]
    ),
    "llama2-70b": ModelSpec(
        name="llama2-70b",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn_hidden=28672,
        published_params=69.0e9,
        **_LLAMA2,  # type: ignore[arg-type]
    ),
    # Meta, "The Llama 3 Herd of Models" (2024), Table 3; sizes from the released checkpoints.
    "llama3-8b": ModelSpec(
        name="llama3-8b",
        layers=32,
        hidden=4096,
        heads=32,
        ffn_hidden=14336,
        published_params=8.03e9,
        **_LLAMA3,  # type: ignore[arg-type]
    ),
    "llama3-70b": ModelSpec(
        name="llama3-70b",
        layers=80,
        hidden=8192,
        heads=64,
        ffn_hidden=28672,
        published_params=70.6e9,
        **_LLAMA3,  # type: ignore[arg-type]
    ),
    "llama3-405b": ModelSpec(
        name="llama3-405b",
        layers=126,
        hidden=16384,
        heads=128,
        ffn_hidden=53248,
        published_params=405e9,
        **_LLAMA3,  # type: ignore[arg-type]
    ),
}

# Narayanan et al. SC21, Table 1: (published billions, heads, hidden, layers).
MEGATRON_SC21 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]

for _b, _heads, _hidden, _layers in MEGATRON_SC21:
    _name = "megatron-1t" if _b >= 1000 else f"megatron-{_b}b"
    PRESETS[_name] = ModelSpec(
        name=_name,
        layers=_layers,
        hidden=_hidden,
        heads=_heads,
        published_params=_b * 1e9,
        **_MEGATRON,  # type: ignore[arg-type]
    )
