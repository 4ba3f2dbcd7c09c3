"""Stragglers in expectation: a synchronous step runs at the pace of its slowest GPU.

Every GPU of a data/tensor/pipeline-parallel job meets the others at least once a step (the
gradient reduction), so a step lasts as long as the slowest GPU's compute. With per-GPU compute
time varying with coefficient of variation ``cv`` (the GPU profile's ``speed_cv``, from measured
spreads of run time between same-model GPUs) and ``n`` GPUs that synchronise, the slowest takes
on average ``1 + cv · E[max of n standard normals]`` times the mean: the order statistic,
taken directly instead of simulating draws (DESIGN.md, "a straggler effect at N ranks is the
maximum of N draws"). The engine runs every compute span at that pace
and books the difference as ``straggler`` idle time: the time a mean-speed GPU waits.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..config.scenario import ResolvedScenario


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normal draws] (0 for one draw; 1/√π for two)."""
    from scipy import integrate, stats  # only when stragglers are asked for (slow import)

    if n < 1:
        raise ValueError("n must be at least 1")
    if n == 1:
        return 0.0

    def f(x: float) -> float:
        return x * n * stats.norm.pdf(x) * math.exp((n - 1) * stats.norm.logcdf(x))

    value, _err = integrate.quad(f, -12.0, 12.0, limit=200, points=[0.0, 3.0])
    return float(value)


def pace(rs: ResolvedScenario) -> float:
    """Compute-time multiplier of every GPU under ``run.stragglers`` (1 when off)."""
    if rs.run.stragglers == "off" or rs.gpus <= 1:
        return 1.0
    cv = rs.gpu.speed_cv.value if rs.gpu.speed_cv is not None else 0.0
    return 1.0 + cv * expected_max_normal(rs.gpus)
