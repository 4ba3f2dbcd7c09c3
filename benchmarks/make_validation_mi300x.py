"""Writes the held-out ``mi300x-fsdp`` validation set under ``scenarios/validation/`` (run once;
the files are committed): AMD's published Llama 3.1 8B FSDP runs on one 8-GPU MI300X server
(``rocm/pytorch-training:v25.2``), the first AMD rows. Never used to set a profile value.

The source publishes TFLOP/s per GPU under its benchmark's own count (``llama.py``
``estimate_flops_per_token``: six FLOPs per weight of every linear layer and the output layer,
plus attention as if it were not causal, 12·L·T·H·d per token). That count is reproduced here
to turn each figure back into tokens/s per GPU, the metric the model is compared on.
"""

from __future__ import annotations

from pathlib import Path

from make_validation import ROOT, write_scenario

SRC = (
    "AMD-AIG-AIMA/pytorch-training-benchmark Docker_Instructions.md @c295aaee (ROCm PyTorch "
    "Training Container rocm/pytorch-training:v25.2: ROCm 6.3.0, PyTorch 2.7.0a0+git637433, "
    "Transformer Engine 1.11, Flash Attention 2.6.3), table 'MI300X platform performance "
    "results': 'Llama 3.1 8B with FSDP | {prec} | {mb} | {seq} | {tflops}' TFLOPS/s/GPU; as "
    "tokens/s per GPU by the benchmark's own FLOP count (llama.py @65783cb "
    "estimate_flops_per_token: {gflop:.2f} GFLOP per token at {seq} tokens): {tps:,.0f}"
)
ASSUMES = (
    "one Supermicro AS-8125GS-TNMR2 (8 MI300X at 750 W on Infinity Fabric, the document's "
    "reference system); train_fsdp.py @7112e27 as the document runs it: FSDP1 FULL_SHARD over "
    "the 8 GPUs with bf16 parameters and bf16 reduction (MixedPrecision param_dtype and "
    "reduce_dtype bfloat16), no activation checkpointing, flash_attn_func (causal) on MI3xx, "
    "the script's default 8 micro-batches per optimizer step (global batch = 8 x GPUs x "
    "micro-batch; its timed 'iteration' is one micro-batch, optimizer steps included on "
    "average; the version the container ran is not stated); at 4096 tokens the table's batch "
    "of 6 with a 4k config the repository does not hold (configs/llama-3.1-8b-4k.json), taken "
    "as the 8k one at max_seq_len 4096; {stack}"
)
BF16_STACK = "torch.compile (on by default for bf16) = torchtitan stack"
FP8_STACK = (
    "fp8: Transformer Engine TransformerLayer blocks with HYBRID delayed scaling, compile off "
    "(the script turns it off for TE), 4 key/value heads (num_gqa_groups=num_heads//"
    "num_kv_heads); its fused norm, SwiGLU and rotary kernels as the torchtitan stack's "
    "compiled ones"
)
# (precision, micro-batch, sequence, published TFLOP/s per GPU)
ROWS = (
    ("bf16", 3, 8192, 542.94),
    ("fp8", 3, 8192, 737.40),
    ("bf16", 6, 4096, 523.79),
    ("fp8", 6, 4096, 735.44),
)

# Llama 3.1 8B as configs/llama-3.1-8b.json gives it
E, K, H, J, L, V = 4096, 14336, 32, 8, 32, 128256
# The fp8 runs build Transformer Engine blocks with num_gqa_groups=num_heads//num_kv_heads
# (llama.py Fp8LLaMABlock), which TransformerLayer takes as the number of key/value groups: 4,
# not the 8 of the bf16 model (the FLOP count above keeps J=8 for both).
FP8_MODEL = {
    "name": "llama3.1-8b-te-4kv",
    "layers": L,
    "hidden": E,
    "heads": H,
    "kv_heads": H // J,
    "ffn_hidden": K,
    "vocab": V,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rope",
}


def script_flops_per_token(seq: int) -> float:
    """``llama.py`` ``estimate_flops_per_token`` for Llama 3.1 8B at ``seq`` tokens."""
    d = E // H
    ffn = 2 * K * E * 2 + 2 * K * E
    qkv = 2 * E * (H + 2 * J) * d
    proj = 2 * E * H * d
    emb = 2 * E * V
    return ((ffn + qkv + proj) * L + emb) * 3 + 4 * seq * H * d * L * 3


def mi300x_fsdp() -> None:
    for prec, mb, seq, tflops in ROWS:
        flops = script_flops_per_token(seq)
        tps = tflops * 1e12 / flops
        name = f"mi300x-llama31-8b-fsdp-{prec}-s{seq}-mb{mb}"
        write_scenario(
            ROOT / "mi300x-fsdp" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {
                    "gpu": "mi300x",
                    "gpus_per_node": 8,
                    "fabric": "infinity-fabric-mi300x",
                    "nodes": 1,
                },
                "model": "llama3-8b" if prec == "bf16" else FP8_MODEL,
                "training": {
                    "seq_len": seq,
                    "global_batch": 8 * 8 * mb,
                    "micro_batch": mb,
                    "precision": prec,
                    "flash_attention": True,
                    "grad_reduce_dtype": "bf16",
                },
                "parallelism": {
                    "sharding": {"kind": "fsdp", "strategy": "full_shard"},
                    "recompute": "none",
                },
                "software": "torchtitan",
                "reference": {
                    "metric": "tokens_per_s_per_gpu",
                    "value": round(tps, 1),
                    "source": SRC.format(
                        prec=prec.upper(),
                        mb=mb,
                        seq=seq,
                        tflops=tflops,
                        gflop=flops / 1e9,
                        tps=tps,
                    ),
                    "assumes": ASSUMES.format(stack=BF16_STACK if prec == "bf16" else FP8_STACK)
                    + " (scenarios/validation/published/mi300x_SOURCE.md)",
                },
            },
        )


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    mi300x_fsdp()
