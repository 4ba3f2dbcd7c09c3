"""Running a rank's per-pass programs: compute spans, collectives on the compute stream, the
analytic shortcut for a pass whose TP has its links to itself, and layer-by-layer passes with
the hooks that wait for parameters and launch gradient buckets; the sends between pipeline
stages and the DP buckets and gathers around the passes. The pipeline schedule that calls these
is :class:`simulator.engine.sim.Simulation`."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy
from simpy.events import Timeout

from ..workload.buckets import gather_groups
from ..workload.comm import (
    dp_buckets,
    gather_buckets,
    gather_bytes_per_param,
    grad_bucket_bytes,
)
from ..workload.memory import layer_gather_bytes_per_param
from .comm import DONE, Job, Stream
from .program import Program
from .results import span_stream
from .setup import SimulationBase
from .stretch import NEGLIGIBLE_S, Stretch, segment


class PassRunner(SimulationBase):
    stretches = True  # off: span by span, each slowdown a timeout of its own (the reference)

    def _slowdown(self, rank: int, since: float, share: float = 1.0) -> float:
        """Extra seconds the compute that ran from ``since`` (the DP stream's busy time then)
        to now owes to the DP collectives it overlapped (0 when it overlapped none); ``share``:
        the part of that time that was compute (exposed TP or CP communication is not slowed:
        its own kernels are what run then)."""
        st = self.dp_streams.get(rank)
        if st is None:
            return 0.0
        extra = (st.busy_time() - since) * self.contention * share
        return extra if extra > NEGLIGIBLE_S else 0.0

    def _pay(self, rank: int, extra: float) -> Generator:
        """Run the slowdown's extra time on the compute stream and book it."""
        t0 = self.env.now
        yield Timeout(self.env, extra)
        self.results[rank].acc["overlap"] += extra
        self._emit(rank, "compute", "slowed by DP communication", t0, extra)

    def _stretching(self, dp: Stream | None) -> bool:
        """Whether compute now runs beside a busy DP stream as stretches (engine.stretch):
        not when tracing (the trace shows each span and each slowdown)."""
        return dp is not None and dp.busy and self.stretches and not self.tracing

    def _stretch(self, rank: int, segs: list[tuple[float, float]]) -> Generator:
        """Segments ``(seconds, compute share)`` back to back beside the rank's busy DP
        stream, each with its slowdown, as one timeout (engine.stretch); the slowdowns booked."""
        st = Stretch(self.env, self.dp_streams[rank], segs, self.contention)
        yield st.timeout
        extra = st.done()
        if extra:
            self.results[rank].acc["overlap"] += extra

    def _dp_busy(self, rank: int) -> float:
        st = self.dp_streams.get(rank)
        return st.busy_time() if st is not None else 0.0

    def _charge(self, rank: int, prog: Program, reps: int, t0: float) -> None:
        """Book ``reps`` runs of an analytic program that started at ``t0``."""
        acc = self.results[rank].acc
        for cat, dt in prog.categories.items():
            acc[cat] += dt * reps
        if self.tracing:
            self._trace_program(rank, prog, reps, t0)

    def run_items(self, rank: int, prog: Program, reps: int, name: str) -> Generator:
        """Run a program ``reps`` times; analytic programs are one timeout. A program
        whose only flow-network traffic is TP or an in-node CP ring, started while this
        class's DP and pipeline streams are idle, runs as its analytic twin: nothing else can
        reach their links until the pass ends (``LinkSharing._pass_guards``). Started while
        one of them is busy, it goes through the flow network only until they are all idle,
        then on as the twin."""
        if reps <= 0:
            return
        env, acc, collective = self.env, self.results[rank].acc, self.comm.collective
        rest = self.twin_rest.get(id(prog))
        guards = self.guard_streams[rank] if rest is not None else []
        if rest is not None and not any(st.busy for st in guards):
            prog = rest[0]  # the whole twin, as one timeout below
        dp = self.dp_streams.get(rank)
        if prog.analytic:
            t0 = env.now
            total = prog.duration * reps
            if total > 0 and self._stretching(dp):
                yield from self._stretch(rank, [(total, prog.compute_share)])
                self._charge(rank, prog, reps, t0)
                return
            busy0 = self._dp_busy(rank)
            if total > 0:
                yield Timeout(env, total)
            self._charge(rank, prog, reps, t0)
            extra = self._slowdown(rank, busy0, prog.compute_share)
            if extra:
                yield from self._pay(rank, extra)
            return
        items = prog.items
        runs = None if self.tracing else prog.span_runs
        for rep in range(reps):
            early: list[Job] = []  # collectives started under the span before them
            i, n = 0, len(items)
            while i < n:
                it = items[i]
                t0 = env.now
                if rest is not None and not early and not any(st.busy for st in guards):
                    # The guard streams are idle (and nothing is launched on them before the
                    # pass ends): the rest of the pass has TP to itself.
                    yield from self._run_rest(rank, rest[i], rest[0], reps - rep - 1)
                    return
                run = runs[i] if runs is not None else None
                if run is not None and (dp is None or not dp.busy):
                    # Spans back to back while the DP stream is idle (only this rank's own
                    # process submits to it: hooks between layers, run_rank between passes):
                    # nothing slows them or starts under them, so they run as one timeout,
                    # each booked as it would be (events at the run's end instant may now
                    # resume in another order: rounding only).
                    end, total, booked = run
                    yield Timeout(env, total)
                    for cat, dt in booked:
                        acc[cat] = acc.get(cat, 0.0) + dt
                    i = end
                    continue
                if run is not None and self._stretching(dp):
                    # The same beside a busy DP stream, each span's slowdown after it
                    end = run[0]
                    yield from self._stretch(rank, [segment(x) for x in items[i:end]])
                    for cat, dt in run[2]:
                        acc[cat] = acc.get(cat, 0.0) + dt
                    i = end
                    continue
                i += 1
                if it.kind == "span":
                    busy0 = self._dp_busy(rank)
                    # the collectives right after the span that may start under it (a TP
                    # one behind its GEMM; a CP ring's, all of them behind the attention)
                    nxts = []
                    j = i  # the item after this span (``i`` has moved past it)
                    while j < n and items[j].kind != "span" and items[j].hide > 0:
                        nxts.append(items[j])
                        j += 1
                    if nxts:
                        # each starts its own hide before the span ends (in the items' order
                        # where they start together)
                        starts = sorted(
                            (it.dur - min(c.hide, it.dur), k) for k, c in enumerate(nxts)
                        )
                        jobs: list[Job] = [DONE] * len(nxts)
                        at = 0.0
                        for start, k in starts:
                            if start > at:
                                yield Timeout(env, start - at)
                                at = start
                            ep = self.comm.endpoint(rank, nxts[k].group or "tp")
                            jobs[k] = collective(ep, nxts[k].coll or "", nxts[k].size)
                            if not jobs[k].done:
                                jobs[k].begin(env.now)
                        early.extend(jobs)
                        if it.dur > at:
                            yield Timeout(env, it.dur - at)
                    elif it.cat == "compute" and self._stretching(dp):
                        yield from self._stretch(rank, [(it.dur, 1.0)])
                        it.book(acc)
                        continue
                    else:
                        yield Timeout(env, it.dur)
                    it.book(acc)
                    stream = span_stream(it.cat)
                    self._emit(rank, stream, it.name, t0, it.dur)
                    if stream != "compute" and self.tracing:
                        self._waited(rank, it.cat, t0, t0 + it.dur)
                    extra = self._slowdown(rank, busy0) if it.cat == "compute" else 0.0
                    if extra:
                        yield from self._pay(rank, extra)
                else:
                    if early:
                        job = early.pop(0)
                    else:
                        ep = self.comm.endpoint(rank, it.group or "tp")
                        job = collective(ep, it.coll or "", it.size)
                        if not job.done:
                            job.begin(env.now)  # on the compute stream: runs now
                    yield from self._wait(job)
                    self._book_wait(rank, [job], t0, f"comm_{it.group}")
                    self._emit(rank, it.group or "tp", it.name, t0, env.now - t0)

    def _run_rest(self, rank: int, tail: Program, twin: Program, more: int) -> Generator:
        """The rest of a pass analytically: ``tail``, then ``more`` runs of ``twin``."""
        t0 = self.env.now
        busy0 = self._dp_busy(rank)
        total = tail.duration + twin.duration * more
        if total > 0:
            yield Timeout(self.env, total)
        self._charge(rank, tail, 1, t0)
        if more:
            self._charge(rank, twin, more, t0 + tail.duration)
        busy = tail.duration * tail.compute_share + twin.duration * twin.compute_share * more
        extra = self._slowdown(rank, busy0, busy / total if total > 0 else 0.0)
        if extra:
            yield from self._pay(rank, extra)

    def layer_pass(
        self, rank: int, prog: Program, layers: int, hook_before: Any, hook_after: Any, name: str
    ) -> Generator:
        """Run a program once per layer, with the hooks before and after each layer (waiting for
        parameters, launching gradient buckets); without hooks, as one run of ``layers``."""
        if hook_before is None and hook_after is None:
            yield from self.run_items(rank, prog, layers, name)
            return
        env, acc = self.env, self.results[rank].acc
        # Layer by layer: the hooks wait for parameters or launch gradient buckets. An
        # analytic layer is one timeout here, not a nested generator per layer.
        analytic = prog.analytic
        dur = prog.duration
        ready_from = getattr(hook_before, "ready_from", None)
        dp = self.dp_streams.get(rank)
        for i in range(layers):
            if (
                analytic
                and ready_from is not None
                and hook_after is None
                and (dp is None or not dp.busy)
                and ready_from(i)
            ):
                # The rest of the pass waits for nothing and launches nothing, and the DP
                # stream is idle (only this rank submits to it): nothing can slow or interrupt
                # the remaining layers, so they run as one span, as without hooks.
                yield from self.run_items(rank, prog, layers - i, name)
                return
            if hook_before is not None:
                ev = hook_before(i)
                if ev is not None:
                    t0 = env.now
                    yield ev
                    acc["comm_dp"] += env.now - t0
                    if self.tracing:
                        self._waited(rank, "comm_dp", t0, env.now)
            if analytic and dur > 0 and self._stretching(dp):
                t0 = env.now
                yield from self._stretch(rank, [(dur, prog.compute_share)])
                self._charge(rank, prog, 1, t0)
            elif analytic:
                t0 = env.now
                busy0 = self._dp_busy(rank)
                if dur > 0:
                    yield Timeout(env, dur)
                self._charge(rank, prog, 1, t0)
                extra = self._slowdown(rank, busy0, prog.compute_share)
                if extra:
                    yield from self._pay(rank, extra)
            else:
                yield from self.run_items(rank, prog, 1, name)
            if hook_after is not None:
                hook_after(i)

    def _await_gather(self, rank: int, gathers: dict[str, Job], name: str) -> Generator:
        """Before the first pass that uses them: wait for the gathered parameters ``name``
        (the embedding's or the output layer's), charged as exposed DP communication."""
        job = gathers.pop(name, None)
        if job is not None and not job.done:
            t0 = self.env.now
            yield from self._wait(job)
            self._book_wait(rank, [job], t0, "comm_dp")

    def _recv_key(self, kind: str, mb: int, chunk: int, rank: int) -> tuple:
        if self.full:
            return (kind, mb, chunk, rank)
        return (kind, mb, chunk, self.lay.coords(rank)[3])

    def _send(
        self, rank: int, kind: str, mb: int, chunk: int, dst_stage: int, block: int, size: float
    ) -> Job:
        t, c, d, _ = self.lay.coords(rank)
        dst = self.lay.rank(t, c, d, dst_stage)
        key = self._recv_key(kind, mb, chunk, dst)
        stream = "pp-fwd" if kind == "F" else "pp-bwd"
        sent_at = self._sent_at
        env = self.env

        def started() -> None:
            sent_at[key] = env.now

        def delivered() -> None:
            ev = self._recv.pop(key, None)
            if ev is None:
                self._arrived.add(key)
            else:
                ev.succeed()

        # With model chunks, the pass it feeds (as the passes are named: micro-batch.chunk).
        what = f"{kind}{mb}.{chunk}" if self.v > 1 else f"{kind}{mb}"
        label = lambda: f"send {what} → stage {dst_stage}"  # noqa: E731
        return self._submit(
            rank, stream, self.comm.send(rank, dst, size, started, delivered, label)
        )

    def _grad_buckets(self, stage: int) -> tuple[float, int]:
        """Gradient bytes one rank of ``stage`` reduces after its backward passes, and the
        number of equal buckets they go in (workload.comm.dp_buckets)."""
        each, n = dp_buckets(self.rs, stage)
        return each * n, n

    def _prefetch_params(
        self, stage: int, gather: Callable[[float, str], Job], dp_on: bool
    ) -> tuple[dict[int, list[Job]], dict[str, Job]]:
        """ZeRO-1/2: the parameter all-gather after the previous optimizer step runs while this
        step starts, in buckets of dp_bucket_mb as Megatron's distributed optimizer does; each
        layer's first forward waits for the bucket that holds its parameters (the jobs per
        chunk, one per layer). The embedding's and the output layer's parameters are sharded
        too: the embedding's bucket (the last in reverse parameter order) is gathered first,
        the output layer's (the first) last; each pass waits for its own (by name)."""
        prefetched: dict[int, list[Job]] = {}
        own: dict[str, Job] = {}
        if not (dp_on and self.z in (1, 2) and self.ov.param_gather):
            return prefetched, own
        width = gather_bytes_per_param(self.rs)
        if stage == 0 and self.emb_params > 0:
            own["embedding"] = gather(self.emb_params * width, "param all_gather")
        plans = self._gather_plans
        for chunk in range(self.v):
            # the distributed optimizer gathers parameters in its gradient buckets; a layer
            # waits for the last of those holding its tensors (the same plan on every rank of
            # the stage: worked out once)
            plan = plans.get((stage, chunk))
            if plan is None:
                bucket = grad_bucket_bytes(self.rs, width, stage, chunk)
                got = gather_groups(self.rs, stage, chunk, width, bucket)
                plan = plans[(stage, chunk)] = (tuple(got[0]), tuple(got[1]))
            sizes, waits = plan
            jobs = [gather(size, "param all_gather") for size in sizes]
            prefetched[chunk] = [jobs[w] for w in waits]
        if stage == self.p - 1 and self.head_params > 0:
            own["head"] = gather(self.head_params * width, "param all_gather")
        return prefetched, own

    def _gather_exposed(
        self, stage: int, params: float, gather: Callable[[float, str], Job]
    ) -> Job:
        """ZeRO-1/2 without overlap: the gather after the optimizer step, still in the buckets
        the overlapped one uses (Megatron's distributed optimizer, FSDP's units), one after
        another; the last job."""
        each, n = gather_buckets(self.rs, params, stage)
        last = DONE
        for _ in range(n):
            last = gather(each, "param all_gather")
        return last

    def _gather_hook(self, gather: Any, layers: int) -> Any:
        """Before each layer: the event its parameters arrive by (None if they have), with the
        next layer's gather queued behind it (prefetch one layer ahead); without prefetching
        (``overlap.param_gather`` off) each layer's gather starts only as the layer is reached,
        and the layer waits for all of it."""
        size = self.layer_params * layer_gather_bytes_per_param(self.rs)
        pending: dict[int, Job] = {}
        ahead = self.ov.param_gather

        def hook(i: int) -> simpy.Event | None:
            if i == 0 or not ahead:
                pending[i] = gather(size, "layer all_gather")
            if ahead and i + 1 < layers:
                pending[i + 1] = gather(size, "layer all_gather")
            return pending.pop(i).event(self.env)

        return hook

    def _wait_hook(self, jobs: list[Job]) -> Any:
        """Before each layer: the event its prefetched parameters arrive by (or None)."""
        return _Prefetched(jobs, self.env)


class _Prefetched:
    """The hook before each layer of a pass whose parameters were gathered ahead (ZeRO-1/2):
    the event layer ``i``'s bucket arrives by, or None once it has."""

    __slots__ = ("jobs", "env")

    def __init__(self, jobs: list[Job], env: simpy.Environment) -> None:
        self.jobs = jobs
        self.env = env

    def __call__(self, i: int) -> simpy.Event | None:
        return self.jobs[i].event(self.env)

    def ready_from(self, i: int) -> bool:
        """Whether the parameters of layer ``i`` and of every layer after it have arrived."""
        return all(job.done for job in self.jobs[i:])


__all__ = ["PassRunner"]
