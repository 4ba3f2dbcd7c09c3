"""Bandwidth sharing: flows that cross the same link at the same time share its capacity.

Each link divides its capacity equally among the flows on it, counting a flow of weight w as w
flows (in symmetric mode one simulated flow stands for w identical ones, and its bytes are those
of one of them). A flow moves at the smallest share among the links it crosses: capacity / total
weight on the link. Whenever flows start or end, the rates of the flows sharing a link with them
whose bottleneck changed are recomputed and their completions rescheduled, once per simulated
instant however many flows started or ended in it (a collective starts one flow per member at
the same moment: re-rating after each would cost the square of their number); stale completion
events are recognised by a version number and ignored.

:meth:`FlowNetwork.start` calls a plain callback when a flow is done (the engine's streams are
callback-driven); :meth:`FlowNetwork.transfer` returns a SimPy event instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import simpy
from simpy.events import NORMAL, Timeout


class Link:
    __slots__ = ("key", "capacity", "flows", "weight", "top")

    def __init__(self, key: Hashable, capacity: float) -> None:
        self.key = key
        self.capacity = capacity
        self.flows: dict[Flow, None] = {}  # insertion-ordered, so runs are reproducible
        self.weight = 0.0
        # No flow on the link is faster than this (an upper bound, reset when the link
        # empties): a share at or above it slows nobody and frees nobody, so the flows on a
        # busy link that is nobody's bottleneck need not be scanned.
        self.top = 0.0


class Flow:
    __slots__ = ("links", "nbytes", "remaining", "rate", "t_last", "on_done", "version")

    def __init__(
        self, links: list[tuple[Link, float]], nbytes: float, on_done: Callable[[], Any]
    ) -> None:
        self.links = links
        self.nbytes = nbytes
        self.remaining = nbytes
        self.rate = 0.0
        self.t_last = 0.0
        self.on_done = on_done
        self.version = 0


class _Completion(Timeout):
    """The scheduled end of one flow at one rate (stale once the flow's version moves on)."""

    __slots__ = ("flow", "version")

    def __init__(
        self, env: simpy.Environment, delay: float, flow: Flow, callback: Callable[[Any], None]
    ) -> None:
        # Timeout's own initialisation, inlined as SimPy does: this runs once per flow rate.
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._delay = delay
        self._ok = True
        self.flow = flow
        self.version = flow.version
        env.schedule(self, NORMAL, delay)


def stale(ev: object) -> bool:
    """Whether a pending event is the completion of a flow since re-rated or done (ignored
    when it fires)."""
    return isinstance(ev, _Completion) and ev.version != ev.flow.version


class FlowNetwork:
    def __init__(self, env: simpy.Environment, capacity: Callable[[Any], float]) -> None:
        self.env = env
        self._capacity = capacity
        self.links: dict[Hashable, Link] = {}
        # This instant's changes, re-rated together by _flush: each touched link's share
        # before the instant's first change, and the flows to re-rate.
        self._touched: dict[Link, float] = {}
        self._dirty: dict[Flow, None] = {}
        self._flush_pending = False

    def link(self, key: Hashable) -> Link:
        ln = self.links.get(key)
        if ln is None:
            ln = Link(key, self._capacity(key))
            self.links[key] = ln
        return ln

    def resolve(self, links: Iterable[tuple[Hashable, float]]) -> list[tuple[Link, float]]:
        """(key, weight) pairs as (link, weight), for :meth:`start`."""
        return [(self.link(k), w) for k, w in links]

    def transfer(self, links: Iterable[tuple[Hashable, float]], nbytes: float) -> simpy.Event:
        """Move ``nbytes`` across the given links (key, weight); the event fires when done."""
        done = self.env.event()
        self.start(self.resolve(links), nbytes, done.succeed)
        return done

    def start(
        self, links: list[tuple[Link, float]], nbytes: float, on_done: Callable[[], Any]
    ) -> None:
        """Move ``nbytes`` across ``links``; ``on_done()`` is called when the last byte is
        through (never from inside this call: an empty transfer ends through the event
        queue)."""
        if nbytes <= 0 or not links:
            Timeout(self.env, 0.0).callbacks.append(lambda _e: on_done())  # type: ignore[union-attr]
            return
        flow = Flow(links, nbytes, on_done)
        flow.t_last = self.env.now
        if not self._flush_pending:
            # Alone, or beside flows no slower than their new share: nobody else changes
            # rate, so the new flow is rated now and nothing waits for the instant's end.
            for ln, w in links:
                if ln.flows and ln.top > ln.capacity / (ln.weight + w):
                    break
            else:
                for ln, w in links:
                    ln.weight += w
                    ln.flows[flow] = None
                self._rate(flow, self.env.now)
                return
        touched = self._touched
        for ln, w in links:
            if ln not in touched:
                touched[ln] = ln.capacity / ln.weight if ln.weight > 0 else float("inf")
            ln.weight += w
            ln.flows[flow] = None
        self._dirty[flow] = None
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Re-rate what this instant's starts and ends changed, once, at the end of the
        instant's events so far."""
        if not self._flush_pending:
            self._flush_pending = True
            Timeout(self.env, 0.0).callbacks.append(self._flush)  # type: ignore[union-attr]

    def _flush(self, _ev: Any = None) -> None:
        self._flush_pending = False
        dirty, touched = self._dirty, self._touched
        self._dirty, self._touched = {}, {}
        for ln, old_share in touched.items():
            if not ln.flows:
                continue
            share = ln.capacity / ln.weight
            if share < old_share:
                # Only flows now faster than the link's new share slow down; the others keep
                # their rate (another link is their bottleneck) and their scheduled completion.
                if ln.top > share:
                    for f in ln.flows:
                        if f.rate > share * (1 + 1e-12):
                            dirty[f] = None
            elif share > old_share and ln.top >= old_share * (1 - 1e-9):
                # Only flows whose bottleneck was this link can speed up.
                for f in ln.flows:
                    if f.rate >= old_share * (1 - 1e-9):
                        dirty[f] = None
        now = self.env.now
        for f in dirty:
            if f.version >= 0:  # not finished meanwhile
                self._rate(f, now)

    def _rate(self, f: Flow, now: float) -> None:
        if f.rate > 0:
            f.remaining -= f.rate * (now - f.t_last)
        f.t_last = now
        rate = -1.0
        for ln, _w in f.links:
            share = ln.capacity / ln.weight
            if rate < 0 or share < rate:
                rate = share
        if f.rate > 0 and abs(rate - f.rate) <= 1e-12 * f.rate:
            return  # unchanged: its scheduled completion still holds
        f.version += 1
        f.rate = rate
        for ln, _w in f.links:
            if rate > ln.top:
                ln.top = rate
        # What rounding leaves of a flow that is in fact done finishes now, not an ulp
        # later: identical flows stay in step (full mode keeps a symmetric cluster symmetric).
        rest = f.remaining if f.remaining > 1e-9 * f.nbytes else 0.0
        _Completion(self.env, rest / rate, f, self._finish)

    def _finish(self, ev: _Completion) -> None:
        flow: Flow = ev.flow
        if ev.version != flow.version:
            return  # stale: the flow was re-rated (or is done)
        touched = self._touched
        speed_up = False
        for ln, w in flow.links:
            old_share = ln.capacity / ln.weight
            del ln.flows[flow]
            ln.weight -= w
            if not ln.flows:
                ln.weight = 0.0
                ln.top = 0.0
            elif ln.top >= old_share * (1 - 1e-9) and (
                # someone else's bottleneck may have been this link: they may speed up (a few
                # flows are checked now; a crowd is left to the instant's single re-rate)
                len(ln.flows) > 8 or any(f.rate >= old_share * (1 - 1e-9) for f in ln.flows)
            ):
                speed_up = True
                if ln not in touched:
                    touched[ln] = old_share
        flow.remaining = 0.0
        flow.version = -1
        self._dirty.pop(flow, None)
        if speed_up:
            self._schedule_flush()
        flow.on_done()
