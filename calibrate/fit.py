"""Probe measurements → calibrated hardware profiles (YAML) with provenance.

- Collectives: alpha-beta fits per collective, group and group size, in the simulator's ring
  forms (``t = a(n)·α + b(n)·S·β``; all-reduce a = 2(n-1), b = 2(n-1)/n; all-gather,
  reduce-scatter, all-to-all a = n-1, b = (n-1)/n; broadcast a = n-1, b = 1; send/recv a = b =
  1), by non-negative least squares on the relative error ``(t_model - t_meas) / t_meas`` so
  small and large messages both count. R² (on the times) and the RMS relative error are kept.
- Compute: ``eff(F) = matmul_max · F / (F + matmul_half_flops)`` fitted to the measured matmul
  throughputs relative to a peak. On a CPU there is no datasheet peak: the best measured
  throughput is the peak figure (its source says so) and the efficiency is relative to it.
- Memory bandwidth (large copies), storage throughput, per-op overhead, attention efficiency.

Writes ``NAME`` (gpu), ``NAME-fabric``, ``NAME-network`` (only with inter-node data) and
``NAME-storage`` into ``hardware_profiles/calibrated/``, plus ``NAME.calibration.json`` (the
fits, and the probe's training job that ``clustersim validate`` re-runs).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from simulator.errors import UserError
from simulator.report.files import write_atomic

from .probe import FORMAT, VERSION

COEFFS = {
    "all_reduce": lambda n: (2.0 * (n - 1), 2.0 * (n - 1) / n),
    "all_gather": lambda n: (n - 1.0, (n - 1.0) / n),
    "reduce_scatter": lambda n: (n - 1.0, (n - 1.0) / n),
    "all_to_all": lambda n: (n - 1.0, (n - 1.0) / n),
    "broadcast": lambda n: (n - 1.0, 1.0),
    "p2p": lambda n: (1.0, 1.0),
}


@dataclass
class AlphaBeta:
    op: str
    group: str
    n: int
    alpha_s: float
    beta_s_per_byte: float
    r2: float
    rms_rel_err: float
    points: int
    residuals_rel: list[float] = field(default_factory=list)
    resolved: bool = True
    """False when the bandwidth term was below what the timings resolve and ``beta`` is the
    floor (the bandwidth a lower bound)."""

    @property
    def bandwidth_gbps(self) -> float:
        return 1.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "group": self.group,
            "group_size": self.n,
            "alpha_us": self.alpha_s * 1e6,
            "bandwidth_gbps": self.bandwidth_gbps,
            "r2": self.r2,
            "rms_rel_err": self.rms_rel_err,
            "points": self.points,
            "residuals_rel": self.residuals_rel,
            "bandwidth_resolved": self.resolved,
        }


def _r2(y: np.ndarray, yhat: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot if ss_tot > 0 else 1.0


RESOLUTION = 0.05


def fit_alpha_beta(op: str, n: int, sizes: Any, times: Any, group: str = "intra") -> AlphaBeta:
    """Fit α (s) and β (s/byte) ≥ 0 of ``t = a(n)·α + b(n)·S·β`` to timings over sizes.

    Residuals are log(model/measured): relative, so small and large messages count alike, and
    symmetric, so a model half the measurement weighs as much as one twice it (plain relative
    error caps the first at -1 and lets a single low outlier drag the fit down). A soft-L1 loss
    beyond 20% keeps one spoiled timing on a shared machine from steering the fit."""
    S = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(S) < 2:
        raise ValueError("need at least two message sizes")
    a, b = COEFFS[op](n)
    # Work in µs and s/GB so both unknowns are O(1) for the optimiser.
    A = np.column_stack([a * np.ones_like(S) * 1e-6, b * S * 1e-9]) / t[:, None]
    x0, *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    x0 = np.clip(x0, 1e-6, None)

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(A @ x, 1e-300))

    sol = least_squares(
        resid,
        x0,
        bounds=([0.0, 0.0], [np.inf, np.inf]),
        loss="soft_l1",
        f_scale=0.2,
        x_scale="jac",
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    alpha, beta = sol.x[0] * 1e-6, sol.x[1] * 1e-9
    # The timings cannot show a bandwidth term under RESOLUTION of the largest message's time:
    # below that floor β is unresolved (noise, or messages too small), and the floor, which
    # makes the bandwidth a lower bound, is taken instead of an arbitrarily large 1/β.
    big = int(np.argmax(S))
    beta_floor = RESOLUTION * t[big] / (b * S[big]) if b > 0 else 0.0
    resolved = beta >= beta_floor
    beta = max(beta, beta_floor)
    model = a * alpha + b * S * beta
    rel = (model - t) / t
    return AlphaBeta(
        op,
        group,
        n,
        float(alpha),
        float(beta),
        _r2(t, model),
        float(np.sqrt(np.mean(rel**2))),
        len(S),
        [float(r) for r in rel],
        bool(resolved),
    )


def fit_efficiency(flops: Any, eff: Any) -> tuple[float, float, float]:
    """Fit ``eff(F) = m·F/(F + h)`` (relative error); returns (m, h, R²)."""
    F = np.asarray(flops, dtype=float)
    e = np.asarray(eff, dtype=float)
    scale = float(np.median(F))

    def resid(x: np.ndarray) -> np.ndarray:
        m, h = x
        return (m * F / (F + h * scale) - e) / e

    sol = least_squares(resid, [max(e.max(), 1e-3), 1.0], bounds=([1e-6, 0.0], [10.0, 1e6]))
    m, h = float(sol.x[0]), float(sol.x[1] * scale)
    return m, h, _r2(e, m * F / (F + h))


# -- probe file ------------------------------------------------------------------------------

NEEDED = {
    "matmul": "compute (matmul)",
    "memory": "memory bandwidth",
    "collectives": "collectives",
    "train": "the training step",
}


def unit_seconds(block_times: list[list[float]], reps: int) -> float:
    """Seconds per unit of the speed-variation work: the mean block over ranks, over its reps
    (what validate re-measures to see how the machine drifted since the probe)."""
    return float(np.mean([np.mean(r) for r in block_times])) / reps


def fit_speed_cv(block_times: list[list[float]]) -> tuple[float, int]:
    """Coefficient of variation of per-block time over every rank's blocks together (so it holds
    both a device's step-to-step jitter and the spread between devices), and the block count.

    The spread is the normal-equivalent one from the interquartile range (IQR / 1.349, over the
    median): a shared machine's rare multi-second hiccups would otherwise dominate a plain
    standard deviation of a couple of dozen blocks, and they are not the steady variation the
    straggler model describes."""
    xs = np.asarray([t for rank in block_times for t in rank], dtype=float)
    if xs.size < 2 or not np.all(xs > 0):
        raise ValueError("speed variation needs at least two positive block times")
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    return float((q3 - q1) / 1.349 / med), int(xs.size)


# Which probe measurement times which of the simulator's memory-bound operations (by name), and
# whether the measurement covers the operation's forward and backward together.
JOB_OP_OF = {
    "attn_norm": "layernorm",
    "mlp_norm": "layernorm",
    "final_norm": "layernorm",
    "activation": "gelu",
    "residual_add": "add",
    "cross_entropy": "cross_entropy",
}
FWD_BWD = {"layernorm", "gelu", "cross_entropy"}  # timed forward+backward; "add": one add


def job_memory_fit(probe: dict[str, Any], copy_gbps: float, op_s: float) -> dict[str, Any] | None:
    """Bandwidth fractions from the probe's timings of the training job's own memory-bound
    operations and optimizer step, with bytes counted as the simulator counts them (so the
    simulated time of those operations is the measured one)."""
    jo, tr = probe.get("job_ops"), probe.get("train")
    if not jo or not tr:
        return None
    from simulator.config.loading import resolve_dict
    from simulator.workload.memory import optimizer_bytes_per_param
    from simulator.workload.ops import backward_ops, head_ops, layer_ops

    from .scenario import inline_job_scenario

    rs = resolve_dict(inline_job_scenario(tr["model"]))
    layers = rs.model.layers
    nbytes = 0.0
    secs = 0.0
    used: dict[str, int] = {}
    for reps, fwd in ((layers, layer_ops(rs)), (1, head_ops(rs))):
        for ops in (fwd, backward_ops(fwd)):
            for op in ops:
                if op.kind != "memory":
                    continue
                key = JOB_OP_OF.get(op.name.removesuffix("_bwd"))
                if key is None or key not in jo:
                    continue
                nbytes += reps * op.bytes
                is_bwd = op.name.endswith("_bwd")
                if key in FWD_BWD:
                    # one measurement covers forward and backward: charge it with the forward
                    if is_bwd:
                        continue
                    secs += reps * max(jo[key]["time_s"] - 2 * op_s, 1e-9)
                else:
                    secs += reps * max(jo[key]["time_s"] - op_s, 1e-9)
                used[key] = used.get(key, 0) + reps
    if nbytes <= 0 or secs <= 0:
        return None
    frac = min(1.0, nbytes / secs / (copy_gbps * 1e9))
    out: dict[str, Any] = {
        "memory_fraction": frac,
        "memory_what": (
            "the training job's own memory-bound operations on its shapes ("
            + ", ".join(f"{jo[k]['op']} ×{n}" for k, n in sorted(used.items()))
            + f"): {nbytes / 1e6:.1f} MB as the simulator counts them in {secs * 1e3:.2f} ms "
            f"(less per-op overhead), over copy {copy_gbps:.3g} GB/s"
        ),
    }
    o = jo.get("optimizer")
    if o and o.get("params"):
        ob = o["params"] * optimizer_bytes_per_param(rs)
        out["optimizer_fraction"] = min(1.0, ob / max(o["time_s"] - op_s, 1e-9) / (copy_gbps * 1e9))
        out["optimizer_what"] = (
            f"{o['op']}: {o['time_s'] * 1e3:.2f} ms for {ob / 1e6:.0f} MB counted as the "
            f"simulator counts optimizer traffic (each tensor once), over copy {copy_gbps:.3g} GB/s"
        )
    return out


def simulated_compute_s(gpu: dict[str, Any], model_cfg: dict[str, Any]) -> float:
    """Compute-stream time (compute + optimizer) of one step of the probe job on one device of
    the (not yet written) GPU profile ``gpu``."""
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    from .scenario import inline_job_scenario

    sc = inline_job_scenario(model_cfg)
    sc["cluster"]["gpu"] = gpu
    bd = simulate(resolve_dict(sc), scaling=False).metrics.breakdown_s
    return bd.get("compute", 0.0) + bd.get("optimizer", 0.0)


def in_step_fit(
    gpu: dict[str, Any], train: dict[str, Any] | None
) -> tuple[float, str, float | None] | None:
    """How much slower the job's operations run inside its training step than the fitted
    per-operation figures say: the probe's step without gradient synchronisation (all ranks at
    once), over the simulated compute and optimizer time of the same step; its source; and the
    same for the step run by one process per host, the host's others idle (None if the probe
    did not time that)."""
    if not train or not train.get("compute_step_median_s"):
        return None
    measured = float(train["compute_step_median_s"])
    simulated = simulated_compute_s(gpu, train["model"])
    if simulated <= 0:
        return None
    n = sum(len(r) for r in train.get("compute_step_times_s") or [])
    what = (
        f"median of {n} training steps without communication ("
        + str(train.get("compute_step_how", ""))
        + f"): {measured * 1e3:.1f} ms, over the {simulated * 1e3:.1f} ms of compute and "
        "optimizer that the fitted per-operation figures give for the same step"
    )
    alone = train.get("alone_compute_step_median_s")
    return measured / simulated, what, float(alone) / simulated if alone else None


def load_probe(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    file = str(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise UserError(
            f"cannot read probe file: {exc.strerror}",
            file=file,
            hint="give the JSON file `clustersim probe --out` wrote",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"probe file is not valid JSON ({exc.msg} at line {exc.lineno}); it "
            "looks truncated or damaged",
            file=file,
            hint="re-run `clustersim probe` (it writes atomically, so a probe "
            "that was stopped leaves a valid partial file)",
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UserError(
            f"not a clustersim probe file (format: {got!r}, expected '{FORMAT}')",
            file=file,
            path="format",
            hint="give the JSON file `clustersim probe --out` wrote",
        )
    if data.get("version") != VERSION:
        raise UserError(
            f"probe file version {data.get('version')!r} is not supported "
            f"(this clustersim reads version {VERSION})",
            file=file,
            path="version",
            hint="re-run the probe with this version of clustersim",
        )
    missing = [label for key, label in NEEDED.items() if not data.get(key)]
    coll = [r for r in data.get("collectives") or [] if r.get("group") == "intra"]
    if data.get("collectives") and len({r["bytes"] for r in coll if r["op"] == "all_reduce"}) < 2:
        missing.append("intra-node all-reduce at two or more message sizes")
    if missing:
        why = ""
        if data.get("error"):
            why = f" (the probe stopped: {data['error'].get('message')})"
        elif data.get("world_size", 2) < 2:
            why = " (the probe ran on one process: collectives need --nproc 2 or more)"
        raise UserError(
            f"probe file lacks {', '.join(missing)}{why}",
            file=file,
            hint="re-run `clustersim probe --nproc 2` (or more) to completion",
        )
    return data


# -- profiles ----------------------------------------------------------------------------------


@dataclass
class Calibration:
    name: str
    gpu: dict[str, Any]
    fabric: dict[str, Any]
    network: dict[str, Any] | None
    storage: dict[str, Any]
    sidecar: dict[str, Any]
    fits: list[AlphaBeta]


def _src(probe: dict[str, Any], file: str, what: str) -> str:
    return f"probe {Path(file).name} {probe.get('date', '?')} host {probe.get('host', '?')}: {what}"


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
        "max_gpus": max(cores, ppn) if is_cpu else ppn,
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
    peak_what = (
        f"best measured {train_dtype} matmul throughput over {len(mm)} shapes, "
        f"{threads} thread(s) per process, {ppn} processes at once (a CPU has no "
        "datasheet peak: this measured figure is the peak, efficiencies are relative "
        "to it)"
    )
    peaks: dict[str, Any] = {}
    for d, rs in by_dtype.items():
        peaks[d] = S(
            max(r["tflops"] for r in rs),
            peak_what.replace(train_dtype, d, 1) if d != train_dtype else peak_what,
        )
    att = probe.get("attention") or {}
    att_eff = (att.get("tflops", 0) / best) if att else 0.5
    mem = probe["memory"]
    copies = [r for r in mem if r["kind"] == "copy"]
    bw = max(r["gbps"] for r in copies)
    elem = [r for r in mem if r["kind"] != "copy"]
    elem_bw = max((r["gbps"] for r in elem), default=bw)
    mem_eff = min(1.0, elem_bw / bw)
    mem_what = f"elementwise (GELU + copy) {elem_bw:.3g} GB/s over copy {bw:.3g} GB/s"
    ovh = (probe.get("op_overhead") or {}).get("time_s", 5e-6)
    job = job_memory_fit(probe, bw, ovh)
    if job is not None:
        mem_eff, mem_what = job["memory_fraction"], job["memory_what"]
    mem_bytes = float(probe.get("memory_bytes") or 0)
    gpu_mem = mem_bytes / max(1, ppn) / 1e9 if is_cpu else mem_bytes / 1e9
    device = (probe.get("cpu_model") if is_cpu else (probe.get("devices") or ["?"])[0]) or "?"
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
        "memory_gb": S(
            max(gpu_mem, 0.1),
            f"host memory {mem_bytes / 1e9:.1f} GB (sysconf) split over {ppn} processes"
            if is_cpu
            else "device memory",
        ),
        "memory_bandwidth_gbps": S(
            bw,
            "best large-tensor copy (read + write bytes) over "
            f"{len(copies)} sizes, all processes copying at once",
        ),
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
                max(att_eff, 1e-4),
                "scaled_dot_product_attention (causal) "
                "forward+backward on the training job's shape: "
                f"{att.get('tflops', 0):.4g} "
                "TFLOP/s in the simulator's FLOP convention, over the peak",
            ),
            "memory_bandwidth": S(max(mem_eff, 1e-3), mem_what),
            "kernel_launch_us": S(
                ovh * 1e6, "time of a one-element in-place add (per-op dispatch overhead)"
            ),
        },
    }
    if job is not None and job.get("optimizer_fraction"):
        gpu["efficiency"]["optimizer_bandwidth"] = S(
            job["optimizer_fraction"], job["optimizer_what"]
        )
    step_fit = in_step_fit(gpu, probe.get("train"))
    if step_fit is not None:
        gpu["efficiency"]["in_step_factor"] = S(step_fit[0], step_fit[1])
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
        }
    st = probe.get("storage") or {}
    if st:
        storage = {
            "kind": "storage",
            "name": f"{name}-storage",
            "display_name": f"{name}: storage at {st.get('path')}",
            "technology": "local_nvme",
            "read_gbps_per_client": S(
                st["read_gbps"],
                f"sequential read of {st['bytes']} B after fadvise DONTNEED (page cache may help)",
            ),
            "write_gbps_per_client": S(
                st["write_gbps"], f"sequential write of {st['bytes']} B with fsync"
            ),
            "latency_ms": S(st["first_byte_s"] * 1e3, "first 4 KiB read of the file"),
        }
    else:
        storage = {
            "kind": "storage",
            "name": f"{name}-storage",
            "display_name": f"{name}: storage",
            "technology": "local_nvme",
            "read_gbps_per_client": S(
                1.0, "not measured (probe ran without the storage phase): placeholder"
            ),
            "write_gbps_per_client": S(1.0, "not measured: placeholder"),
            "latency_ms": S(0.1, "not measured: placeholder"),
        }
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
            "in_step_factor": step_fit[0] if step_fit else None,
            # one process per host, the host's others idle (for layouts that leave it so)
            "in_step_factor_alone": step_fit[2] if step_fit else None,
        },
        "profiles": [name, f"{name}-fabric", f"{name}-storage"]
        + ([f"{name}-network"] if network else []),
    }
    return Calibration(name, gpu, fabric, network, storage, sidecar, fits)


def write(cal: Calibration, out_dir: str | Path) -> list[Path]:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for prof in (cal.gpu, cal.fabric, cal.network, cal.storage):
        if prof is None:
            continue
        p = d / f"{prof['name']}.yaml"
        write_atomic(p, yaml.safe_dump(prof, sort_keys=False, width=100, allow_unicode=True))
        written.append(p)
    p = d / f"{cal.name}.calibration.json"
    write_atomic(p, json.dumps(cal.sidecar, indent=1))
    written.append(p)
    return written


def check_name(name: str) -> None:
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise UserError(
            f"profile name '{name}' is not allowed",
            path="--name",
            hint="use lower-case letters, digits, '.', '_' and '-'",
        )


def in_sample(name: str, sidecar: dict[str, Any]) -> dict[str, Any] | None:
    """Simulate the probe's own training job with the new profiles (same layout as the probe
    ran) and compare with the step time the probe measured."""
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    from .scenario import cpu_comm_overlaps, job_scenario

    tr = sidecar.get("train")
    if not tr:
        return None
    from simulator.catalog import _load

    _load.cache_clear()
    nodes = int(tr.get("nodes", 1))
    net = None
    if nodes > 1 and f"{name}-network" not in sidecar["profiles"]:
        return None
    ppn = int(tr["procs_per_node"])
    overlap = cpu_comm_overlaps(
        str(sidecar.get("device_type")),
        ppn * nodes if sidecar.get("hosts") == 1 else ppn,
        int(tr.get("threads_per_process") or 1),
        int(sidecar.get("cpu_count") or 1),
    )
    sc = job_scenario(
        name,
        tr["model"],
        ppn,
        nodes,
        net,
        overlap=overlap,
        stragglers=bool(sidecar.get("speed_variation")),
    )
    rs = resolve_dict(sc)
    pred = simulate(rs, scaling=False).metrics.step_time_s
    meas = tr["step_time_median_s"]
    return {
        "world_size": tr["world_size"],
        "nodes": nodes,
        "measured_s": meas,
        "predicted_s": pred,
        "error_pct": 100.0 * (pred - meas) / meas,
    }
