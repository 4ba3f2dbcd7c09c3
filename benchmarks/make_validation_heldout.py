"""Writes the held-out validation sets under ``scenarios/validation/`` (run once; the files are
committed): published runs from other teams, frameworks and scales than the sets the profiles
were checked against while they were built, so that their error says how well the model's
mechanisms carry over. Each scenario says what its source states (``reference``) and what it
assumes that the source does not.

Sets: MegaScale's Megatron-LM baseline (Jiang et al., NSDI 2024, Table 2: GPT 175B on 256 to
12,288 GPUs, strong scaling at two batch sizes); BLOOM-176B's training logs (BigScience,
Megatron-DeepSpeed on 384 A100, at the full batch and at the ramp-up's 16 sequences);
torchtitan's FSDP2 numbers on 64 A100 (Llama 2 and 3, 8B to 70B, 2024); Llama 3 405B on 8,192
and 16,384 H100 (Meta, 2024, Table 4); Nemotron-4 15B and 340B on 768 to 6,144 H100 (NVIDIA,
2024); Megatron-Turing NLG 530B on 2,240 to 3,360 A100 (Smith et al., 2022). Sources and
assumptions: ``scenarios/validation/published/*_SOURCE.md``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from make_validation import PUB, ROOT, megatron_model, write_scenario

MEGASCALE_SRC = (
    "Jiang et al., 'MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs' "
    "(NSDI 2024, arXiv 2402.15627v1), Table 2, Megatron-LM baseline "
    "(scenarios/validation/published/megascale2024_table2.csv): {v} s per iteration, {mfu}% MFU"
)
MEGASCALE_ASSUMES = (
    "the paper's 'NVIDIA Ampere GPUs' as A100 SXM4 80GB, 8 per server on NVSwitch; its eight "
    "200G NICs per server (multi-rail, 1:1 Clos) as RoCE 200 rail-optimised; micro-batch 1, "
    "bf16, selective recomputation with sequence parallelism and the distributed optimizer "
    "(Megatron-LM's 2023 GPT-3 175B settings); no flash attention and no DP/TP/PP overlap, which "
    "MegaScale lists among its own additions, beyond what Megatron-LM 2023 does by default: the "
    "asynchronous TP backward and, with bf16's fp32 gradient accumulation, the gradient-"
    "accumulation fusion (megatron-lm-2022 stack)"
)


def megascale() -> None:
    for r in csv.DictReader((PUB / "megascale2024_table2.csv").open()):
        gpus, batch = int(r["gpus"]), int(r["batch_size"])
        name = f"megascale-megatron-175b-{gpus}gpu"
        write_scenario(
            ROOT / "megascale-megatron" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _a100_cluster(gpus // 8, "roce-200", 8, "rail_optimized"),
                "model": _gpt_175b_megascale(),
                "training": {
                    "seq_len": 2048,
                    "global_batch": batch,
                    "micro_batch": 1,
                    "precision": "bf16",
                    "flash_attention": False,
                },
                "parallelism": {
                    "tp": 8,
                    "pp": 8,
                    "sequence_parallel": True,
                    "pp_schedule": {"kind": "interleaved", "virtual_stages": 6},
                    "sharding": {"kind": "zero", "stage": 1},
                    "recompute": "selective",
                    # The distributed optimizer's weight all-gather waits for the update: the
                    # DP overlap is one of MegaScale's own additions.
                    "overlap": {"param_gather": False},
                },
                "software": "megatron-lm-2022",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": MEGASCALE_SRC.format(v=r["iteration_time_s"], mfu=r["mfu_percent"]),
                    "assumes": MEGASCALE_ASSUMES,
                },
            },
        )


BLOOM_SRC = (
    "BLOOM-176B training log, {where} (scenarios/validation/published/bloom176b_tr11.csv): "
    "{v} s per iteration ({tf} TFLOP/s logged, hardware FLOPs with recomputation)"
)
BLOOM_ASSUMES = (
    "A100 SXM4 80GB on NVSwitch, 8 per node; Jean Zay's four Omni-Path links per node as "
    "omnipath-100 x 4; Megatron-DeepSpeed with DeepSpeed's pipeline engine and BF16 optimizer "
    "(megatron-deepspeed stack, ZeRO-1); DeepSpeed's 'type:transformer|embedding' partition as "
    "5, 6 x 10, 5 layers; dropout off"
)


def bloom() -> None:
    for r in csv.DictReader((PUB / "bloom176b_tr11.csv").open()):
        name = f"bloom-176b-{r['row']}"
        write_scenario(
            ROOT / "bloom-176b" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _a100_cluster(48, "omnipath-100", 4, "fat_tree"),
                "model": {
                    "name": "bloom-176b",
                    "layers": 70,
                    "hidden": 14336,
                    "heads": 112,
                    "vocab": 250880,
                    "mlp": "gelu",
                    "norm": "layernorm",
                    "position": "alibi",
                    "tied_embeddings": True,
                    "linear_bias": True,
                    "dropout": False,
                },
                "training": {
                    "seq_len": 2048,
                    "global_batch": int(r["global_batch"]),
                    "micro_batch": int(r["micro_batch"]),
                    "precision": "bf16",
                    "flash_attention": False,
                },
                "parallelism": {
                    "tp": 4,
                    "pp": 12,
                    "stage_layers": [5] + [6] * 10 + [5],
                    "pp_schedule": {"kind": "1f1b"},
                    "sharding": {"kind": "zero", "stage": 1},
                    "recompute": "full",
                },
                "software": "megatron-deepspeed",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": BLOOM_SRC.format(
                        where=r["source"], v=r["iteration_time_s"], tf=r["tflops_logged"]
                    ),
                    "assumes": BLOOM_ASSUMES,
                },
            },
        )


TITAN_SRC = (
    "pytorch/torchtitan docs/performance.md @0413364 "
    "(scenarios/validation/published/torchtitan_a100_2024.csv): {v} tokens/s per GPU, {mfu}% MFU"
)
TITAN_ASSUMES = (
    "8 nodes of 8 A100 SXM4 80GB on NVSwitch with eight InfiniBand HDR 200 ports; FSDP full "
    "sharding over the 64 GPUs; the models' default sequence lengths; bf16 with fp32 reduction; "
    "the torchtitan stack ('selective op' is its op-level selective recomputation); whether "
    "torch.compile was on is not stated"
)
TITAN_RECOMPUTE = {"no": "none", "selective op": "selective", "full": "full"}


def torchtitan_a100() -> None:
    for r in csv.DictReader((PUB / "torchtitan_a100_2024.csv").open()):
        rc = TITAN_RECOMPUTE[r["activation_checkpointing"]]
        mb = int(r["local_batch"])
        name = f"torchtitan-{r['model']}-a100-mb{mb}-{rc}"
        write_scenario(
            ROOT / "torchtitan-a100" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _a100_cluster(8, "ib-hdr-200", 8, "fat_tree"),
                "model": r["model"],
                "training": {
                    "seq_len": int(r["seq_len"]),
                    "global_batch": 64 * mb,
                    "micro_batch": mb,
                    "precision": "bf16",
                },
                "parallelism": {
                    "sharding": {"kind": "fsdp", "strategy": "full_shard"},
                    "recompute": rc,
                },
                "software": "torchtitan",
                "reference": {
                    "metric": "tokens_per_s_per_gpu",
                    "value": float(r["wps_per_gpu"]),
                    "source": TITAN_SRC.format(v=r["wps_per_gpu"], mfu=r["mfu_percent"]),
                    "assumes": TITAN_ASSUMES,
                },
            },
        )


H100_SRC = "scenarios/validation/published/heldout2024_SOURCE.md"


def _h100_cluster(nodes: int, network: str) -> dict[str, Any]:
    """Nodes of eight H100 SXM 80GB on NVLink 4 + NVSwitch, one ``network`` port per GPU."""
    return {
        "gpu": "h100-sxm-80gb",
        "gpus_per_node": 8,
        "fabric": "nvlink4-nvswitch",
        "network": {"profile": network, "nics_per_node": 8, "topology": {"kind": "fat_tree"}},
        "nodes": nodes,
    }


def llama3_405b() -> None:
    for r in csv.DictReader((PUB / "llama3_405b_table4.csv").open()):
        gpus, dp = int(r["gpus"]), int(r["dp"])
        name = f"llama3-405b-{gpus}xh100"
        # One layer per chunk over 16 x 8 slots, less one on the first and last (Sec. 3.3.2).
        chunks = [1] * 128
        chunks[0] = chunks[-1] = 0
        write_scenario(
            ROOT / "llama3-405b" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _h100_cluster(gpus // 8, "roce-400"),
                "model": "llama3-405b",
                "training": {
                    "seq_len": int(r["seq_len"]),
                    "global_batch": dp * int(r["batch_per_dp"]),
                    "micro_batch": 1,
                    "precision": "bf16",
                    "flash_attention": True,
                    "grad_reduce_dtype": "fp32",
                },
                "parallelism": {
                    "tp": int(r["tp"]),
                    "pp": int(r["pp"]),
                    "sequence_parallel": True,
                    "pp_schedule": {"kind": "interleaved", "virtual_stages": 8},
                    "stage_layers": chunks,
                    # fp32 gradients accumulated over the micro-batches, reduce-scattered once
                    # a step: a distributed optimizer's traffic and memory (ZeRO-1).
                    "sharding": {"kind": "zero", "stage": 1},
                    "recompute": "none",
                },
                "software": "megatron-core",
                "reference": {
                    "metric": "model_tflops_per_gpu",
                    "value": float(r["tflops_per_gpu"]),
                    "source": (
                        "Meta, 'The Llama 3 Herd of Models' (arXiv 2407.21783), Table 4 "
                        f"(scenarios/validation/published/llama3_405b_table4.csv): {gpus} GPUs, "
                        f"TP8 CP1 PP16 DP{dp}, {r['tflops_per_gpu']} TFLOP/s per GPU, "
                        f"{r['bf16_mfu_percent']}% BF16 MFU"
                    ),
                    "assumes": (
                        "one 400G RoCE NIC per GPU on a non-blocking fat tree; interleaved "
                        "schedule with one layer per chunk (V=8; the first and last chunks hold "
                        "only the embedding and the output layer, as the paper says); "
                        "micro-batch 1; fp32 gradients accumulated over the micro-batches and "
                        "reduce-scattered once a step, optimizer sharded (ZeRO-1); "
                        "megatron-core stack; FLOPs with full s x s attention "
                        f"(see {H100_SRC})"
                    ),
                },
            },
        )


def nemotron4() -> None:
    for r in csv.DictReader((PUB / "nemotron4_table2.csv").open()):
        big = r["model"] == "nemotron-4-340b"
        gpus, pp = int(r["gpus"]), int(r["pp"])
        layers, hidden, heads = (96, 18432, 96) if big else (32, 6144, 48)
        name = f"{r['model']}-{gpus}xh100"
        par: dict[str, Any] = {"tp": int(r["tp"]), "pp": pp, "sequence_parallel": True}
        if pp > 1:
            par["pp_schedule"] = {"kind": "interleaved", "virtual_stages": layers // pp}
        par |= {"sharding": {"kind": "zero", "stage": 1}, "recompute": "none"}
        write_scenario(
            ROOT / "nemotron-4" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _h100_cluster(gpus // 8, "ib-ndr-400"),
                "model": {
                    "name": r["model"],
                    "layers": layers,
                    "hidden": hidden,
                    "heads": heads,
                    "kv_heads": 8,
                    "ffn_hidden": 4 * hidden,
                    "vocab": 256000,
                    "mlp": "gelu",  # squared ReLU: two matrices, one elementwise kernel
                    "norm": "layernorm",
                    "position": "rope",
                    "tied_embeddings": False,
                },
                "training": {
                    "seq_len": int(r["seq_len"]),
                    "global_batch": int(r["global_batch"]),
                    "micro_batch": 1,
                    "precision": "bf16",
                    "flash_attention": True,
                },
                "parallelism": par,
                "software": "megatron-core",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": (
                        f"NVIDIA, Nemotron-4 {'340B' if big else '15B'} Technical Report "
                        f"({'arXiv 2406.11704, via transcriptions' if big else 'arXiv 2402.16819'}"
                        "), Table 2 (scenarios/validation/published/nemotron4_table2.csv): "
                        f"{r['iteration_time_s']} s per iteration, {r['mfu_percent']}% MFU"
                    ),
                    "assumes": (
                        "FFN 4 x hidden; micro-batch 1; bf16, flash attention, no "
                        "recomputation; megatron-core stack (fp32 gradient reduce-scatter, "
                        "NeMo's default; TP communication not overlapped); eight NDR ports per "
                        "node on a non-blocking fat tree"
                        + ("; one layer per model chunk" if big else "")
                        + f" (see {H100_SRC})"
                    ),
                },
            },
        )


def mtnlg_530b() -> None:
    for r in csv.DictReader((PUB / "mtnlg530b_sec24.csv").open()):
        gpus = int(r["gpus"])
        name = f"mtnlg-530b-{gpus}xa100"
        model = {**megatron_model("mt-nlg-530b", 105, 20480, 128), "vocab": 50272}
        write_scenario(
            ROOT / "mtnlg-530b" / f"{name}.yaml",
            {
                "name": name,
                "cluster": _a100_cluster(int(r["nodes"]), "ib-hdr-200", 8, "fat_tree"),
                "model": model,
                "training": {
                    "seq_len": int(r["seq_len"]),
                    "global_batch": int(r["global_batch"]),
                    "micro_batch": 1,
                    "precision": "bf16",
                    "flash_attention": False,
                },
                "parallelism": {
                    "tp": int(r["tp"]),
                    "pp": int(r["pp"]),
                    "pp_schedule": {"kind": "1f1b"},
                    "sharding": {"kind": "zero", "stage": 1},
                    "recompute": "full",
                },
                "software": "megatron-deepspeed",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": (
                        "Smith et al., 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG "
                        "530B' (arXiv 2201.11990), Sec. 2.4, via cli99/llm-analysis "
                        "(scenarios/validation/published/mtnlg530b_sec24.csv): "
                        f"{r['iteration_time_s']} s per iteration, {r['tflops_per_gpu']} TFLOP/s "
                        "per GPU"
                    ),
                    "assumes": (
                        "DGX A100 80GB with eight HDR 200 ports on a full fat tree; micro-batch "
                        "1 and full recomputation (the published TFLOP/s follow Narayanan et "
                        "al.'s formula with recomputation); vocabulary 50,272; bf16, ZeRO-1, "
                        "DeepSpeed's 1F1B pipeline engine (megatron-deepspeed stack; "
                        f"see {H100_SRC})"
                    ),
                },
            },
        )


def _a100_cluster(nodes: int, network: str, nics: int, topology: str) -> dict[str, Any]:
    """Nodes of eight A100 SXM4 80GB on NVSwitch, with ``nics`` ports of ``network`` each."""
    return {
        "gpu": "a100-sxm4-80gb",
        "gpus_per_node": 8,
        "fabric": "nvlink3-nvswitch",
        "network": {"profile": network, "nics_per_node": nics, "topology": {"kind": topology}},
        "nodes": nodes,
    }


def _gpt_175b_megascale() -> dict[str, Any]:
    """MegaScale's Table 1 175B model: 96 layers, hidden 12288, 128 heads, vocabulary 64,000;
    otherwise Megatron-LM's GPT."""
    return {**megatron_model("gpt-175b-megascale", 96, 12288, 128), "vocab": 64000}


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    megascale()
    bloom()
    torchtitan_a100()
    llama3_405b()
    nemotron4()
    mtnlg_530b()
