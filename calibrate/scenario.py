"""The scenario (as a dict for :func:`simulator.config.loading.resolve_dict`) that describes the
probe's training job on a calibrated cluster."""

from __future__ import annotations

from typing import Any

from .model import model_spec


def job_scenario(
    profile: str, model_cfg: dict[str, Any], nproc: int, nodes: int = 1, network: Any = None
) -> dict[str, Any]:
    """Data-parallel training of the probe transformer: ``nodes × nproc`` ranks, each with a
    micro-batch of ``model_cfg['batch']`` sequences (one micro-batch per step), fp32 gradients
    all-reduced in 25 MB buckets overlapped with backward (DDP), AdamW without master weights.

    The job trains in fp32; the schema's precision is bf16/fp16/fp8 only, so it is declared
    ``bf16`` and the calibrated GPU profile's ``bf16`` peak holds the measured fp32 figure."""
    cluster: dict[str, Any] = {
        "gpu": profile,
        "gpus_per_node": nproc,
        "nodes": nodes,
        "fabric": f"{profile}-fabric",
        "storage": f"{profile}-storage",
    }
    if nodes > 1:
        cluster["network"] = {
            "profile": network or f"{profile}-network",
            "nics_per_node": nproc,
            "topology": {"kind": "single_switch"},
        }
    world = nproc * nodes
    return {
        "name": f"{profile}-probe-job-{nodes}x{nproc}",
        "cluster": cluster,
        "model": model_spec(model_cfg),
        "training": {
            "seq_len": model_cfg["seq"],
            "global_batch": model_cfg["batch"] * world,
            "micro_batch": model_cfg["batch"],
            "precision": "bf16",
            "optimizer": {"kind": "adamw", "master_weights_fp32": False},
            "flash_attention": True,
            "grad_reduce_dtype": "fp32",
            "memory_reserve_gb": 0.0,
        },
        "parallelism": {"dp": "auto", "dp_bucket_mb": 25.0},
    }
