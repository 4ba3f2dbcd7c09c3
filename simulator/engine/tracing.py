"""The Chrome trace (Perfetto) of a simulated step: one span per piece of work on its rank's
stream, a "waits" thread labelling the compute stream's idle time between passes with its
category (with the compute thread's outermost spans it tiles the step), and the process and
thread names. A mixin of
:class:`simulator.engine.setup.SimulationBase`, which holds the state it reads."""

from __future__ import annotations

from typing import Any

from ..config.scenario import ResolvedScenario
from ..errors import UserError
from ..limits import TRACE_EVENT_LIMIT
from ..network.layout import Layout
from .program import Program
from .results import STREAMS, WAIT_LABELS, span_stream


class Tracing:
    rs: ResolvedScenario
    full: bool
    lay: Layout
    tracing: bool
    trace: list[dict[str, Any]]
    in_pass: set[int]  # ranks whose compute stream is inside a pass now (traced runs)

    def _emit(
        self,
        rank: int,
        stream: str,
        name: str,
        start: float,
        dur: float,
        args: dict[str, Any] | None = None,
    ) -> None:
        if not self.tracing or dur <= 0:
            return
        pid = self.lay.node(rank) if self.full else self.lay.coords(rank)[3]
        tid = STREAMS.index(stream)
        if self.full:
            tid += 10 * (rank % self.rs.gpus_per_node)
        # Whole nanoseconds for both ends, the duration their difference: spans that touch
        # stay touching after Perfetto rounds to ns (separately rounded floats could overlap
        # by 1 ns, and Perfetto drops a slice that overlaps its neighbour).
        t0 = round(start * 1e9)
        t1 = round((start + dur) * 1e9)
        if t1 <= t0:
            return
        pid, tid = pid + 1, tid + 1  # ids from 1: Perfetto treats pid/tid 0 specially
        ev: dict[str, Any] = {
            "name": name,
            "ph": "X",
            "ts": t0 / 1e3,
            "dur": (t1 - t0) / 1e3,
            "pid": pid,
            "tid": tid,
        }
        if self.full:
            ev["args"] = {"rank": rank}
        if args:
            ev.setdefault("args", {}).update(args)
        if len(self.trace) >= TRACE_EVENT_LIMIT:
            raise UserError(
                f"the trace reached the limit of {TRACE_EVENT_LIMIT:,} events at "
                f"{start:,.3g} s into the step",
                path="--trace",
                hint="trace a step with fewer micro-batches (training.global_batch), or drop "
                "--trace",
            )
        self.trace.append(ev)

    def _waited(self, rank: int, cat: str, start: float, end: float) -> None:
        """A span on the rank's "waits" thread: its compute stream idle from ``start`` to
        ``end`` between passes, booked to ``cat``. A wait inside a pass is left to the pass's
        own span (and its collective's thread): the waits thread and the compute thread's
        outermost spans tile the step."""
        if rank not in self.in_pass:
            self._emit(rank, "waits", WAIT_LABELS[cat], start, end - start, {"category": cat})

    def _trace_program(self, rank: int, prog: Program, reps: int, t0: float) -> None:
        t = t0
        for _ in range(reps):
            for it in prog.items:
                stream = span_stream(it.cat)
                self._emit(rank, stream, it.name, t, it.dur)
                if stream != "compute":  # communication the compute stream waited for
                    self._waited(rank, it.cat, t, t + it.dur)
                t += it.dur

    def _trace_meta(self) -> None:
        meta = []
        # Event ids are one more than the node/stage and stream index (see _emit).
        pids = sorted({e["pid"] for e in self.trace} | ({1} if not self.trace else set()))
        for pid in pids:
            label = f"node {pid - 1}" if self.full else f"stage {pid - 1} (rank class)"
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
            tids = sorted({e["tid"] for e in self.trace if e["pid"] == pid})
            for tid in tids:
                local, stream = divmod(tid - 1, 10) if self.full else (0, tid - 1)
                name = STREAMS[stream]
                if self.full:
                    rank = (pid - 1) * self.rs.gpus_per_node + local
                    t, c, d, stage = self.lay.coords(rank)
                    cp = f", cp {c}" if self.rs.cp > 1 else ""
                    name += f" (gpu {local}: rank {rank}, stage {stage}, tp {t}{cp}, dp {d})"
                meta.append(
                    {
                        "name": "thread_name",
                        "ph": "M",
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": name},
                    }
                )
        self.trace = meta + sorted(
            self.trace, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"])
        )


__all__ = ["Tracing"]
