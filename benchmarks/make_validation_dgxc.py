"""Writes the held-out ``dgxc-h100`` validation set under ``scenarios/validation/`` (run once;
the files are committed): NVIDIA's DGX Cloud Benchmarking recipes (``NVIDIA/dgxc-benchmarking``
@8f5cbb37, the v25.02 release on the NeMo 24.12 container; its Nemotron-4 340B table is the
v24.11 one, unchanged there), measured step times of Llama 3.1 8B/70B/405B, GPT-3 175B and
Nemotron-4 15B/340B on DGX H100 (EOS), bf16 and fp8, at the smallest and the largest GPU count
of each table. Never used to set a profile value. The recipes' settings are read from their
files; what they do not state is listed in scenarios/validation/published/dgxc_SOURCE.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from make_validation import ROOT, write_scenario

REPO = "NVIDIA/dgxc-benchmarking @8f5cbb37 (v25.02, nvcr.io/nvidia/nemo:24.12)"
# The Nemotron-4 340B table at 8f5cbb37 is the v24.11 one ("Nemotron4 340b 24.11"), measured
# on NeMo 24.09 with the layout its header states (the v25.02 configure.sh runs bf16 at CP=2).
REPO_340B = "NVIDIA/dgxc-benchmarking @35a9aecc (v24.11, NeMo 24.09; the same table at 8f5cbb37)"
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
# Llama3.1 405B uses the GPT2BPETokenizer as a proxy"): GPT-2's 50,257 tokens, padded as
# Megatron pads a vocabulary (to a multiple of 128 x TP: 51,200); 16 query groups as the
# README's FLOP note counts them ("1 + 16/128") and NeMo-Framework-Launcher's llama3_1_405b.yaml
# sets (num_query_groups: 16).
LLAMA_405B_GPT2 = {
    "name": "llama3.1-405b-gpt2-vocab",
    "layers": 126,
    "hidden": 16384,
    "heads": 128,
    "kv_heads": 16,
    "ffn_hidden": 53248,
    "vocab": 51200,
    "mlp": "swiglu",
    "norm": "rmsnorm",
    "position": "rope",
}


# NeMo 1.x with Apex's distributed Adam, an fp32 optimizer over a bf16 model and no fp8
# parameters keeps only the low half of each fp32 master weight (the Llama 3.1 recipes' bf16
# runs: fp8_params follows the precision); with fp8 parameters, the whole fp32 copy.
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
    *,
    readme: str,
    model: str | dict[str, Any],
    seq: int,
    par: dict[str, Any],
    gbs_per_gpu: float,
    mb: int,
    times: dict[str, dict[int, float]],
    config: str,
    assumes: str,
    grad: str = "fp32",
    remainders_bf16: bool = False,
    optimizer: dict[str, Any] | None = None,
    repo: str = REPO,
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
            training: dict[str, Any] = {
                "seq_len": seq,
                "global_batch": round(gbs_per_gpu * gpus),
                "micro_batch": mb,
                "precision": prec,
                "flash_attention": True,
                "grad_reduce_dtype": grad,
            }
            if optimizer is not None:
                training["optimizer"] = optimizer
            data = {
                "name": name,
                "cluster": cluster,
                "model": model,
                "training": training,
                "parallelism": par,
                "software": REMAINDERS if remainders_bf16 and prec == "bf16" else "megatron-core",
                "reference": {
                    "metric": "step_time_s",
                    "value": step,
                    "source": (
                        f"{repo}, {readme}, table '{config}', row 'Training step time "
                        f"(seconds per step)', {gpus}x H100: {step} s ('we are using the last "
                        "training step timing')"
                    ),
                    "assumes": f"{HARDWARE}; {assumes} (scenarios/validation/published/"
                    "dgxc_SOURCE.md)",
                },
            }
            out.append((name, data))
    return out


def _layout(tp: int, pp: int, cp: int = 1, vp: int = 1, recompute: str = "none") -> dict[str, Any]:
    par: dict[str, Any] = {"tp": tp, "pp": pp}
    if cp > 1:
        par["cp"] = cp
    if vp > 1:
        par["pp_schedule"] = {"kind": "interleaved", "virtual_stages": vp}
    if tp > 1:
        par["sequence_parallel"] = True
    par["sharding"] = {"kind": "zero", "stage": 1}
    par["recompute"] = recompute
    if tp > 1:
        par["overlap"] = {"tp_comm": True}
    return par


STACK = (
    "megatron-core stack: distributed optimizer with overlapped gradient reduce-scatter and "
    "parameter all-gather"
)
TP_OVERLAP = (
    STACK + ", TP communication overlapped (userbuffers: the recipe's ub_tp_comm_overlap), "
    "sequence parallelism"
)
FP32_GRADS = "fp32 gradient reduction (NeMo's default without grad_sync_dtype)"
FUSED_ADAM = (
    "Apex distributed Adam (optim.name: distributed_fused_adam): in the bf16 runs an fp32 "
    "optimizer over a bf16 model without fp8 parameters, which keeps only the low half of each "
    "fp32 master weight (software.master_weight_remainders); the fp8 runs set fp8_params and "
    "keep the whole copy"
)


def rows() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    out += _row(
        "llama31-8b",
        readme="llama3.1/README_8b.md",
        model="llama3-8b",
        seq=8192,
        par=_layout(1, 1, cp=2),
        gbs_per_gpu=16,
        mb=1,
        times={"bf16": {8: 12.78, 128: 13.16}, "fp8": {8: 9.44, 128: 9.73}},
        config="Llama 3.1 8b BF16/FP8 (TP=1, PP=1, CP=2, MBS=1, GA=32)",
        assumes=f"{STACK}; no activation recomputation; {FP32_GRADS}",
    )
    out += _row(
        "llama31-70b",
        readme="llama3.1/README_70b.md",
        model="llama3-70b",
        seq=8192,
        par=_layout(4, 4, cp=2, vp=5),
        gbs_per_gpu=2,
        mb=1,
        times={"bf16": {64: 14.61, 2048: 14.84}, "fp8": {64: 10.46, 2048: 10.99}},
        config="Llama 3.1 70b BF16/FP8 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)",
        assumes=f"{TP_OVERLAP}; no activation recomputation; {FP32_GRADS}; {FUSED_ADAM}",
        remainders_bf16=True,
    )
    out += _row(
        "llama31-405b",
        readme="llama3.1/README_405b.md",
        model=LLAMA_405B_GPT2,
        seq=8192,
        par=_layout(8, 9, cp=2, vp=7),
        gbs_per_gpu=252 / 576,
        mb=1,
        times={"bf16": {576: 17.50, 2304: 17.70}, "fp8": {576: 11.00, 2304: 11.20}},
        config="Llama 3.1 405b BF16/FP8 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)",
        assumes=f"{TP_OVERLAP}; no activation recomputation; {FP32_GRADS}; {FUSED_ADAM}; "
        "GPT-2's vocabulary padded to 51,200 (the recipe's GPT2BPETokenizer proxy) and 16 query "
        "groups (the README's FLOP note)",
        remainders_bf16=True,
    )
    out += _row(
        "gpt3-175b",
        readme="nemo_megatron/README_175b.md",
        model="gpt3-175b",
        seq=2048,
        par=_layout(4, 8, vp=6),
        gbs_per_gpu=2,
        mb=1,
        times={"bf16": {128: 8.309, 2048: 8.49}, "fp8": {128: 5.626, 2048: 5.96}},
        config="GPT3 175b BF16/FP8 (TP=4, PP=8, MBS=1)",
        assumes=f"{TP_OVERLAP}; no activation recomputation; as gpt3_175b_hydra.yaml sets: "
        "6 virtual stages (virtual_pipeline_model_parallel_size: 6; the README header says 12), "
        "bf16 gradient reduction (optim.grad_sync_dtype: bf16), Apex distributed Adam with "
        "fp8_params: true in every run (a whole fp32 master copy), dropout 0.1",
        grad="bf16",
    )
    out += _row(
        "nemotron4-15b",
        readme="nemotron/README_15b.md",
        model=NEMOTRON_15B,
        seq=4096,
        par=_layout(4, 1),
        gbs_per_gpu=4,
        mb=4,
        times={"bf16": {16: 2.812, 2048: 2.887}, "fp8": {16: 2.039, 2048: 2.12}},
        config="Nemotron4 15b BF16/FP8 (TP=4, PP=1, MBS=4, GA=4)",
        assumes=f"{TP_OVERLAP}; mcore_distributed_optim; no activation recomputation; "
        f"{FP32_GRADS}; squared-ReLU MLP of 4x hidden timed as GELU's",
    )
    out += _row(
        "nemotron4-340b",
        readme="nemotron/README_340b.md",
        model=NEMOTRON_340B,
        seq=4096,
        par=_layout(8, 8, vp=12, recompute="selective"),
        gbs_per_gpu=1 / 4,
        mb=1,
        times={"bf16": {128: 4.61, 2048: 4.84}, "fp8": {128: 3.16, 2048: 3.49}},
        config="Nemotron4 340b BF16/FP8 (TP=8, PP=8, VP=12, MBS=1, GA=16)",
        assumes=f"{TP_OVERLAP} (also overlap_p2p_comm); the v25.02 recipe's "
        "nemotron4-340b-synth.yaml for what the v24.11 one does not store: selective "
        "recomputation, Apex distributed Adam in bf16 (optim dtype: bf16, so no master copy and "
        "bf16 moments; the fp8 runs' fp8 parameters keep a bf16 copy the model does not count), "
        "bf16 gradient reduction (grad_sync_dtype: bf16); squared-ReLU MLP timed as GELU's",
        grad="bf16",
        optimizer={"kind": "adamw", "master_weights_fp32": False, "state_dtype": "bf16"},
        repo=REPO_340B,
    )
    return out


def dgxc_h100() -> None:
    for name, data in rows():
        write_scenario(ROOT / "dgxc-h100" / f"{name}.yaml", data)


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    dgxc_h100()
