"""Writes the held-out ``dgxc-h100`` validation set under ``scenarios/validation/`` (run once;
the files are committed): NVIDIA's DGX Cloud Benchmarking recipes (``NVIDIA/dgxc-benchmarking``
@8f5cbb37, the v25.02 release on the NeMo 24.12 container; its Nemotron-4 340B table is the
v24.11 one, unchanged there), measured step times of Llama 3.1 8B/70B/405B, GPT-3 175B and
Nemotron-4 15B/340B on DGX H100 (EOS), bf16 and fp8, at the smallest and the largest GPU count
of each table. Never used to set a profile value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from make_validation import ROOT, write_scenario

REPO = "NVIDIA/dgxc-benchmarking @8f5cbb37 (v25.02, nvcr.io/nvidia/nemo:24.12)"
HARDWARE = (
    "DGX H100 nodes as the repository README states ('8xH100 80GB HBM3', 'NVLink 4th Generation "
    "900 GB/s', 'InfiniBand: Compute links: 8x 400 Gbit/s'; EOS) on a non-blocking fat tree"
)
NEMOTRON_15B = {
    "name": "nemotron-4-15b",
    "layers": 32,
    "hidden": 6144,
    "heads": 48,
    "kv_heads": 8,
    "ffn_hidden": 24576,
    "vocab": 256000,
    "mlp": "gelu",
    "norm": "layernorm",
    "position": "rope",
    "tied_embeddings": False,
}
NEMOTRON_340B = dict(NEMOTRON_15B, name="nemotron-4-340b", layers=96, hidden=18432, heads=96)
NEMOTRON_340B["ffn_hidden"] = 73728
# The 405B recipe trains on synthetic data with the GPT2BPETokenizer as a proxy ("Note that
# Llama3.1 405B uses the GPT2BPETokenizer as a proxy"): Llama 3.1 405B with GPT-2's vocabulary.
LLAMA_405B_GPT2 = {
    "name": "llama3.1-405b-gpt2-vocab",
    "layers": 126,
    "hidden": 16384,
    "heads": 128,
    "kv_heads": 8,
    "ffn_hidden": 53248,
    "vocab": 50257,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rope",
}


# NeMo 1.x with Apex's distributed Adam under bf16 keeps only the low half of each fp32 master
# weight; with fp8 parameters (the recipes' fp8 runs) it keeps the whole fp32 copy.
REMAINDERS = {
    "profile": "megatron-core",
    "master_weight_remainders": {
        "value": True,
        "source": "NVIDIA/NeMo nemo/collections/nlp/models/language_modeling/megatron_base_model"
        ".py setup_optimization: with distributed_fused_adam, 'elif optim_dtype == torch.float32 "
        "and model_dtype == torch.bfloat16: optim_kwargs['store_params'] = False; "
        "optim_kwargs['store_param_remainders'] = True' (fp8_params: store_params = True)",
    },
}


def _row(
    key: str,
    readme: str,
    model: Any,
    seq: int,
    par: dict[str, Any],
    gbs_per_gpu: float,
    mb: int,
    times: dict[str, dict[int, float]],
    config: str,
    assumes: str,
    grad: str = "fp32",
    fused_adam: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for prec, by_gpus in times.items():
        for gpus, step in by_gpus.items():
            name = f"dgxc-{key}-{gpus}xh100-{prec}"
            cluster: dict[str, Any] = {
                "gpu": "h100-sxm-80gb",
                "gpus_per_node": 8,
                "fabric": "nvlink4-nvswitch",
                "nodes": gpus // 8,
            }
            if gpus > 8:
                cluster["network"] = {
                    "profile": "ib-ndr-400",
                    "nics_per_node": 8,
                    "topology": {"kind": "fat_tree"},
                }
            data = {
                "name": name,
                "cluster": cluster,
                "model": model,
                "training": {
                    "seq_len": seq,
                    "global_batch": round(gbs_per_gpu * gpus),
                    "micro_batch": mb,
                    "precision": prec,
                    "flash_attention": True,
                    "grad_reduce_dtype": grad,
                },
                "parallelism": par,
                "software": REMAINDERS if fused_adam and prec == "bf16" else "megatron-core",
                "reference": {
                    "metric": "step_time_s",
                    "value": step,
                    "source": (
                        f"{REPO}, {readme}, table '{config}', row 'Training step time "
                        f"(seconds per step)', {gpus}x H100: {step} s ('we are using the last "
                        "training step timing')"
                    ),
                    "assumes": f"{HARDWARE}; {assumes} (scenarios/validation/published/"
                    "dgxc_SOURCE.md)",
                },
            }
            out.append((name, data))
    return out


FUSED_ADAM = (
    "; Apex distributed Adam (optim.name: distributed_fused_adam), which under bf16 keeps "
    "only the low half of each fp32 master weight"
)


def rows() -> list[tuple[str, dict[str, Any]]]:
    tp_overlap = (
        "megatron-core stack with TP communication overlapped (userbuffers: the recipe's "
        "ub_tp_comm_overlap), sequence parallelism, distributed optimizer with overlapped "
        "gradient reduce-scatter and parameter all-gather, no activation recomputation, fp32 "
        "gradient reduction (NeMo's default without grad_sync_dtype)"
    )
    out: list[tuple[str, dict[str, Any]]] = []
    out += _row(
        "llama31-8b",
        "llama3.1/README_8b.md",
        "llama3-8b",
        8192,
        {"tp": 1, "pp": 1, "cp": 2, "sharding": {"kind": "zero", "stage": 1}, "recompute": "none"},
        16,
        1,
        {"bf16": {8: 12.78, 128: 13.16}, "fp8": {8: 9.44, 128: 9.73}},
        "Llama 3.1 8b BF16/FP8 (TP=1, PP=1, CP=2, MBS=1, GA=32)",
        "megatron-core stack: distributed optimizer with overlapped gradient reduce-scatter "
        "and parameter all-gather, no activation recomputation, fp32 gradient reduction "
        "(NeMo's default without grad_sync_dtype)",
    )
    out += _row(
        "llama31-70b",
        "llama3.1/README_70b.md",
        "llama3-70b",
        8192,
        {
            "tp": 4,
            "pp": 4,
            "cp": 2,
            "pp_schedule": {"kind": "interleaved", "virtual_stages": 5},
            "sequence_parallel": True,
            "sharding": {"kind": "zero", "stage": 1},
            "recompute": "none",
            "overlap": {"tp_comm": True},
        },
        2,
        1,
        {"bf16": {64: 14.61, 2048: 14.84}, "fp8": {64: 10.46, 2048: 10.99}},
        "Llama 3.1 70b BF16/FP8 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)",
        tp_overlap + FUSED_ADAM,
        fused_adam=True,
    )
    out += _row(
        "llama31-405b",
        "llama3.1/README_405b.md",
        LLAMA_405B_GPT2,
        8192,
        {
            "tp": 8,
            "pp": 9,
            "cp": 2,
            "pp_schedule": {"kind": "interleaved", "virtual_stages": 7},
            "sequence_parallel": True,
            "sharding": {"kind": "zero", "stage": 1},
            "recompute": "none",
            "overlap": {"tp_comm": True},
        },
        252 / 576,
        1,
        {"bf16": {576: 17.50, 2304: 17.70}, "fp8": {576: 11.00, 2304: 11.20}},
        "Llama 3.1 405b BF16/FP8 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)",
        tp_overlap + FUSED_ADAM + "; GPT-2's vocabulary (the recipe's GPT2BPETokenizer proxy)",
        fused_adam=True,
    )
    out += _row(
        "gpt3-175b",
        "nemo_megatron/README_175b.md",
        "gpt3-175b",
        2048,
        {
            "tp": 4,
            "pp": 8,
            "pp_schedule": {"kind": "interleaved", "virtual_stages": 6},
            "sequence_parallel": True,
            "sharding": {"kind": "zero", "stage": 1},
            "recompute": "none",
            "overlap": {"tp_comm": True},
        },
        2,
        1,
        {"bf16": {128: 8.309, 2048: 8.49}, "fp8": {128: 5.626, 2048: 5.96}},
        "GPT3 175b BF16/FP8 (TP=4, PP=8, MBS=1)",
        tp_overlap + "; 6 virtual stages as the recipe's gpt3_175b_hydra.yaml sets "
        "(virtual_pipeline_model_parallel_size: 6; its README header says 12); dropout 0.1"
        + FUSED_ADAM,
        fused_adam=True,
    )
    out += _row(
        "nemotron4-15b",
        "nemotron/README_15b.md",
        NEMOTRON_15B,
        4096,
        {
            "tp": 4,
            "pp": 1,
            "sequence_parallel": True,
            "sharding": {"kind": "zero", "stage": 1},
            "recompute": "none",
            "overlap": {"tp_comm": True},
        },
        4,
        4,
        {"bf16": {16: 2.812, 2048: 2.887}, "fp8": {16: 2.039, 2048: 2.12}},
        "Nemotron4 15b BF16/FP8 (TP=4, PP=1, MBS=4, GA=4)",
        tp_overlap + "; squared-ReLU MLP of 4x hidden timed as GELU's",
    )
    out += _row(
        "nemotron4-340b",
        "nemotron/README_340b.md",
        NEMOTRON_340B,
        4096,
        {
            "tp": 8,
            "pp": 8,
            "pp_schedule": {"kind": "interleaved", "virtual_stages": 12},
            "sequence_parallel": True,
            "sharding": {"kind": "zero", "stage": 1},
            "recompute": "selective",
            "overlap": {"tp_comm": True},
        },
        1 / 4,
        1,
        {"bf16": {128: 4.61, 2048: 4.84}, "fp8": {128: 3.16, 2048: 3.49}},
        "Nemotron4 340b BF16/FP8 (TP=8, PP=8, VP=12, MBS=1, GA=16)",
        "megatron-core stack with TP communication overlapped (the recipe's "
        "ub_tp_comm_overlap=True), sequence parallelism, distributed optimizer with overlapped "
        "gradient reduce-scatter and parameter all-gather; selective recomputation and bf16 "
        "gradient reduction as nemotron4_340b.yaml sets (activations_checkpoint_granularity: "
        "selective; grad_sync_dtype: bf16); squared-ReLU MLP timed as GELU's" + FUSED_ADAM,
        grad="bf16",
        fused_adam=True,
    )
    return out


def dgxc_h100() -> None:
    for name, data in rows():
        write_scenario(ROOT / "dgxc-h100" / f"{name}.yaml", data)


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    dgxc_h100()
