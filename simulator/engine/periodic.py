"""Steady-state extrapolation: a step's cost without simulating every micro-batch.

Past its warm-up, a pipeline schedule repeats: each further round of micro-batches (one, or PP
for the interleaved schedule) adds the same time to every rank class and to every idle
category. So the step at ``m`` micro-batches is an affine function of ``m`` once ``m`` is past
the warm-up. This module simulates three micro-batch counts past the warm-up, two neighbours
``m1 < m2`` and a far one ``m3`` (twice ``m2``), checks that
every figure the engine reports (step time, each class's finish and each category of its time,
the data loader) lies on one line across them and that no category shrinks between them
(:func:`_growing`), and extrapolates from ``m2`` and ``m3`` to the scenario's ``m``. The far
sample is there because some layouts are only quasi-periodic: a
communication stream that runs beside the compute stream at its own rate beats against it, so
every few micro-batches the step grows a little less, and neighbouring counts can sit between
two such beats and look affine with too steep a slope (a ZeRO-3 layout over a shared PCIe root
came out 1.4% slow with three neighbouring samples). When the check fails it doubles the sample
counts. Some layouts never pass it (per-micro-batch gradient reduce-scatters crossing the
network beside the compute); once two rounds' estimates of the step (the last round's own, and
the line through both rounds' far samples) agree within ``STABLE_TOL`` of the step in every
figure, the wider one is taken (within 0.5% of the event simulation; 2,048 micro-batches of a
TP8 PP4 CP4 ZeRO-2 layout: 0.56 s, not 36 s). Else it falls back to the event-by-event
simulation of all ``m`` micro-batches, which stays the reference. GPipe is always simulated in
full (see :func:`run_periodic`).

The data loader runs beside the step, so it is extrapolated on its own and the data stall
recomputed at ``m`` (a maximum of two affine functions is not affine).

Before any samples, one run of a few rounds is tried (:mod:`.steady`): where the simulator's
state repeats from round to round, that run alone gives the step (a TP4 PP4x4 CP4 ZeRO-3
layout: 0.33 s, not 1.2 s). Where it does not yet repeat and no communication stream's backlog
grew, a second run, as long as one from twice as far out, records every round from the first
mark on: a stage waiting behind a slower one can take a few rounds more to settle (17 of 30 such
random layouts settle there), and behind a lighter first stage the state repeats only every
PP - 2 micro-batches (a 130-stage pipeline with 3,072 micro-batches: 4.7 s, not 18 s of event
simulation); the samples are for layouts whose state does not repeat exactly.

Where the direct walk is exact (blocking pipeline sends, no overlapped DP: see
:mod:`.direct`) it gives the whole step at once, for about the cost of one sample, so nothing is
extrapolated. Elsewhere the samples go through :func:`.direct.run_symmetric` and the whole
step, where it is simulated in full, through the event engine.
"""

from __future__ import annotations

from dataclasses import replace

from ..config.scenario import ResolvedScenario
from .direct import may_walk, walk_or_simulation
from .direct import run_symmetric as _run
from .sim import CATEGORIES, EngineResult, RankResult
from .steady import marks_for, try_steady, window_marks

# Relative tolerance of the affine check: the engine's times are sums of floats.
AFFINE_TOL = 1e-7
# A quasi-periodic layout never passes that check; it is extrapolated all the same where two
# estimates of the whole step (from the last round's far sample and from the one before)
# agree within this share of it, every figure's too. On 1,753 random 1F1B ZeRO/FSDP layouts
# (19 of them quasi-periodic) the worst error against the event simulation was 3.6e-4 of the
# step at 1e-4, 3e-4 and 1e-3 alike (the estimates' agreement is not the error's bound, the
# beat's amplitude is); 3e-4 takes the 2,048-micro-batch ZeRO-2 layout a round earlier (0.56 s,
# not 1.2 s; error 1.4e-4 of the step, 3.5e-4 in its worst category).
STABLE_TOL = 3e-4


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


def _collinear(xs: list[int], ys: list[list[float]]) -> bool:
    """Every figure lies on the line through its first and last sample, within tolerance."""
    x0, x1 = xs[0], xs[-1]
    for col in zip(*ys, strict=True):
        scale = max([abs(y) for y in col] + [1e-30])
        y0, y1 = col[0], col[-1]
        for x, y in zip(xs[1:-1], col[1:-1], strict=True):
            if abs(y - (y0 + (y1 - y0) * (x - x0) / (x1 - x0))) > AFFINE_TOL * scale:
                return False
    return True


def _no_negative_time(out: EngineResult, sample: EngineResult) -> bool:
    """Every category of the extrapolated step is still a time (not below zero). A category
    that shrinks with each micro-batch (a drain bubble a slower stage is catching up on) ends
    where it reaches zero and the step's slope bends there (a PCIe layout: 2% steeper from 26
    of 46 micro-batches): the samples are then not yet the steady state."""
    scale = max(sample.step_time, 1e-30) * AFFINE_TOL
    return all(v >= -scale for rr in out.classes.values() for v in rr.acc.values())


def _growing(lo: EngineResult, hi: EngineResult, tol: float = AFFINE_TOL) -> bool:
    """No category of ``hi`` (the run with more micro-batches) is below ``lo``'s. Past the
    warm-up each round books only more time, so a category that shrinks as micro-batches are
    added is a transient (a bubble a slower stage is catching up on, a queue still filling),
    and the line through such samples bends where it ends: a PCIe layout's first-stage bubble
    shrank until 30 of 80 micro-batches and stopped short of zero, and the line through 4, 5
    and 10 came out 1.1% short. ``tol``: the share of the step a category may fall by (a
    quasi-periodic layout's categories beat by up to ``STABLE_TOL``)."""
    scale = max(hi.step_time, 1e-30) * tol
    return all(
        hi.classes[stage].acc[cat] >= rr.acc[cat] - scale
        for stage, rr in lo.classes.items()
        for cat in CATEGORIES
        if cat != "data_stall"
    )


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
    if may_walk(rs):
        first = walk_or_simulation(rs)
        if isinstance(first, EngineResult):
            return first  # the walk's cost hardly depends on m: samples would cost as much
    if rs.parallelism.pp_schedule.kind == "gpipe":
        # GPipe runs every forward before any backward, so nothing holds a fast stage or
        # stream back and its queues (pipeline sends, ZeRO-3 reduce-scatters) grow with m: the
        # step is affine only piecewise, with a bend anywhere up to m (a layout with a slower
        # last stage changed slope by 1.6% at 19 of 34 micro-batches). 1F1B and the interleaved
        # schedule bound what is in flight, so past their warm-up they settle into a period.
        return _run(rs)
    quantum = rs.pp if v > 1 else 1  # the interleaved schedule runs micro-batches PP at a time
    # 1F1B: every stage has its full warm-up from PP-1 micro-batches on and the idle categories
    # settle one micro-batch later; the interleaved schedule's warm-up spans its chunks, so it
    # starts at 2·PP.
    m1 = 2 * rs.pp if v > 1 else max(2, rs.pp)
    span = quantum
    spent = events = 0
    # First, one run whose state repeats (engine.steady); a stage behind a slower one can take
    # a few rounds more to settle, and some states repeat only every few rounds, so a second
    # recording every round to twice as far where no stream's backlog grew; else the samples.
    for windowed in (False, True):
        marks, n_run = window_marks(m1, quantum) if windowed else marks_for(m1, quantum)
        if spent + n_run > 3 * m // 5:
            break
        got, later = try_steady(
            _with_micro_batches(rs, n_run),
            rs,
            marks,
            quantum,
            rerun=lambda n: _with_micro_batches(rs, n),
            rerun_budget=3 * m // 5 - spent - n_run,
        )
        if got is not None and _no_negative_time(got, got):
            return got
        spent += n_run
        if not later:
            break
    last: tuple[int, EngineResult] | None = None  # the previous round's far sample
    # Only where the samples cost at most 60% of the full run, so a failed check (then the full
    # run as well) costs at most 1.6 times the event-by-event simulation; a pipeline of PP
    # stages needs about 4·PP micro-batches of samples, so it pays from about 7·PP on.
    while True:
        near = [m1, m1 + span]
        # The far sample, twice the second, reaches past a beat longer than the near samples
        # (further out bought nothing on 3,000 random layouts, at half again the cost).
        far = 2 * near[1]
        if far + sum(near) > 3 * m // 5 - spent or far >= m:
            break
        counts = near + [far]
        res = [_run(_with_micro_batches(rs, n)) for n in counts]
        spent += sum(counts)
        events += sum(r.events for r in res)
        if _collinear(counts, [_figures(r) + [r.loader_done] for r in res]):
            steps = (m - counts[2]) / (counts[2] - counts[1])
            out = _extrapolate(res[1], res[2], steps)
            if _no_negative_time(out, res[2]) and _growing(res[0], res[2]):
                return replace(out, events=events)
        elif last is not None:
            wide = _stable(last, (counts[1], res[1]), (far, res[2]), m)
            if (
                wide is not None
                and _no_negative_time(wide, res[2])
                and _growing(last[1], res[2], STABLE_TOL)
            ):
                return replace(wide, events=events)
        last = (far, res[2])
        m1 *= 2
    return _run(rs)


def _stable(
    last: tuple[int, EngineResult],
    near: tuple[int, EngineResult],
    far: tuple[int, EngineResult],
    m: int,
) -> EngineResult | None:
    """The step at ``m`` from the far samples of the last two rounds, where it agrees with the
    last round's own estimate (its near sample to its far one) within ``STABLE_TOL`` of the
    step in every figure: a layout whose streams beat against each other only quasi-
    periodically then moves the extrapolation by less than that; ``None`` where the estimates
    disagree (not yet the steady state)."""
    (x0, r0), (xn, rn), (x1, r1) = last, near, far
    wide = _extrapolate(r0, r1, (m - x1) / (x1 - x0))
    own = _extrapolate(rn, r1, (m - x1) / (x1 - xn))
    tol = STABLE_TOL * wide.step_time
    a, b = _figures(wide) + [wide.step_time], _figures(own) + [own.step_time]
    return wide if all(abs(u - w) <= tol for u, w in zip(a, b, strict=True)) else None


__all__ = ["AFFINE_TOL", "STABLE_TOL", "run_periodic"]
