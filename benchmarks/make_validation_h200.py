"""Writes the held-out ``torchtitan-h200`` validation set under ``scenarios/validation/`` (run
once; the files are committed): torchtitan's Llama 3.1 8B runs on 32 and 64 H200 (Trainy and
WhiteFiber, June 2025), the first H200 rows. Never used to set a profile value.
"""

from __future__ import annotations

from pathlib import Path

from make_validation import ROOT, write_scenario

SRC = (
    "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md @bcdeaa37 (also "
    "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md @1af29373), Llama 3.1 8B, NUM_NODES "
    "{nodes}: {tps} TPS/GPU, {mem} GiB; torch 2.8.0a0+5228986c39, torchao 0afa4c1, torchtitan "
    "e7c0cae; command: --training.local_batch_size=2 --training.compile "
    '--model.converters="float8" --float8.enable_fsdp_float8_all_gather '
    "--float8.precompute_float8_dynamic_scale_for_fsdp "
    "--float8.force_recompute_fp8_weight_in_bwd with llama3_8b.toml"
)
ASSUMES = (
    "8 H200 SXM per node on NVLink, one 400 Gb/s CX-7 per GPU (the file's hardware section) as "
    "InfiniBand NDR on a non-blocking fat tree (the fabric is not named); llama3_8b.toml (read "
    "at torchtitan 01424cb, not at e7c0cae): sequence 8192, FSDP2 over every GPU, selective op "
    "activation checkpointing; global batch = local batch 2 x GPUs; Float8 = fp8 GEMMs "
    "(torchao tensorwise; its fp8 all-gather is not modelled); torch.compile = torchtitan "
    "stack; fp32 reduce-scatter (torchtitan default); the GPUs at their 700 W TDP"
)
MEM_SRC = (
    "same file, column Memory(GiB): {mem} GiB; torchtitan logs the peak reservation of the "
    "caching allocator (train.py: memory: {{device_mem_stats.max_reserved_gib:5.2f}}GiB)"
)
ROWS = ((4, 10938, 47.96), (8, 10753, 46.97))  # nodes, TPS/GPU, Memory(GiB)


def torchtitan_h200() -> None:
    for nodes, tps, mem in ROWS:
        gpus = 8 * nodes
        name = f"tt-llama31-8b-{gpus}xh200-fsdp-compile-fp8"
        write_scenario(
            ROOT / "torchtitan-h200" / f"{name}.yaml",
            {
                "name": name,
                "cluster": {
                    "gpu": "h200-sxm-141gb",
                    "gpus_per_node": 8,
                    "fabric": "nvlink4-nvswitch",
                    "network": {
                        "profile": "ib-ndr-400",
                        "nics_per_node": 8,
                        "topology": {"kind": "fat_tree"},
                    },
                    "nodes": nodes,
                },
                "model": "llama3-8b",
                "training": {
                    "seq_len": 8192,
                    "global_batch": 2 * gpus,
                    "micro_batch": 2,
                    "precision": "fp8",
                    "flash_attention": True,
                    "grad_reduce_dtype": "fp32",
                },
                "parallelism": {
                    "sharding": {"kind": "fsdp", "strategy": "full_shard"},
                    "recompute": "selective",
                },
                "software": "torchtitan",
                "reference": {
                    "metric": "tokens_per_s_per_gpu",
                    "value": float(tps),
                    "source": SRC.format(nodes=nodes, tps=tps, mem=mem),
                    "assumes": ASSUMES,
                    "memory": {
                        "value": mem,
                        "unit": "GiB",
                        "measures": "reserved",
                        "source": MEM_SRC.format(mem=mem),
                    },
                },
            },
        )


if __name__ == "__main__":
    Path(ROOT).mkdir(parents=True, exist_ok=True)
    torchtitan_h200()
