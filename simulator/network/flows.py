"""Bandwidth sharing: flows that cross the same link at the same time share its capacity.

Each link divides its capacity equally among the flows on it, counting a flow of weight w as w
flows (in symmetric mode one simulated flow stands for w identical ones, and its bytes are those
of one of them). A flow moves at the smallest share among the links it crosses: capacity / total
weight on the link. Whenever a flow starts or ends, the rates of the
flows sharing a link with it are recomputed and their completions rescheduled; stale completion
events are recognised by a version number and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import simpy


class Link:
    __slots__ = ("key", "capacity", "flows", "weight", "busy_bytes")

    def __init__(self, key: Hashable, capacity: float) -> None:
        self.key = key
        self.capacity = capacity
        self.flows: dict[Flow, None] = {}  # insertion-ordered, so runs are reproducible
        self.weight = 0.0
        self.busy_bytes = 0.0


class Flow:
    __slots__ = ("links", "nbytes", "remaining", "weight", "rate", "t_last", "done", "version")

    def __init__(self, links: list[tuple[Link, float]], nbytes: float, done: simpy.Event) -> None:
        self.links = links
        self.nbytes = nbytes
        self.remaining = nbytes
        self.rate = 0.0
        self.t_last = 0.0
        self.done = done
        self.version = 0


class FlowNetwork:
    def __init__(self, env: simpy.Environment, capacity: Callable[[Any], float]) -> None:
        self.env = env
        self._capacity = capacity
        self.links: dict[Hashable, Link] = {}

    def link(self, key: Hashable) -> Link:
        ln = self.links.get(key)
        if ln is None:
            ln = Link(key, self._capacity(key))
            self.links[key] = ln
        return ln

    def transfer(self, links: Iterable[tuple[Hashable, float]], nbytes: float) -> simpy.Event:
        """Move ``nbytes`` across the given links (key, weight); the event fires when done."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        lk = [(self.link(k), w) for k, w in links]
        if not lk:
            done.succeed()
            return done
        flow = Flow(lk, nbytes, done)
        flow.t_last = self.env.now
        slowed: dict[Flow, None] = {}
        for ln, w in lk:
            ln.weight += w
            share = ln.capacity / ln.weight
            # Only flows now faster than the link's new share slow down; the others keep
            # their rate (another link is their bottleneck) and their scheduled completion.
            for f in ln.flows:
                if f.rate > share * (1 + 1e-12):
                    slowed[f] = None
            ln.flows[flow] = None
        slowed[flow] = None
        self._rerate(slowed)
        return done

    def _rerate(self, flows: Iterable[Flow]) -> None:
        now = self.env.now
        for f in flows:
            if f.rate > 0:
                f.remaining -= f.rate * (now - f.t_last)
            f.t_last = now
            rate = min([ln.capacity / ln.weight for ln, _w in f.links])
            if f.rate > 0 and abs(rate - f.rate) <= 1e-12 * f.rate:
                continue  # unchanged: its scheduled completion still holds
            f.version += 1
            f.rate = rate
            # What rounding leaves of a flow that is in fact done finishes now, not an ulp
            # later: identical flows stay in step (full mode keeps a symmetric cluster symmetric).
            rest = f.remaining if f.remaining > 1e-9 * f.nbytes else 0.0
            delay = rest / rate
            ev = self.env.timeout(delay)
            ev.callbacks.append(self._finisher(f, f.version))

    def _finisher(self, flow: Flow, version: int) -> Callable[[simpy.Event], None]:
        return lambda _e: self._finish(flow, version)

    def _finish(self, flow: Flow, version: int) -> None:
        if version != flow.version or flow.done.triggered:
            return
        freed: dict[Flow, None] = {}
        for ln, w in flow.links:
            old_share = ln.capacity / ln.weight
            ln.flows.pop(flow, None)
            ln.weight -= w
            if ln.weight < 1e-12:
                ln.weight = 0.0
            # Only flows whose bottleneck was this link can speed up.
            for f in ln.flows:
                if f.rate >= old_share * (1 - 1e-9):
                    freed[f] = None
        flow.remaining = 0.0
        flow.done.succeed()
        if freed:
            self._rerate(freed)
