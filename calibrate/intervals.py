"""Uncertainty of a validation row: a bootstrap interval of the measured step time, the
prediction's interval from the calibration fits' residuals, and the pass/fail verdict."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

LEVEL = 0.90  # two-sided coverage of both intervals
Z = 1.6449  # standard normal quantile at (1 + LEVEL) / 2
TOLERANCE = 0.10  # a row passes when its drift-corrected error is within this


def bootstrap_median(
    runs: list[list[float]], resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """``LEVEL`` interval of the median step time, resampling at both levels a shared machine
    varies on: whole runs (a run's processes start on a machine in some state), then steps
    within each drawn run."""
    rng = np.random.default_rng(seed)
    arrs = [np.asarray(r, dtype=float) for r in runs if len(r)]
    if not arrs:
        raise ValueError("no step times")
    meds = np.empty(resamples)
    for i in range(resamples):
        picked = rng.integers(0, len(arrs), len(arrs))
        pooled = np.concatenate([rng.choice(arrs[j], arrs[j].size) for j in picked])
        meds[i] = np.median(pooled)
    lo, hi = np.quantile(meds, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def robust_rel_sd(xs: list[float]) -> float:
    """Normal-equivalent relative spread (IQR / 1.349 over the median) of ``xs``."""
    a = np.asarray(xs, dtype=float)
    if a.size < 2:
        return 0.0
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return float((q3 - q1) / 1.349 / med) if med > 0 else 0.0


def prediction_sd(shares: dict[str, float], sigmas: dict[str, float]) -> float:
    """Relative standard deviation of a predicted step whose parts (``shares`` of the step, by
    source of error) carry the relative errors ``sigmas``; the parts' errors are independent."""
    return math.sqrt(sum((shares.get(k, 0.0) * s) ** 2 for k, s in sigmas.items()))


def verdict(error: float, measured: tuple[float, float], predicted: tuple[float, float]) -> str:
    """'within 10%' when the relative error is, else 'intervals overlap' when the measured and
    predicted intervals do, else 'fail'."""
    if abs(error) <= TOLERANCE:
        return f"within {TOLERANCE:.0%}"
    if measured[0] <= predicted[1] and predicted[0] <= measured[1]:
        return "intervals overlap"
    return "fail"


def passed(v: str) -> bool:
    return v != "fail"


__all__: list[Any] = [
    "LEVEL",
    "TOLERANCE",
    "bootstrap_median",
    "passed",
    "prediction_sd",
    "robust_rel_sd",
    "verdict",
]
