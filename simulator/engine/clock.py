"""SimPy's environment with its pending events kept per instant.

SimPy keeps every pending event in one binary heap ordered by (time, priority, insertion).
A full-mode run holds one or two pending events per rank, so at thousands of ranks every event
pays a heap operation over tens of thousands of entries, and that cost grows with the cluster.
Yet the ranks of a symmetric layout do the same things at the same instants: the events of a
run fall on far fewer distinct times than there are events. This environment keeps a heap of
distinct instants and, per instant, one first-in-first-out queue per priority, so an event
costs a deque append and pop and only a new instant touches the heap. The order of processing
is SimPy's exactly: by time, then priority, then the order of scheduling. Where events rarely
share an instant (symmetric mode's few processes) each one would build its own queues, and
SimPy's heap is cheaper: the engine uses this environment in full mode only.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import EmptySchedule, Infinity, StopSimulation
from simpy.events import NORMAL, Event

# SimPy's priorities are URGENT (0) and NORMAL (1); a simulation stopped by ``run(until=...)``
# re-queues the rest of an event's callbacks at -1, ahead of both. SimPy itself uses no other
# (an event scheduled at another priority raises IndexError here).
_LANES = 3


class BucketEnvironment(simpy.Environment):
    """:class:`simpy.Environment` with a heap of instants and a FIFO queue per (instant,
    priority) in place of one heap of events."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self._instants: list[float] = []
        self._lanes: dict[float, tuple[deque[Event], ...]] = {}

    def schedule(self, event: Event, priority: Any = NORMAL, delay: float = 0) -> None:
        next(self._eid)  # SimPy's running count of scheduled events, which the engine reports
        at = self._now + delay
        lanes = self._lanes.get(at)
        if lanes is None:
            lanes = self._lanes[at] = tuple(deque() for _ in range(_LANES))
            heappush(self._instants, at)
        lanes[priority + 1].append(event)

    def _next(self) -> Event:
        """Remove and return the next event, advancing the clock to it."""
        instants, all_lanes = self._instants, self._lanes
        while instants:
            at = instants[0]
            for lane in all_lanes[at]:
                if lane:
                    self._now = at
                    return lane.popleft()
            heappop(instants)
            del all_lanes[at]
        raise EmptySchedule from None

    def run(self, until: Any = None) -> Any:
        """Process events until none are left (SimPy's own loop where ``until`` is given):
        each instant's lanes are drained in priority order, new events at the same instant
        joining the end of their lane, as SimPy's heap would order them."""
        if until is not None:
            return super().run(until)
        instants, all_lanes = self._instants, self._lanes
        while instants:
            at = instants[0]
            urgent_first, urgent, normal = all_lanes[at]
            self._now = at
            while True:
                if urgent_first:
                    event = urgent_first.popleft()
                elif urgent:
                    event = urgent.popleft()
                elif normal:
                    event = normal.popleft()
                else:
                    break
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                for callback in callbacks:  # type: ignore[union-attr]
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
            heappop(instants)
            del all_lanes[at]
        return None

    def peek(self) -> float:
        for at in sorted(self._instants):
            if any(self._lanes[at]):
                return at
        return Infinity

    def step(self) -> None:
        event = self._next()
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        try:
            for callback in callbacks:  # type: ignore[union-attr]
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1 :]  # type: ignore[index]
            self.schedule(event, -1)
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


__all__ = ["BucketEnvironment"]
