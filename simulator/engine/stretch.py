"""Compute beside a busy DP stream as one timeout, not one per span and one per slowdown.

A compute span that runs while the rank's DP stream holds a collective is followed by the time
it loses to that collective (:meth:`.passes.PassRunner._slowdown`: the stream's busy seconds
during the span times the contention, times the span's compute share). Run span by span, that
is two events per span. But the stream's state inside such a stretch is known ahead: only the
rank's own process submits to it (hooks between layers, the schedule between passes), so from
the stretch's start the stream can only go from busy to idle, once. Assuming it stays busy, every
slowdown is known at the start and the stretch is one timeout; if the stream goes idle first
(``Stream.on_idle``), the slowdowns from that instant on are recomputed, the schedule up to it
being the same, and the process is moved to a timeout at the new end. The result is the span-
by-span run's, to the rounding of its sums.
"""

from __future__ import annotations

import simpy
from simpy.events import Timeout

from .comm import Stream
from .program import Item

# A slowdown of at most this many seconds is not paid (as ``PassRunner._slowdown``).
NEGLIGIBLE_S = 1e-12


class _Wait(Timeout):
    """A stretch's timeout; ``moved`` once its process waits on another."""

    moved = False


def _pay(x: float) -> float:
    return x if x > NEGLIGIBLE_S else 0.0


class Stretch:
    """Segments ``(seconds, compute share)`` back to back, each followed by its slowdown, started
    now with ``stream`` busy; ``timeout`` is the event the process waits for, ``pays`` each
    segment's slowdown (final once it fires)."""

    __slots__ = ("env", "segs", "contention", "t0", "pays", "timeout", "proc", "stream", "fired")

    def __init__(
        self,
        env: simpy.Environment,
        stream: Stream,
        segs: list[tuple[float, float]],
        contention: float,
    ) -> None:
        self.env = env
        self.segs = segs
        self.contention = contention
        self.t0 = env.now
        total = 0.0
        pays = []
        for d, share in segs:
            x = d * contention * share
            x = x if x > NEGLIGIBLE_S else 0.0
            pays.append(x)
            total += d + x
        self.pays = pays
        self.timeout: _Wait = _Wait(env, total)
        self.proc = env.active_process
        self.stream = stream
        self.fired = False
        assert stream.on_idle is None, "one process per rank: one stretch per stream at a time"
        stream.on_idle = self.idle

    def idle(self) -> None:
        """The DP stream went idle now: the segments from here on lose nothing to it."""
        self.fired = True  # (the stream let go of its watcher as it called it)
        proc, old = self.proc, self.timeout
        # (the engine never interrupts a process: it waits on the stretch's timeout still)
        assert proc is not None and proc._target is old
        t_idle = self.env.now
        s = self.t0
        for k, (d, share) in enumerate(self.segs):
            e = s + d
            if t_idle < e:
                self.pays[k] = _pay((t_idle - s) * self.contention * share) if t_idle > s else 0.0
                for j in range(k + 1, len(self.pays)):
                    self.pays[j] = 0.0
                s = e + self.pays[k] + sum(dd for dd, _ in self.segs[k + 1 :])
                break
            s = e + self.pays[k]
        else:
            return  # every segment ended while the stream was busy: nothing changes
        old.callbacks.remove(proc._resume)  # type: ignore[union-attr]
        old.moved = True
        new = _Wait(self.env, max(0.0, s - t_idle))
        new.callbacks.append(proc._resume)  # type: ignore[union-attr]
        proc._target = new
        self.timeout = new

    def done(self) -> float:
        """After the timeout: the total slowdown (and the stream no longer watched)."""
        if not self.fired:
            self.stream.on_idle = None
        return sum(self.pays)


def segment(it: Item) -> tuple[float, float]:
    """A span as a stretch's segment: only compute is slowed by DP collectives."""
    return (it.dur, 1.0 if it.cat == "compute" else 0.0)


def orphaned(ev: object) -> bool:
    """Whether a pending event is a stretch's timeout whose process was moved to another (it
    fires with nothing waiting for it)."""
    return isinstance(ev, _Wait) and ev.moved


__all__ = ["NEGLIGIBLE_S", "Stretch", "orphaned", "segment"]
