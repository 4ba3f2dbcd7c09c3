"""Probe measurements → calibrated hardware profiles (YAML) with provenance.

- Collectives: alpha-beta fits per collective, group and group size, in the simulator's ring
  forms (``t = a(n)·α + b(n)·S·β``; all-reduce a = 2(n-1), b = 2(n-1)/n; all-gather,
  reduce-scatter, all-to-all a = n-1, b = (n-1)/n; broadcast a = n-1, b = 1; send/recv a = b =
  1), by non-negative least squares on the relative error ``(t_model - t_meas) / t_meas`` so
  small and large messages both count. R² (on the times) and the RMS relative error are kept.
- Compute: ``eff(F) = matmul_max · F / (F + matmul_half_flops)`` fitted to the measured matmul
  throughputs relative to a peak. On a CPU there is no datasheet peak: the best measured
  throughput is the peak figure (its source says so) and the efficiency is relative to it.
- Memory: bandwidth from large copies; the cache tier and bandwidth fraction from the training
  job's own memory-bound kernels (:mod:`calibrate.memory_fit`); storage throughput, per-op
  overhead, attention efficiency.

Writes ``NAME`` (gpu), ``NAME-fabric``, ``NAME-network`` (only with inter-node data) and
``NAME-storage`` into ``hardware_profiles/calibrated/``, plus ``NAME.calibration.json`` (the
fits, and the probe's training job that ``clustersim validate`` re-runs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.bounds import ATTENTION_MAX
from simulator.errors import UserError

from .fits import (
    COEFFS,
    RESOLUTION,
    AlphaBeta,
    efficiency_quality,
    fit_alpha_beta,
    fit_attention,
    fit_efficiency,
    fit_speed_cv,
    fitted_block,
    unit_seconds,
)
from .memory_fit import memory_figures
from .output import Calibration, check_name, in_sample, write
from .probe_file import load_probe
from .step_fits import (
    in_step_fit,
    job_memory_fit,
    launch_fit,
    simulated_compute_s,
)
from .storage_fit import storage_profile
from .sync_fit import comm_in_step_fit


def _src(probe: dict[str, Any], file: str, what: str) -> str:
    return f"probe {Path(file).name} {probe.get('date', '?')} host {probe.get('host', '?')}: {what}"


# How far the end-of-probe drift reference may differ from the same work timed earlier in the
# probe before calibrate says the machine was not steady (a quiet 2-core VM stays within ~10%).
DRIFT_BASELINE_TOL = 0.15


def device_memory_gb(probe: dict[str, Any], device: str, file: str) -> tuple[float, str]:
    """One device's memory (GB) and where the figure comes from: what the probe read from the
    device, or for a probe file that predates that field the size its device name states
    ("NVIDIA H100 80GB HBM3"); never the host's RAM."""
    got = probe.get("device_memory_bytes")
    if got:
        return float(got) / 1e9, f"device memory {float(got) / 1e9:.2f} GB (torch total_memory)"
    named = re.search(r"(\d+)\s*GB", device)
    if named:
        gb = float(named.group(1))
        return gb, f"{gb:.0f} GB as the device name states ({device}; the probe file predates "
        "device_memory_bytes)"
    raise UserError(
        f"the probe file records no device memory for {device!r}",
        file=file,
        hint="re-run the probe with this version of clustersim (it records "
        "device_memory_bytes), or give the calibrated GPU profile's memory_gb by hand",
    )


def calibrate(probe: dict[str, Any], file: str, name: str) -> Calibration:
    def S(v: float, what: str, note: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"value": float(v), "source": _src(probe, file, what)}
        if note:
            d["note"] = note
        return d

    # collectives
    fits: list[AlphaBeta] = []
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in probe["collectives"]:
        groups.setdefault((r["op"], r["group"], r["group_size"]), []).append(r)
    for (op, group, n), rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["bytes"])
        if len({r["bytes"] for r in rows}) < 2:
            continue
        fits.append(
            fit_alpha_beta(op, n, [r["bytes"] for r in rows], [r["time_s"] for r in rows], group)
        )
    by = {(f.op, f.group): f for f in fits}
    ar = by.get(("all_reduce", "intra"))
    if ar is None or ar.beta_s_per_byte <= 0:
        raise UserError(
            "no usable intra-node all-reduce fit",
            file=file,
            hint="re-run the probe with a larger --max-bytes or --time-budget",
        )
    cores = int(probe.get("cpu_count") or 1)
    ppn = int(probe.get("procs_per_node") or probe.get("world_size") or 1)
    is_cpu = probe.get("device_type", "cpu") == "cpu"
    threads = int(probe.get("threads_per_process") or 1)
    what_ar = (
        f"fit of ring all-reduce t = 2(n-1)α + 2(n-1)/n·S·β over {ar.points} sizes, "
        f"n={ar.n} (R²={ar.r2:.3f}, rms rel err {ar.rms_rel_err:.0%})"
    )
    if not ar.resolved:
        what_ar += (
            f"; the bandwidth term was under {RESOLUTION:.0%} of the largest message's time, "
            "so this is a lower bound (re-probe with a larger --max-bytes to resolve it)"
        )
    fabric = {
        "kind": "fabric",
        "name": f"{name}-fabric",
        "display_name": f"{name}: measured intra-node transport ({probe.get('backend')})",
        "description": f"Calibrated by clustersim from {Path(file).name}: {probe.get('backend')} "
        f"between {ppn} processes on host {probe.get('host')}. Bandwidth and latency are "
        "achieved figures, so achievable_fraction is 1.",
        "technology": "pcie_host",
        "bandwidth_gbps": S(ar.bandwidth_gbps, "1/β of the " + what_ar),
        "latency_us": S(max(ar.alpha_s * 1e6, 1e-3), "α of the " + what_ar),
        "achievable_fraction": S(1.0, "1: the fitted bandwidth is already achieved"),
        "max_gpus": {
            "value": max(cores, ppn) if is_cpu else ppn,
            "source": _src(probe, file, "host's " + ("CPU cores" if is_cpu else "GPU count")),
        },
        "fitted": fitted_block(fits, "intra", lambda what: _src(probe, file, what)),
    }
    network = None
    inter = by.get(("all_reduce", "inter"))
    if inter is not None and inter.beta_s_per_byte > 0:
        sigma = float(np.std(np.log1p(np.asarray(inter.residuals_rel)))) or 0.05
        what_in = (
            f"fit of inter-node ring all-reduce over {inter.points} sizes, n={inter.n} "
            f"(R²={inter.r2:.3f}, rms rel err {inter.rms_rel_err:.0%})"
        )
        network = {
            "kind": "network",
            "name": f"{name}-network",
            "display_name": f"{name}: measured inter-node network ({probe.get('backend')})",
            "technology": "ethernet_tcp",
            "port_gbps": S(inter.bandwidth_gbps * 8, "8·(1/β) of the " + what_in),
            "latency_us": S(max(inter.alpha_s * 1e6, 1e-3), "α of the " + what_in),
            "achievable_fraction": S(1.0, "1: the fitted bandwidth is already achieved"),
            "fitted": fitted_block(fits, "inter", lambda what: _src(probe, file, what)),
            "tail_latency": {
                "distribution": "lognormal",
                "sigma": S(
                    sigma,
                    "spread (std of log) of the measured/fitted time ratios of the " + what_in,
                ),
            },
        }

    # compute
    rows = probe["matmul"]
    by_dtype: dict[str, list[dict]] = {}
    for r in rows:
        by_dtype.setdefault(r["dtype"], []).append(r)
    train_dtype = (probe.get("train") or {}).get("dtype", "fp32")
    mm = by_dtype.get(train_dtype) or next(iter(by_dtype.values()))
    best = max(r["tflops"] for r in mm)
    eff_m, eff_h, eff_r2 = fit_efficiency(
        [r["flops"] for r in mm], [r["tflops"] / best for r in mm]
    )

    def peak_source(dtype: str, shapes: int) -> str:
        return (
            f"best measured {dtype} matmul throughput over {shapes} shapes, "
            f"{threads} thread(s) per process, {ppn} processes at once (a CPU has no "
            "datasheet peak: this measured figure is the peak, efficiencies are relative "
            "to it)"
        )

    peak_what = peak_source(train_dtype, len(mm))
    peaks: dict[str, Any] = {}
    for d, rs in by_dtype.items():
        peaks[d] = S(max(r["tflops"] for r in rs), peak_source(d, len(rs)))
    measured = [r["tflops"] / best for r in mm]
    if eff_m > 1.0:
        # The curve still rises at the largest size probed (or a noisy point sits low): its
        # asymptote is above the best measured throughput. A profile's efficiency is at most 1
        # of its peak, so the asymptote becomes the peak and the same curve is kept.
        best *= eff_m
        measured = [e / eff_m for e in measured]
        peaks[train_dtype] = S(
            best,
            f"asymptote of the fitted matmul curve, {eff_m:.3f} × the " + peak_what,
        )
        eff_m = 1.0
    att = probe.get("attention") or {}
    att_eff = (att.get("tflops", 0) / best) if att else 0.5
    ovh = (probe.get("op_overhead") or {}).get("time_s", 5e-6)
    mf = memory_figures(probe, ovh)
    bw, tier, tier_what, mem_eff, mem_what, job = (
        mf.bandwidth_gbps,
        mf.tier,
        mf.tier_what,
        mf.fraction,
        mf.fraction_what,
        mf.job,
    )
    mem_bytes = float(probe.get("memory_bytes") or 0)
    device = (probe.get("cpu_model") if is_cpu else (probe.get("devices") or ["?"])[0]) or "?"
    if is_cpu:
        if mem_bytes <= 0:  # (sysconf said nothing): a 0.1 GB floor would fit no scenario
            raise UserError(
                "the probe file records no host memory (memory_bytes)",
                file=file,
                path="memory_bytes",
                hint="re-run the probe on a host whose memory size it can read, or give the "
                "calibrated GPU profile's memory_gb by hand",
            )
        gpu_mem = mem_bytes / max(1, ppn) / 1e9
        held_what = f"host memory {mem_bytes / 1e9:.1f} GB (sysconf) split over {ppn} processes"
    else:
        gpu_mem, held_what = device_memory_gb(probe, device, file)
    gpu: dict[str, Any] = {
        "kind": "gpu",
        "name": name,
        "display_name": f"{name}: {device}"
        + (f" ({threads} thread(s) per process)" if is_cpu else ""),
        "description": f"Calibrated by clustersim from {Path(file).name} ({probe.get('date')}, "
        f"host {probe.get('host')}, torch {probe.get('torch')}). "
        + (
            f"A CPU process with {threads} thread(s) stands for one GPU; "
            f"{ppn} processes shared {cores} cores during the probe. "
            if is_cpu
            else ""
        ),
        "vendor": "other" if is_cpu else "nvidia",
        "memory_gb": S(max(gpu_mem, 0.1), held_what),
        "memory_bandwidth_gbps": S(bw, mf.bandwidth_what),
        "tdp_w": S(0.0, "not measured by the probe (power unknown; 0 = unknown)"),
        "peak_tflops": peaks,
        "efficiency": {
            "matmul_max": S(
                eff_m,
                f"fit of eff(F)=max·F/(F+half) to {len(mm)} {train_dtype} "
                f"matmul throughputs relative to the peak (R²={eff_r2:.3f})",
            ),
            "matmul_half_flops": S(
                eff_h,
                f"fit of eff(F)=max·F/(F+half) to {len(mm)} "
                f"{train_dtype} matmul throughputs (R²={eff_r2:.3f})",
            ),
            "attention_max": S(
                min(ATTENTION_MAX, max(att_eff, 1e-4)),
                "scaled_dot_product_attention (causal) "
                "forward+backward on the training job's shape: "
                f"{att.get('tflops', 0):.4g} "
                "TFLOP/s in the simulator's FLOP convention, over the peak"
                + (" (held at 12/7)" if att_eff > ATTENTION_MAX else "")
                if att
                else "estimate: not measured (the probe ran without its attention phase); "
                "half the matmul peak, as a fused attention kernel reaches on long sequences",
            ),
            "memory_bandwidth": S(max(mem_eff, 1e-3), mem_what),
            "kernel_launch_us": S(*launch_fit(probe, ovh)),
        },
    }
    if tier:
        gpu["cache_mb"] = S(tier["cache_mb"], tier_what)
        gpu["cache_bandwidth_gbps"] = S(tier["cache_gbps"], tier_what)
    curve = fit_attention(probe.get("attention_curve") or [], best)
    if curve is not None:
        gpu["efficiency"]["attention_max"] = S(curve["max"], curve["what"])
        gpu["efficiency"]["attention_half_seq"] = S(curve["half_seq"], curve["what"])
    if job is not None and job.get("optimizer_fraction"):
        gpu["efficiency"]["optimizer_bandwidth"] = S(
            job["optimizer_fraction"], job["optimizer_what"]
        )
    if job is not None and job.get("optimizer_us_per_tensor"):
        gpu["efficiency"]["optimizer_us_per_tensor"] = S(
            job["optimizer_us_per_tensor"], job["optimizer_tensor_what"]
        )
    step_fit = in_step_fit(gpu, probe.get("train"))
    if step_fit is not None:
        gpu["efficiency"]["in_step_factor"] = S(step_fit.factor, step_fit.what)
        if step_fit.weight_fraction is not None:
            gpu["efficiency"]["gemm_weight_bandwidth"] = S(
                step_fit.weight_fraction, step_fit.weight_what
            )
    sv = probe.get("speed_variation") or {}
    speed: dict[str, Any] | None = None
    if sv.get("block_times_s"):
        cv, nblocks = fit_speed_cv(sv["block_times_s"])
        per_rank = [float(np.mean(r)) for r in sv["block_times_s"]]
        gpu["speed_cv"] = S(
            cv,
            f"IQR/1.349 over the median of {nblocks} block times "
            f"({len(per_rank)} processes at once, each block "
            f"{sv.get('work')}, about {sv.get('block_target_s', 0) * 1e3:.0f} ms)",
        )
        speed = {
            "cv": cv,
            "blocks": nblocks,
            "mean_block_s_per_rank": per_rank,
            "work": sv.get("work"),
            "unit_s": unit_seconds(sv["block_times_s"], int(sv["reps"]))
            if sv.get("reps")
            else None,
            "procs": len(per_rank),
            "reps": int(sv["reps"]) if sv.get("reps") else None,
            "shape": sv.get("shape"),
            # local rank 0 alone on its host (the others waiting): the one-process reference
            "alone_unit_s": unit_seconds([sv["alone_block_times_s"]], int(sv["reps"]))
            if sv.get("alone_block_times_s") and sv.get("reps")
            else None,
        }
    chk = probe.get("train_speed_check") or {}
    if speed is not None and chk.get("block_times_s"):
        # validate's drift reference: the same check, made as the in-step factor was measured
        speed["check_unit_s"] = unit_seconds(chk["block_times_s"], int(chk["reps"]))
        if chk.get("alone_block_times_s"):
            speed["check_alone_unit_s"] = unit_seconds(
                [chk["alone_block_times_s"]], int(chk["reps"])
            )
        unit, check = speed.get("unit_s"), speed["check_unit_s"]
        if unit and check and abs(check / unit - 1.0) > DRIFT_BASELINE_TOL:
            speed["note"] = (
                f"the probe's drift reference ran {100 * (check / unit - 1):+.0f}% against the "
                "same work earlier in the probe: the machine's speed moved during the probe, so "
                "validate's drift correction may over- or under-correct; re-probe on a quieter "
                "machine"
            )
    comm = comm_in_step_fit(gpu, fabric, probe)
    if comm is not None:
        fabric["achievable_fraction"] = S(*comm)
        fabric["description"] = str(fabric["description"]).replace(
            "so achievable_fraction is 1.",
            "scaled inside a training step by achievable_fraction (see its source).",
        )
    storage = storage_profile(S, probe.get("storage") or {}, name)
    sidecar = {
        "format": "clustersim-calibration",
        "version": 1,
        "name": name,
        "probe_file": str(file),
        "probe_date": probe.get("date"),
        "host": probe.get("host"),
        "device_type": probe.get("device_type"),
        "cpu_count": cores,
        "threads_per_process": threads,
        "procs_per_node": ppn,
        "hosts": probe.get("hosts"),
        "world_size": probe.get("world_size"),
        "train": probe.get("train"),
        "fits": [f.as_dict() for f in fits],
        "speed_variation": speed,
        "compute_fit": {
            "dtype": train_dtype,
            "peak_tflops": best,
            "matmul_max": eff_m,
            "matmul_half_flops": eff_h,
            "r2": eff_r2,
            **efficiency_quality([r["flops"] for r in mm], measured, eff_m, eff_h, eff_r2),
            "in_step_factor": step_fit.factor if step_fit else None,
            # one process per host, the host's others idle (for layouts that leave it so)
            "in_step_factor_alone": step_fit.alone if step_fit else None,
            "gemm_weight_bandwidth": step_fit.weight_fraction if step_fit else None,
        },
        "attention_fit": curve,
        "profiles": [name, f"{name}-fabric", f"{name}-storage"]
        + ([f"{name}-network"] if network else []),
    }
    return Calibration(name, gpu, fabric, network, storage, sidecar, fits)


__all__ = [
    "COEFFS",
    "RESOLUTION",
    "AlphaBeta",
    "Calibration",
    "calibrate",
    "check_name",
    "fit_alpha_beta",
    "fit_efficiency",
    "fit_speed_cv",
    "in_sample",
    "in_step_fit",
    "job_memory_fit",
    "load_probe",
    "simulated_compute_s",
    "unit_seconds",
    "write",
]
