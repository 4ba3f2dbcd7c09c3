"""Per-layer accuracy sets: one transformer layer's forward and backward time against the
per-layer programs the engine runs (``Simulation.p_fwd`` and ``p_bwd``), for
``benchmarks/accuracy.py``: the H100 device run of 2026-11-23 in eager PyTorch, Korthikanti et
al. 2022's Table 4, and a BERT-large layer in eager PyTorch on a V100 (held out)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from simulator.config.loading import load_scenario

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "scenarios" / "validation"
KERNELS = ROOT / "benchmarks" / "results" / "h100-kernels-2026-11-23.json"
TABLE4 = VALIDATION / "published" / "korthikanti2022_table4.csv"
SUBSTATION = VALIDATION / "published" / "substation_v100_bert_layer.csv"


def layer_rows() -> list[dict[str, Any]]:
    """One transformer layer's forward+backward in eager PyTorch on the H100 of the 2026-11-23
    device run (benchmarks/gpu_kernels.py), against the per-layer programs the engine runs."""

    out = []
    for r in json.loads(KERNELS.read_text())["layers"]:
        sc = {
            "name": f"h100-layer-h{r['hidden']}-s{r['seq']}-b{r['batch']}-{r['mode']}",
            "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 1, "fabric": "nvlink4-nvswitch"},
            "model": {
                "layers": 1,
                "hidden": r["hidden"],
                "heads": r["heads"],
                "vocab": 4096,
                "mlp": "gelu",
                "norm": "layernorm",
                "position": "learned",
                "max_positions": r["seq"],
            },
            "training": {
                "seq_len": r["seq"],
                "global_batch": r["batch"],
                "micro_batch": r["batch"],
                "param_gather_dtype": "fp32" if r["mode"] == "autocast" else "bf16",
            },
            "software": "pytorch-eager",  # the device run's torch 2.11
        }
        out.append(_layer_row(sc, r["fwd_bwd_s"]))
    return out


def _layer_row(sc: dict[str, Any], published_s: float) -> dict[str, Any]:
    """A one-layer scenario's forward+backward, as the engine's per-layer programs time it,
    against a published time."""
    from simulator.config.loading import resolve_dict
    from simulator.engine.sim import Simulation

    sim = Simulation(resolve_dict(sc))
    pred = sim.p_fwd.duration + sim.p_bwd.duration
    return {
        "row": sc["name"],
        "metric": "layer_fwd_bwd_s",
        "published": published_s,
        "predicted": pred,
        "error": pred / published_s - 1.0,
        "breakdown": {},
    }


def table4_rows(overrides: list[str] | None = None) -> list[dict[str, Any]]:
    """Korthikanti et al. 2022 (arXiv 2205.05198) Table 4: one transformer layer of their 22B
    model (Table 3: 8 A100, TP 8, micro-batch 4, sequence 2048) forward and backward, per
    technique, against the per-layer programs the engine runs for the Table 5 22B scenario."""
    from simulator.engine.sim import Simulation

    base = load_scenario(VALIDATION / "korthikanti-table5" / "k22-22b-full.yaml", overrides)
    out = []
    with TABLE4.open() as f:
        for r in csv.DictReader(f):
            par = base.parallelism.model_copy(
                update={
                    "recompute": r["recompute"],
                    "sequence_parallel": r["sequence_parallel"] == "true",
                }
            )
            sim = Simulation(base.model_copy(update={"parallelism": par}))
            fwd, bwd = sim.p_fwd.duration, sim.p_bwd.duration
            pub = float(r["combined_ms"]) * 1e-3
            out.append(
                {
                    "row": "k22-22b-layer " + r["experiment"],
                    "metric": "layer_fwd_bwd_s",
                    "published": pub,
                    "predicted": fwd + bwd,
                    "error": (fwd + bwd) / pub - 1.0,
                    "breakdown": {
                        "fwd_err": fwd / (float(r["forward_ms"]) * 1e-3) - 1.0,
                        "bwd_err": bwd / (float(r["backward_ms"]) * 1e-3) - 1.0,
                    },
                }
            )
    return out


def v100_layer_rows() -> list[dict[str, Any]]:
    """One BERT-large encoder layer's forward+backward in eager PyTorch on a V100 SXM2
    (spcl/substation README, Ivanov et al. 2021; scenarios/validation/published/
    substation_SOURCE.md), against the per-layer programs the engine runs."""

    out = []
    with SUBSTATION.open() as f:
        for r in csv.DictReader(f):
            b, s = int(r["batch"]), int(r["seq"])
            sc = {
                "name": f"v100-bert-large-layer-b{b}-s{s}",
                "cluster": {
                    "gpu": "v100-sxm2-32gb",
                    "gpus_per_node": 1,
                    "fabric": "nvlink2-nvswitch",
                },
                "model": {
                    "layers": 1,
                    "hidden": int(r["hidden"]),
                    "heads": int(r["heads"]),
                    "ffn_hidden": int(r["ffn"]),
                    "vocab": 4096,
                    "mlp": "gelu",
                    "norm": "layernorm",
                    "position": "learned",
                    "max_positions": s,
                    "linear_bias": True,
                    "dropout": True,
                },
                "training": {
                    "seq_len": s,
                    "global_batch": b,
                    "micro_batch": b,
                    "precision": "fp16",
                    "flash_attention": False,
                },
                "software": "pytorch-eager",
            }
            out.append(_layer_row(sc, float(r["fwd_bwd_ms"]) * 1e-3))
    return out


__all__ = ["layer_rows", "table4_rows", "v100_layer_rows"]
