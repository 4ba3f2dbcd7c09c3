"""Writes the llm-foundry MPT benchmark rows (PyTorch FSDP, bf16 and fp8, models of 1B and
more, on H100, A100 80GB and A100 40GB) as scenarios under ``scenarios/validation/`` (run by
``make_validation.py``; the files are committed), from ``llmfoundry_rows_raw.csv`` and its
source notes (``llmfoundry_SOURCE.md``)."""

from __future__ import annotations

import csv

from make_validation import ROOT, write_scenario

LF_SRC = (
    "mosaicml/llm-foundry scripts/train/benchmarking/README.md @c90b9b31 "
    "(scenarios/validation/llmfoundry_rows_raw.csv): {v} tokens/s per GPU, {mfu}% MFU"
)


# The bf16/PURE rows (the A100 40GB table and the A100 80GB 70b rows) are the mosaicml/examples
# era's, carried over unchanged: run on torch 1.13, whose non-reentrant checkpoint re-runs the
# whole block.
LF_TORCH113 = {
    "value": False,
    "source": "llm-foundry examples/llm/throughput/README.md @af5919ce holds these rows "
    "unchanged (MosaicGPT Training Benchmarks, 'TODO: Update tables with torch 2.0'); its "
    "submit_benchmarks.py defaults to image mosaicml/pytorch:1.13.1_cu117 with FSDP mixed "
    "precision PURE; non-reentrant checkpoint early-stops only from torch 2.1 (pytorch/pytorch "
    "PR 96866)",
}


MPT = {  # d_model, n_heads, n_layers (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml)
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}
LF_CLUSTER = {
    "h100-80gb": {
        "gpu": "h100-sxm-80gb",
        "fabric": "nvlink4-nvswitch",
        "network": {"profile": "ib-ndr-400", "nics_per_node": 8},
        "note": "8-GPU HGX H100 nodes with eight 400 Gb/s NICs (the README states no "
        "interconnect for H100)",
    },
    "a100-80gb": {
        "gpu": "a100-sxm4-80gb",
        "fabric": "nvlink3-nvswitch",
        "network": {"profile": "roce-200", "nics_per_node": 8},
        "note": "8-GPU A100 nodes; the README's 1600 Gb/s RoCE per node as eight 200 Gb/s NICs",
    },
    "a100-40gb": {
        "gpu": "a100-sxm4-40gb",
        "fabric": "nvlink3-nvswitch",
        "network": {"profile": "roce-200", "nics_per_node": 8},
        "note": "8-GPU A100 40GB nodes; the README's 1600 Gb/s RoCE per node as eight 200 Gb/s "
        "NICs",
    },
}


def llmfoundry() -> None:
    for r in csv.DictReader((ROOT / "llmfoundry_rows_raw.csv").open()):
        if r["gpu"] not in LF_CLUSTER or r["model"] not in MPT:
            continue
        fp8 = "fp8" in r["precision"]  # the H100 FP8 table: its own set
        d, heads, layers = MPT[r["model"]]
        seq, gpus = int(r["seq_len"]), int(r["gpus"])
        cl = LF_CLUSTER[r["gpu"]]
        ckpt = r["activation_checkpointing"] == "True"
        pure = r["mp_mode"] == "PURE"
        name = f"mpt-{r['model']}-{r['gpu']}-s{seq}-g{gpus}-mb{r['micro_batch']}"
        strategy = "shard_grad_op" if r["sharding"] == "SHARD_GRAD_OP" else "full_shard"
        write_scenario(
            ROOT / f"llmfoundry-{r['gpu']}{'-fp8' if fp8 else ''}" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {
                    "gpu": cl["gpu"],
                    "gpus_per_node": 8,
                    "nodes": max(1, gpus // 8),
                    "fabric": cl["fabric"],
                    **({"network": cl["network"]} if gpus > 8 else {}),
                },
                "model": {
                    "name": f"mpt-{r['model']}",
                    "layers": layers,
                    "hidden": d,
                    "heads": heads,
                    "vocab": 50368,
                    "mlp": "gelu",
                    "norm": "layernorm",
                    "position": "learned",
                    "max_positions": seq,
                    "tied_embeddings": True,
                    "linear_bias": True,
                    "dropout": False,
                },
                "training": {
                    "seq_len": seq,
                    "global_batch": int(r["global_batch"]),
                    "micro_batch": int(r["micro_batch"]),
                    "precision": "fp8" if fp8 else "bf16",
                    "flash_attention": True,
                    "param_gather_dtype": "bf16" if pure else "fp32",
                    "grad_reduce_dtype": "bf16",
                },
                "parallelism": {
                    "sharding": {"kind": "fsdp", "strategy": strategy},
                    "recompute": "full" if ckpt else "none",
                },
                "software": {"profile": "pytorch-fsdp", "recompute_early_stop": LF_TORCH113}
                if pure
                else "pytorch-fsdp",
                "reference": {
                    "metric": "tokens_per_s_per_gpu",
                    "value": float(r["tokens_per_s_per_gpu"]),
                    "source": LF_SRC.format(v=r["tokens_per_s_per_gpu"], mfu=r["mfu_percent"]),
                    "assumes": cl["note"]
                    + f"; FSDP mixed precision {r['mp_mode']} (Composer: "
                    + ("bf16 gathers" if pure else "fp32 parameter gathers, bf16 reduction")
                    + "); FlashAttention-2; the global batch need not divide evenly"
                    + (
                        "; fp8: TransformerEngine v0.10 linear layers (submit_benchmarks.py "
                        "fc_type te), the LM head and attention in bf16"
                        if fp8
                        else ""
                    ),
                },
            },
        )
