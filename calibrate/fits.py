"""The numeric fits behind calibration: alpha-beta collective fits in the simulator's ring forms
(with the bandwidth floored where the timings cannot resolve it), the GEMM efficiency curve and
how far to trust it, and the speed variation across devices. Each takes plain measurements and
returns figures with their goodness of fit. The fits that compare the probe's training job with
the simulator's own view of it are in :mod:`calibrate.step_fits`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from simulator.config.bounds import ATTENTION_MAX

COEFFS = {
    "all_reduce": lambda n: (2.0 * (n - 1), 2.0 * (n - 1) / n),
    "all_gather": lambda n: (n - 1.0, (n - 1.0) / n),
    "reduce_scatter": lambda n: (n - 1.0, (n - 1.0) / n),
    "all_to_all": lambda n: (n - 1.0, (n - 1.0) / n),
    "broadcast": lambda n: (n - 1.0, 1.0),
    "p2p": lambda n: (1.0, 1.0),
}


# A fit whose timings sit, rms, more than this far from it (relative) is flagged whatever its R².
SCATTER_LIMIT = 0.5


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

    @property
    def note(self) -> str | None:
        """Why the fit is not to be trusted, and what to run, when R² < 0.9 or the timings
        scatter by more than half about it (R² on the times can stay high where the largest
        sizes fit and the small ones are off by 2x) (else None)."""
        if self.r2 >= 0.9 and self.rms_rel_err <= SCATTER_LIMIT:
            return None
        if self.r2 >= 0.9:  # the largest sizes fit; the rest scatter
            return (
                f"R²={self.r2:.2f}, but timings scatter {self.rms_rel_err:.0%} rms about the "
                "fit (a busy or shared machine, or too few iterations per size); re-probe on "
                "a quiet one, or with a longer --time-budget"
            )
        if self.points < 5:
            return (
                f"R²={self.r2:.2f} from {self.points} sizes: too few; re-probe with a larger "
                "--max-bytes or --time-budget"
            )
        if not self.resolved:
            return (
                f"R²={self.r2:.2f}: latency-dominated (the bandwidth term is below what the "
                "timings resolve); re-probe with a larger --max-bytes"
            )
        return (
            f"R²={self.r2:.2f}, timings scatter {self.rms_rel_err:.0%} rms about the fit "
            "(a busy or shared machine); re-probe on a quiet one, or with a longer "
            "--time-budget (more iterations per size)"
        )

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
            "note": self.note,
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
    if h < 1.0:  # the optimiser's stand-in for "no ramp at all": below one FLOP means none
        h = 0.0
    return m, h, _r2(e, m * F / (F + h))


def fit_attention(rows: list[dict[str, Any]], peak_tflops: float) -> dict[str, Any] | None:
    """The fused attention kernel's efficiency against the keys each query visits,
    ``eff(s) = max·s/(s + half)``, from the probe's timings at several sequence lengths
    (``attention_curve``). None (one figure, the job's shape, then describes it) with fewer
    than three lengths, where efficiency does not rise with length, where the curve does not
    describe the timings (R² under 0.8), where its asymptote is above the peak, or where it is
    still far from it at the longest length probed (half beyond four times that length): an
    extrapolation the timings do not support."""
    if peak_tflops <= 0:
        return None
    pts = sorted((int(r["seq"]), float(r["tflops"]) / peak_tflops) for r in rows if r["tflops"])
    if len({p[0] for p in pts}) < 3:
        return None
    seqs = np.array([p[0] for p in pts], dtype=float)
    effs = np.array([p[1] for p in pts], dtype=float)
    m, half, r2 = fit_efficiency(seqs, effs)
    if half <= 0.0 or r2 < 0.8 or m > ATTENTION_MAX or half > 4.0 * seqs[-1]:
        return None
    rms = efficiency_quality(seqs, effs, m, half, r2)["rms_rel_err"]
    return {
        "max": m,
        "half_seq": half,
        "r2": r2,
        "rms_rel_err": rms,
        "what": (
            f"fit of eff(s)=max·s/(s+half) to causal scaled_dot_product_attention forward+"
            f"backward at {len(pts)} sequence lengths ("
            + ", ".join(f"{int(q)}: {e:.3f}" for q, e in zip(seqs, effs, strict=True))
            + f" of the peak; R²={r2:.2f}, rms {rms:.0%})"
        ),
    }


def fit_cache(copies: list[dict[str, Any]], op_s: float = 0.0) -> dict[str, Any] | None:
    """A cache tier from copies of growing size, less the per-operation overhead ``op_s`` the
    simulator adds on its own: the simulator's model (bytes moved up to ``cache`` at the
    cache's bandwidth, from twice that at memory bandwidth, linear in between) fitted by least
    squares on relative time over a grid of cache sizes. None when the copies show no tier:
    fewer than three sizes on either side, a cache under 1.25× as fast as memory, or a fit not
    four times closer than one bandwidth for every size (a noisy machine's scatter)."""
    pts = sorted(
        (float(r["bytes_moved"]), max(float(r["time_s"]) - op_s, 1e-12))
        for r in copies
        if r["time_s"]
    )
    if len(pts) < 6:
        return None
    w = np.array([p[0] for p in pts])
    per = np.array([p[1] / p[0] for p in pts])  # seconds per byte
    one = np.ones_like(per)
    (y0,), *_ = np.linalg.lstsq((1.0 / per)[:, None], one, rcond=None)
    flat_sse = float(np.sum((y0 / per - 1.0) ** 2))
    best: tuple[float, float, float, float] | None = None
    for cache in np.geomspace(w[0], w[-1] / 2, 48):
        hit = np.clip(2.0 - w / cache, 0.0, 1.0)
        if (hit >= 1.0).sum() < 3 or (hit <= 0.0).sum() < 3:
            continue
        a = np.stack([hit / per, (1.0 - hit) / per], axis=1)
        (x, y), *_ = np.linalg.lstsq(a, one, rcond=None)
        if x <= 0.0 or y <= 0.0:
            continue
        sse = float(np.sum((a @ np.array([x, y]) - 1.0) ** 2))
        if best is None or sse < best[0]:
            best = (sse, float(cache), 1.0 / x, 1.0 / y)
    if best is None or best[2] < 1.25 * best[3] or best[0] > 0.25 * flat_sse:
        return None
    sse, cache, cache_bps, mem_bps = best
    rms = math.sqrt(sse / len(pts))
    return {
        "cache_mb": cache / 1e6,
        "cache_gbps": cache_bps / 1e9,
        "memory_gbps": mem_bps / 1e9,
        "rms_rel_err": rms,
        "what": (
            f"fit of a cache tier to {len(pts)} copies of "
            f"{w[0] / 2**20:g}-{w[-1] / 2**20:g} MiB moved: "
            f"{cache_bps / 1e9:.3g} GB/s up to {cache / 1e6:.3g} MB moved, "
            f"{mem_bps / 1e9:.3g} GB/s from twice that (rms {rms:.0%})"
        ),
    }


def efficiency_quality(flops: Any, eff: Any, m: float, h: float, r2: float) -> dict[str, Any]:
    """How far to trust the GEMM efficiency curve: its rms relative residual, the measured
    efficiencies' own relative spread, and, when R² is low, why and what to run.

    R² compares the curve with a flat line at the mean. Where throughput barely changes with
    size (a CPU's GEMMs; a GPU measured only at large sizes) the flat line is already a good
    model, and R² is near zero even for a good fit: the residual then says more than R²."""
    F = np.asarray(flops, dtype=float)
    e = np.asarray(eff, dtype=float)
    rel = (m * F / (F + h) - e) / e
    rms = float(np.sqrt(np.mean(rel**2)))
    spread = float(np.std(e) / np.mean(e))
    out: dict[str, Any] = {"rms_rel_err": rms, "spread": spread, "points": int(F.size)}
    if r2 < 0.9:
        if F.size < 6:
            out["note"] = (
                f"R²={r2:.2f} from only {F.size} sizes: too few to fit a curve; "
                "re-probe with more (the default set has 16)"
            )
        elif spread < 0.25:
            out["note"] = (
                f"R²={r2:.2f}: throughput is nearly flat across sizes (spread {spread:.0%}), "
                f"so R² says little; the curve's rms relative error is {rms:.0%}"
                + (
                    ", mostly shape-to-shape scatter: re-probe on a quieter machine to lower it"
                    if rms > 0.05
                    else ""
                )
            )
        else:
            out["note"] = (
                f"R²={r2:.2f}: the measurements scatter ({rms:.0%} rms about the curve); "
                "re-probe on a quiet machine (nothing else running)"
            )
    return out


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


FITTED_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "p2p",  # pipeline sends
)


def fitted_block(fits: list[AlphaBeta], group: str, src: Callable[[str], str]) -> dict[str, Any]:
    """The ``fitted`` block of a calibrated fabric or network: every collective the probe
    fitted on this tier (with a usable bandwidth term) as measured, each with its source, so
    that the simulator times a reduce-scatter by its own fit and adds no NCCL protocol model
    to times that already hold the transport's."""
    from simulator.config.bounds import check_figure

    out: dict[str, Any] = {}
    for f in fits:
        if f.group != group or f.op not in FITTED_COLLECTIVES or f.beta_s_per_byte <= 0:
            continue
        if check_figure("bandwidth_gbps", f.bandwidth_gbps) or check_figure(
            "latency_us", max(f.alpha_s * 1e6, 1e-3)
        ):
            # A fit no link could have (a few noisy sizes on a busy machine can leave the
            # slope all but flat): left out, so the tier's own fit times that collective.
            continue
        what = (
            f"fit of ring {f.op} over {f.points} sizes, n={f.n} "
            f"(R²={f.r2:.3f}, rms rel err {f.rms_rel_err:.0%})"
        )
        out[f.op] = {
            "latency_us": {
                "value": max(f.alpha_s * 1e6, 1e-3),
                "source": src("α of the " + what),
            },
            "bandwidth_gbps": {
                "value": f.bandwidth_gbps,
                "source": src("1/β of the " + what),
            },
        }
    return {
        "source": src(
            "collectives timed as the probe's α-β fits: the measured times already "
            "hold the transport's own protocol costs"
        ),
        "collectives": out,
    }
