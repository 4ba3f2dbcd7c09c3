"""A pipeline's steady state recognised inside one simulation, and the step extrapolated from it.

Past its warm-up a 1F1B or interleaved schedule repeats: every round of micro-batches (one, or
PP for the interleaved schedule) moves every event of the step one period later. This module
runs a round past the warm-up once and records the state each time stage 0 starts the first
forward of a round: the time, every rank class's categories so far, and what is in flight (the
offsets of the pending events from now, each stream's occupancy and each link's load; a flow's
completion event carries its remaining bytes over its rate) with each rank's time not yet booked
to a category. Where two consecutive records show the same state, the simulation (deterministic)
runs the second round as it ran the first, one period later, and so every round after it: each
further round adds that period and the first round's growth of every category to the run's
final figures (the cool-down that follows the last round is the same whatever the rounds before
it). The unbooked time matters: behind a slower stage, a rank can sit in a wait at both records
with every pending event alike, the wait begun at different times, so the two rounds book
different shares of it (an uneven pipeline, 4/16/6/6 layers, had one bubble figure 12% of the
step off without it). The recorded state is not the whole state (pending events are recorded
without their owners, queued jobs by their count), so the rule rests on measurement as well as
on determinism: with the unbooked time, every result it gave equals the event engine in each
category to 3e-13 of the step on about 8,000 random layouts (two reviews' 4,900 and 1,950
across stacks, overlaps, stragglers and uneven pipelines, and 1,250 of the engine's own random
draws), where a third record, checking the period and growth again, would cost a round more.

Nothing before a record depends on the micro-batch count: a rank's schedule only reads it when
its forwards run out, after stage 0 has started its last round. The data loader runs beside the
step on storage links nothing else crosses, so it is left out of the run and timed alone for
the scenario's own micro-batch count.

This costs one run of ``m1 + 2`` micro-batches (1F1B) or ``4·PP`` (interleaved) where
:func:`.periodic.run_periodic`'s three samples cost ``4·m1 + 3`` and ``11·PP``; a layout whose
state does not repeat within the run (quasi-periodic streams, a queue that grows) is left to
those samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config.scenario import ResolvedScenario
from ..network.flows import stale
from .loader import loader_done_alone
from .results import CATEGORIES, EngineResult, RankResult
from .sim import Simulation
from .stretch import orphaned

# Times in a run are sums of floats: states and growths that agree within this share of the
# run's length are the same.
STATE_TOL = 1e-9


@dataclass
class _Record:
    now: float
    acc: list[float]  # every simulated rank's categories, in rank order, then CATEGORIES order
    state: list[float]  # pending events' offsets from now, stream occupancy, link loads
    backlog: int  # jobs queued on the communication streams


class _Recording(Simulation):
    def __init__(self, rs: ResolvedScenario, marks: tuple[int, ...]) -> None:
        super().__init__(rs)
        self.marks = frozenset(marks)
        self.with_loader = False
        self.records: dict[int, _Record] = {}

    def on_mark(self, mb: int) -> None:
        now = self.env.now
        queue = self.env._queue  # SimPy's heap of (time, priority, id, event); symmetric mode
        offsets = sorted(
            item[0] - now for item in queue if not (stale(item[3]) or orphaned(item[3]))
        )
        streams = [float(x) for st in self._streams.values() for x in (st.busy, len(st.queue))]
        links = [x for ln in self.net.links.values() for x in (float(len(ln.flows)), ln.weight)]
        pending = [float(len(self._arrived)), float(len(self._recv)), float(len(self._sent_at))]
        acc = [r.acc[c] for r in self.results.values() for c in CATEGORIES]
        # Each rank's time not yet booked to a category (a wait or a span under way: every
        # second of a rank's is booked once it ends): two rounds can run alike while a rank
        # blocked behind a slower stage books different shares of its wait in each.
        unbooked = [now - sum(r.acc.values()) for r in self.results.values()]
        backlog = sum(len(st.queue) for st in self._streams.values())
        self.records[mb] = _Record(
            now, acc, offsets + streams + links + pending + unbooked, backlog
        )


def marks_for(m1: int, quantum: int) -> tuple[tuple[int, int], int]:
    """The two rounds recorded, from ``m1`` (past the warm-up) on, and the micro-batches the
    run needs: one more than the last record (1F1B), or the record's round (interleaved)."""
    marks = (m1, m1 + quantum)
    return marks, marks[-1] + quantum


def window_marks(m1: int, quantum: int) -> tuple[tuple[int, ...], int]:
    """Every round from ``m1`` to one past ``2·m1`` recorded, and the micro-batches the run
    needs (as :func:`marks_for` from ``2·m1``): a stage behind a slower one settles within it,
    and a state that repeats only every few rounds shows there too."""
    marks = tuple(range(m1, 2 * m1 + quantum + 1, quantum))
    return marks, marks[-1] + quantum


def _same(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def _first_repeat(recs: list[_Record], tol: float) -> tuple[int, int] | None:
    """The earliest record whose state a later one repeats, and the nearest such later one
    (record indices); ``None`` where no two records show one state. Behind an uneven pipeline
    the state can repeat only every few rounds (a lighter first stage: every PP - 2 micro-
    batches, the step's increment beating by a pipeline send's time)."""
    for i, a in enumerate(recs):
        for j in range(i + 1, len(recs)):
            if _same(a.state, recs[j].state, tol):
                return i, j
    return None


def run_steady(
    rs_run: ResolvedScenario, rs: ResolvedScenario, marks: tuple[int, int], quantum: int
) -> EngineResult | None:
    """``rs``'s step from one run of ``rs_run`` (the same layout with fewer micro-batches),
    recorded at ``marks``; ``None`` where the records do not show one repeating state."""
    return try_steady(rs_run, rs, marks, quantum)[0]


def try_steady(
    rs_run: ResolvedScenario,
    rs: ResolvedScenario,
    marks: tuple[int, ...],
    quantum: int,
    rerun: Callable[[int], ResolvedScenario] | None = None,
    rerun_budget: int = 0,
) -> tuple[EngineResult | None, bool]:
    """:func:`run_steady`, and where it finds no repeating state, whether a later start may:
    False where a communication stream's backlog grew from one record to the next (a stream
    slower than the compute beside it: its queue grows to the end of the step, so no round
    repeats the one before; on random layouts a second run from twice as far found a steady
    state for 2 of 15 such layouts, against 17 of 30 whose backlog held). With more than two
    ``marks``, the earliest record a later one repeats starts the period, which may span
    several rounds; where the scenario's count is not whole periods past the run's, a run up
    to one period longer (``rerun``, at most ``rerun_budget`` micro-batches) gives the end."""
    rec = _Recording(rs_run, marks)
    res = rec.run()
    sim: Simulation = rec
    recs = [rec.records.get(k) for k in marks]
    if any(r is None for r in recs):
        return None, False
    tol = STATE_TOL * max(res.step_time, 1e-30)
    found = _first_repeat([r for r in recs if r is not None], tol)
    if found is None:
        first, last = recs[0], recs[-1]
        assert first is not None and last is not None
        return None, last.backlog <= first.backlog
    first_at, again_at = found
    a, b = recs[first_at], recs[again_at]
    assert a is not None and b is not None
    span = (again_at - first_at) * quantum  # micro-batches in one period
    n_run = rs_run.micro_batches
    short = (rs.micro_batches - n_run) % span
    if short:
        # Whole periods from this run's end miss the scenario's count: a run ``short``
        # micro-batches longer (the same up to the records) ends that many periods earlier
        if rerun is None or n_run + short > rerun_budget:
            return None, True
        n_run += short
        sim = Simulation(rerun(n_run))
        res = sim.run()
    period = b.now - a.now
    grew = [y - x for x, y in zip(a.acc, b.acc, strict=True)]
    rounds = (rs.micro_batches - n_run) / span
    ranks: dict[int, RankResult] = {}
    for i, (rank, rr) in enumerate(sim.results.items()):
        base = i * len(CATEGORIES)
        acc = {cat: rr.acc[cat] + rounds * grew[base + j] for j, cat in enumerate(CATEGORIES)}
        ranks[rank] = RankResult(rank, rr.stage, rr.finish + rounds * period, acc)
    loader = loader_done_alone(rs, sim.lay, sim.net, rs.micro_batches)
    finish = max(r.finish for r in ranks.values())
    step = max(finish, loader)
    for r in ranks.values():
        r.acc["data_stall"] = step - finish
    classes = {s: ranks[sim.lay.stage_members(s)[0]] for s in range(sim.p)}
    return EngineResult(step, ranks, classes, "symmetric", res.events, None, loader), True


__all__ = ["STATE_TOL", "marks_for", "run_steady", "try_steady", "window_marks"]
