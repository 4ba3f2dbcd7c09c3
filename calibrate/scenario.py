"""The scenario (as a dict for :func:`simulator.config.loading.resolve_dict`) that describes the
probe's training job on a calibrated cluster."""

from __future__ import annotations

from typing import Any


def model_spec(cfg: dict) -> dict:
    """The ModelSpec (as a dict) of a probe model configuration: the architecture of
    :class:`calibrate.model.ProbeTransformer` (kept here, free of torch, so that calibrating
    needs no torch)."""
    return {
        "name": "clustersim-probe-transformer",
        "layers": cfg["layers"],
        "hidden": cfg["hidden"],
        "heads": cfg["heads"],
        "vocab": cfg["vocab"],
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "max_positions": cfg["seq"],
        "tied_embeddings": False,
        "linear_bias": False,
    }


def job_scenario(
    profile: str,
    model_cfg: dict[str, Any],
    nproc: int,
    nodes: int = 1,
    network: Any = None,
    overlap: bool = True,
    stragglers: bool = False,
) -> dict[str, Any]:
    """Data-parallel training of the probe transformer in fp32: ``nodes × nproc`` ranks, each
    with a micro-batch of ``model_cfg['batch']`` sequences (one micro-batch per step), gradients
    all-reduced in 25 MB buckets (DDP with its defaults: copied into the buckets and back),
    AdamW (fp32 weights, so no master copy).

    ``overlap``: whether the all-reduce runs alongside backward, as DDP means it to. Where the
    devices are CPU processes that use every core for compute, gloo's reduction and socket
    copies run on those same cores, so nothing overlaps: pass ``False`` (see
    :func:`cpu_comm_overlaps`).

    ``stragglers``: every step waits for the expected slowest rank (``run.stragglers:
    expected``); needs a profile with a measured ``speed_cv``."""
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
            "precision": "fp32",
            "optimizer": {"kind": "adamw", "master_weights_fp32": False},
            "flash_attention": True,
            "grad_reduce_dtype": "fp32",
            "memory_reserve_gb": 0.0,
        },
        "parallelism": {
            "dp": "auto",
            "dp_bucket_mb": 25.0,
            # DDP's default gradient_as_bucket_view=False: gradients copied into the buckets
            # and back (acts only with more than one rank)
            "dp_bucket_copy": True,
            "overlap": {"dp_grad": overlap},
        },
        "run": {"stragglers": "expected" if stragglers else "off"},
    }


def inline_job_scenario(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """The probe job on one placeholder device given inline, for what depends only on the model
    and the training settings (operation shapes and byte counts), not on any profile."""
    fig = {"value": 1.0, "source": "placeholder: only shapes and byte counts are read"}
    sc = job_scenario("inline", model_cfg, 1)
    sc["cluster"] = {
        "gpu": {
            "name": "inline-device",
            "display_name": "inline device",
            "vendor": "other",
            "memory_gb": {"value": 1e4, "source": fig["source"]},
            "memory_bandwidth_gbps": fig,
            "tdp_w": fig,
            "peak_tflops": {"fp32": fig},
            "efficiency": {
                "matmul_max": fig,
                "matmul_half_flops": fig,
                "attention_max": fig,
                "memory_bandwidth": fig,
                "kernel_launch_us": fig,
            },
        },
        "gpus_per_node": 1,
        "nodes": 1,
        "fabric": {
            "name": "inline-fabric",
            "display_name": "inline fabric",
            "technology": "pcie_host",
            "bandwidth_gbps": fig,
            "latency_us": fig,
            "achievable_fraction": fig,
            "max_gpus": 1,
        },
        "storage": {
            "name": "inline-storage",
            "display_name": "inline storage",
            "technology": "local_nvme",
            "read_gbps_per_client": fig,
            "write_gbps_per_client": fig,
            "latency_ms": fig,
        },
    }
    return sc


def cpu_comm_overlaps(device_type: str, world_on_host: int, threads: int, cores: int) -> bool:
    """Can communication run alongside compute? On GPUs, yes (copy engines and NCCL kernels
    beside compute kernels). On CPU processes, only if cores are left over after every
    process's compute threads: gloo reduces and copies on CPU threads."""
    if device_type != "cpu":
        return True
    return world_on_host * threads < cores


def probe_comm_overlaps(probe: dict[str, Any], world_on_host: int) -> bool:
    """:func:`cpu_comm_overlaps` for the probe's training job on its machine, with
    ``world_on_host`` of its processes on one host (a probe file or its calibration sidecar)."""
    tr = probe.get("train") or {}
    return cpu_comm_overlaps(
        str(probe.get("device_type")),
        world_on_host,
        int(tr.get("threads_per_process") or 1),
        int(probe.get("cpu_count") or 1),
    )
