"""Steady-state extrapolation: a step's cost without simulating every micro-batch.

Past its warm-up, a pipeline schedule repeats: each further round of micro-batches (one, or PP
for the interleaved schedule) adds the same time to every rank class and to every idle
category. So the step at ``m`` micro-batches is an affine function of ``m`` once ``m`` is past
the warm-up. This module simulates three small micro-batch counts ``m1 < m2 < m3`` (equally
spaced, the smallest past the warm-up), checks that every figure the engine reports (step time,
each class's finish and each category of its time, the data loader) is affine across them, and
extrapolates to the scenario's ``m``. When the check fails (a layout whose rounds are not yet
periodic at these counts) it doubles the sample counts, and falls back to the event-by-event
simulation of all ``m`` micro-batches, which stays the reference.

The data loader runs beside the step, so it is extrapolated on its own and the data stall
recomputed at ``m`` (a maximum of two affine functions is not affine).
"""

from __future__ import annotations

from dataclasses import replace

from ..config.scenario import ResolvedScenario
from .sim import CATEGORIES, EngineResult, RankResult, run_engine

# Relative tolerance of the affine check: the engine's times are sums of floats.
AFFINE_TOL = 1e-7


def _with_micro_batches(rs: ResolvedScenario, m: int) -> ResolvedScenario:
    gb = m * rs.dp * rs.training.micro_batch
    return rs.model_copy(update={"training": rs.training.model_copy(update={"global_batch": gb})})


def _figures(res: EngineResult) -> list[float]:
    """Every figure of a result that must be affine in the micro-batch count (the data stall
    and the loader excepted)."""
    out = []
    for rr in sorted(res.classes.values(), key=lambda r: r.stage):
        out.append(rr.finish)
        out += [v for k, v in rr.acc.items() if k != "data_stall"]
    return out


def _affine(a: list[float], b: list[float], c: list[float]) -> bool:
    scale = max([abs(x) for x in c] + [1e-30])
    return all(abs(x - 2 * y + z) <= AFFINE_TOL * scale for x, y, z in zip(a, b, c, strict=True))


def _extrapolate(lo: EngineResult, hi: EngineResult, steps: float) -> EngineResult:
    """``hi`` carried ``steps`` more rounds beyond (a round being the step from ``lo`` to
    ``hi``), with the data stall and step time recomputed."""
    k = steps
    loader = hi.loader_done + k * (hi.loader_done - lo.loader_done)
    classes: dict[int, RankResult] = {}
    for stage, rr in hi.classes.items():
        lr = lo.classes[stage]
        acc = {
            cat: rr.acc[cat] + k * (rr.acc[cat] - lr.acc[cat])
            for cat in CATEGORIES
            if cat != "data_stall"
        }
        classes[stage] = RankResult(rr.rank, stage, rr.finish + k * (rr.finish - lr.finish), acc)
    # A class's finish is when its own work ends; the step's compute side ends at the latest.
    finish = max((r.finish for r in classes.values()), default=0.0)
    step = max(finish, loader)
    for r in classes.values():
        r.acc["data_stall"] = step - finish
    ranks = {r.rank: r for r in classes.values()}
    return replace(
        hi,
        step_time=step,
        ranks=ranks,
        classes=classes,
        loader_done=loader,
        trace=None,
    )


def run_periodic(rs: ResolvedScenario) -> EngineResult:
    """The symmetric-mode result for ``rs``, by steady-state extrapolation where it is exact
    (see the module docstring), else by simulating every micro-batch."""
    m = rs.micro_batches
    v = rs.parallelism.virtual_stages
    quantum = rs.pp if v > 1 else 1  # the interleaved schedule runs micro-batches PP at a time
    m1 = quantum * max(1, -(-2 * rs.pp // quantum))
    span = quantum
    spent = 0
    # Only where the three samples cost at most half the full run, so a failed check (then
    # the full run as well) costs at most 1.5 times the event-by-event simulation.
    while m1 + 2 * span < m and spent + 3 * m1 + 3 * span <= m // 2:
        a, b, c = (run_engine(_with_micro_batches(rs, n)) for n in (m1, m1 + span, m1 + 2 * span))
        spent += 3 * m1 + 3 * span
        if _affine(_figures(a), _figures(b), _figures(c)) and _affine(
            [a.loader_done], [b.loader_done], [c.loader_done]
        ):
            steps = (m - (m1 + 2 * span)) / span
            return replace(_extrapolate(b, c, steps), events=a.events + b.events + c.events)
        m1 *= 2
    return run_engine(rs)


__all__ = ["AFFINE_TOL", "run_periodic"]
