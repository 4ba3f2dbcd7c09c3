"""Writes the held-out validation sets under ``scenarios/validation/`` (run once; the files are
committed): published runs from other teams, frameworks and scales than the sets the profiles
were checked against while they were built, so that their error says how well the model's
mechanisms carry over. Each scenario says what its source states (``reference``) and what it
assumes that the source does not.

Sets: MegaScale's Megatron-LM baseline (Jiang et al., NSDI 2024, Table 2: GPT 175B on 256 to
12,288 GPUs, strong scaling at two batch sizes).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from make_validation import PUB, ROOT, _write

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
    "MegaScale lists among its own additions (megatron-lm-2021 stack)"
)


def megascale() -> None:
    for r in csv.DictReader((PUB / "megascale2024_table2.csv").open()):
        gpus, batch = int(r["gpus"]), int(r["batch_size"])
        name = f"megascale-megatron-175b-{gpus}gpu"
        _write(
            ROOT / "megascale-megatron" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {
                    "gpu": "a100-sxm4-80gb",
                    "gpus_per_node": 8,
                    "fabric": "nvlink3-nvswitch",
                    "network": {
                        "profile": "roce-200",
                        "nics_per_node": 8,
                        "topology": {"kind": "rail_optimized"},
                    },
                    "nodes": gpus // 8,
                },
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
                },
                "software": "megatron-lm-2021",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": MEGASCALE_SRC.format(v=r["iteration_time_s"], mfu=r["mfu_percent"]),
                    "assumes": MEGASCALE_ASSUMES,
                },
            },
        )


def _gpt_175b_megascale() -> dict[str, Any]:
    """MegaScale's Table 1 175B model: 96 layers, hidden 12288, 128 heads, vocabulary 64,000."""
    return {
        "name": "gpt-175b-megascale",
        "layers": 96,
        "hidden": 12288,
        "heads": 128,
        "vocab": 64000,
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "max_positions": 2048,
        "tied_embeddings": True,
        "linear_bias": True,
        "dropout": True,
    }


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    megascale()
