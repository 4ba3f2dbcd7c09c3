"""Writes one scenario per published row under ``scenarios/validation/`` (run once; the files
are committed). Each scenario says what its source states (``reference``) and what it assumes
(micro-batch, schedule, software stack, network) that the source does not.

Sets: Megatron-LM SC21 Table 1 (1F1B and interleaved at micro-batch 1, and as its reproduction
script runs it), Korthikanti et al. 2022 Table 5,
llm-foundry MPT benchmarks (PyTorch FSDP, bf16, models of 1B and more, H100 and A100 80GB),
nccl-tests all-reduce bus bandwidth curves. The llm-foundry rows are written by
``make_validation_llmfoundry.py``, which this script runs too.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1] / "scenarios" / "validation"
PUB = ROOT / "published"

SELENE: dict[str, Any] = {
    "gpu": "a100-sxm4-80gb",
    "gpus_per_node": 8,
    "fabric": "nvlink3-nvswitch",
    "network": {
        "profile": "ib-hdr-200",
        "nics_per_node": 8,
        "topology": {"kind": "fat_tree", "oversubscription": 1.0},
    },
}
SC21_SRC = (
    "Narayanan et al., SC21, Table 1 (scenarios/validation/published/megatron_sc21_table1.csv): "
    "{v} TFLOP/s per GPU (hardware FLOPs, full recomputation) on Selene, DGX A100 80GB"
)
K22_SRC = (
    "Korthikanti et al. 2022 (arXiv 2205.05198), Table 5 "
    "(scenarios/validation/published/korthikanti2022_table5.csv): {v} s per iteration on Selene"
)


def write_scenario(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=100))


def megatron_model(name: str, layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return {
        "name": name,
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "vocab": 51200,
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "max_positions": 2048,
        "tied_embeddings": True,
        "linear_bias": True,
        "dropout": True,
    }


def selene_megatron_2021(
    name: str,
    gpus: int,
    model: dict[str, Any],
    batch: int,
    micro_batch: int,
    parallelism: dict[str, Any],
    tflops: str,
    source: str,
    assumes: str,
) -> dict[str, Any]:
    """A Megatron-LM 2021 run on Selene (fp16, no flash attention) reproducing a published
    hardware TFLOP/s per GPU: the scenario file's contents."""
    return {
        "name": name,
        "cluster": {**SELENE, "nodes": gpus // 8},
        "model": model,
        "training": {
            "seq_len": 2048,
            "global_batch": batch,
            "micro_batch": micro_batch,
            "precision": "fp16",
            "flash_attention": False,
            # Megatron-LM 2021 --accumulate-allreduce-grads-in-fp32 defaults to off (needed for
            # bf16 only): fp16 runs all-reduce fp16 gradients.
            "grad_reduce_dtype": "bf16",
        },
        "parallelism": parallelism,
        "software": "megatron-lm-2021",
        "reference": {
            "metric": "hardware_tflops_per_gpu",
            "value": float(tflops),
            "source": source,
            "assumes": assumes,
        },
    }


def sc21() -> None:
    rows = list(csv.DictReader((PUB / "megatron_sc21_table1.csv").open()))
    for sched in ("1f1b", "interleaved"):
        for r in rows:
            layers, tp, pp = (
                int(r["layers"]),
                int(r["tensor_parallel"]),
                int(r["pipeline_parallel"]),
            )
            gpus = int(r["gpus"])
            if sched == "interleaved" and pp == 1:
                continue  # no pipeline: the schedule does not apply
            per_stage = layers // pp
            v = 2 if per_stage % 2 == 0 else 3
            schedule: dict[str, Any] = {"kind": "1f1b"}
            assumes = "micro-batch 1, 1F1B schedule"
            if sched == "interleaved":
                schedule = {"kind": "interleaved", "virtual_stages": v}
                assumes = f"micro-batch 1, interleaved schedule with {v} model chunks per stage"
            name = f"sc21-{r['params_billion']}b-{sched}"
            write_scenario(
                ROOT / f"sc21-{sched}" / f"{name}.yaml",
                selene_megatron_2021(
                    name,
                    gpus,
                    megatron_model(name, layers, int(r["hidden_size"]), int(r["attention_heads"])),
                    int(r["global_batch_size"]),
                    1,
                    {"tp": tp, "pp": pp, "pp_schedule": schedule, "recompute": "full"},
                    r["tflops_per_gpu"],
                    SC21_SRC.format(v=r["tflops_per_gpu"]),
                    assumes + "; eight HDR 200 Gb/s NICs per node, non-blocking fat tree; "
                    "Megatron-LM 2021 software stack; fp16 gradients all-reduced in fp16 "
                    "(--accumulate-allreduce-grads-in-fp32 off)",
                ),
            )


# NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (the paper's reproduction script for Table 1):
# per row, the micro-batch size, the DDP implementation and the layers per virtual pipeline
# stage (interleaved schedule; None: 1F1B).
SC21_SCRIPT: dict[str, tuple[int, str, int | None]] = {
    "1.7": (16, "torch", None),
    "3.6": (16, "torch", None),
    "7.5": (16, "torch", None),
    "18.4": (8, "torch", None),
    "39.1": (4, "local", None),
    "76.1": (2, "local", 5),
    "145.6": (2, "local", 5),
    "310.1": (1, "local", 3),
    "529.6": (1, "local", 1),
    "1008.0": (1, "local", None),
}
SC21_SCRIPT_SRC = (
    "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (the SC21 paper's reproduction script, "
    "@79a3bb6b): MBS={mbs}, DDP={ddp}{vp}, --recompute-method uniform"
)


def sc21_script() -> None:
    """SC21 Table 1 as its reproduction script runs it: the script's micro-batch size, DDP
    implementation (PyTorch DDP overlaps 25 MB buckets with backward; Megatron's local DDP
    all-reduces the whole buffer after it) and interleaved schedule where it sets one."""
    for r in csv.DictReader((PUB / "megatron_sc21_table1.csv").open()):
        mbs, ddp, per_chunk = SC21_SCRIPT[r["params_billion"]]
        layers, tp, pp = int(r["layers"]), int(r["tensor_parallel"]), int(r["pipeline_parallel"])
        schedule: dict[str, Any] = {"kind": "1f1b"}
        vp = ""
        if per_chunk is not None:
            assert layers % (pp * per_chunk) == 0, r["params_billion"]
            schedule = {"kind": "interleaved", "virtual_stages": layers // pp // per_chunk}
            vp = f", --num-layers-per-virtual-pipeline-stage {per_chunk}"
        par: dict[str, Any] = {"tp": tp, "pp": pp, "pp_schedule": schedule, "recompute": "full"}
        if ddp == "torch":
            # torch.nn.parallel.DistributedDataParallel: backward hooks all-reduce 25 MB
            # buckets (bucket_cap_mb default) while the backward pass runs; Megatron-LM 2021
            # builds it without gradient_as_bucket_view, so gradients are copied into the
            # buckets and back (megatron/training.py, torchDDP(model, device_ids=..., ...)).
            par["overlap"] = {"dp_grad": True}
            par["dp_bucket_mb"] = 25
            par["dp_bucket_copy"] = True
        name = f"sc21-{r['params_billion']}b-script"
        write_scenario(
            ROOT / "sc21-script" / f"{name}.yaml",
            selene_megatron_2021(
                name,
                int(r["gpus"]),
                megatron_model(name, layers, int(r["hidden_size"]), int(r["attention_heads"])),
                int(r["global_batch_size"]),
                mbs,
                par,
                r["tflops_per_gpu"],
                SC21_SRC.format(v=r["tflops_per_gpu"]),
                SC21_SCRIPT_SRC.format(mbs=mbs, ddp=ddp, vp=vp)
                + "; eight HDR 200 Gb/s NICs per node, non-blocking fat tree; Megatron-LM "
                "2021 software stack; fp16 gradients all-reduced in fp16",
            ),
        )


def korthikanti() -> None:
    for r in csv.DictReader((PUB / "korthikanti2022_table5.csv").open()):
        tp, pp, v = int(r["tensor_parallel"]), int(r["pipeline_parallel"]), int(r["virtual_stages"])
        sel = r["recompute"] == "selective"
        name = f"k22-{r['model'].lower()}-{r['recompute']}"
        schedule: dict[str, Any] = (
            {"kind": "interleaved", "virtual_stages": v} if v > 1 else {"kind": "1f1b"}
        )
        gpus = int(r["gpus"])
        write_scenario(
            ROOT / "korthikanti-table5" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {**SELENE, "nodes": gpus // 8},
                "model": megatron_model(
                    name, int(r["layers"]), int(r["hidden_size"]), int(r["attention_heads"])
                ),
                "training": {
                    "seq_len": 2048,
                    "global_batch": int(r["global_batch_size"]),
                    "micro_batch": int(r["micro_batch_size"]),
                    "precision": "fp16",
                    "flash_attention": False,
                    "grad_reduce_dtype": "bf16",  # 16-bit, as above (DP is 1 here anyway)
                },
                "parallelism": {
                    "tp": tp,
                    "pp": pp,
                    "sequence_parallel": sel,
                    "pp_schedule": schedule,
                    "recompute": r["recompute"],
                },
                "software": "megatron-lm-2022",
                "reference": {
                    "metric": "step_time_s",
                    "value": float(r["iteration_time_s"]),
                    "source": K22_SRC.format(v=r["iteration_time_s"]),
                    "assumes": "layout columns as Calculon encodes the paper's configuration "
                    "table; eight HDR NICs per node; Megatron-LM 2022 software stack (the "
                    "paper's code: asynchronous TP backward, Sec. 4.2.2)",
                },
            },
        )


NCCL = [  # file, gpu, fabric, nodes, network, source
    ("published/nccl_allreduce_8xA100_nvlink.csv", "a100-sxm4-80gb", "nvlink3-nvswitch", 1,
     None, "Azure ND A100 v4 nccl-tests all_reduce_perf (shared validation set)"),
    ("nccl/allreduce_8xh100_nvlink_nvidia_dgxc.csv", "h100-sxm-80gb", "nvlink4-nvswitch", 1,
     None, "NVIDIA/dgxc-benchmarking nccl/README.md, DGX H100 all_reduce_perf"),
    ("nccl/allreduce_8xh100_nvlink_azure_ndh100v5.csv", "h100-sxm-80gb", "nvlink4-nvswitch", 1,
     None, "Azure/AI-benchmarking-guide ND H100 v5 all_reduce_perf (in-place)"),
    ("nccl/allreduce_2x8xh100_ib_ndr_nccltests309.csv", "h100-sxm-80gb", "nvlink4-nvswitch", 2,
     "ib-ndr-400", "NVIDIA/nccl-tests issue 309, 2 nodes x 8 H100, 8x CX-7 NDR"),
    ("nccl/allreduce_4x8xh100_ib_ndr_nccltests309.csv", "h100-sxm-80gb", "nvlink4-nvswitch", 4,
     "ib-ndr-400", "NVIDIA/nccl-tests issue 309, 4 nodes x 8 H100, 8x CX-7 NDR"),
    ("nccl/allreduce_8x8xh100_ib_ndr_nccltests309.csv", "h100-sxm-80gb", "nvlink4-nvswitch", 8,
     "ib-ndr-400", "NVIDIA/nccl-tests issue 309, 8 nodes x 8 H100, IB 400G"),
]  # fmt: skip


def nccl() -> None:
    for file, gpu, fabric, nodes, net, src in NCCL:
        name = "nccl-" + Path(file).stem.replace("_", "-").lower()
        cluster: dict[str, Any] = {
            "gpu": gpu,
            "gpus_per_node": 8,
            "nodes": nodes,
            "fabric": fabric,
        }
        if net:
            cluster["network"] = {"profile": net, "nics_per_node": 8}
        write_scenario(
            ROOT / "nccl-tests" / f"{name}.yaml",
            {
                "name": name,
                "cluster": cluster,
                "model": "llama3-8b",
                "training": {"seq_len": 2048, "global_batch": 8 * nodes},
                "reference": {
                    "metric": "busbw_gbps",
                    "curve": f"../{file}",
                    "collective": "all_reduce",
                    "source": src + f" ({file})",
                    "assumes": "one communicator over every GPU; the model and batch are unused",
                },
            },
        )


if __name__ == "__main__":
    from make_validation_llmfoundry import llmfoundry

    sc21()
    sc21_script()
    korthikanti()
    llmfoundry()
    nccl()
