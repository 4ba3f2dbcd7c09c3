"""The direct path's link bookkeeping: a transfer's time alone on its links, and when each link
carries one, so that the walk knows whether any two ever shared a link (then the event engine
decides)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..network.flows import Link


class LinkBusy:
    """When each link carries a transfer; a conflict is two transfers on a link at once.

    Transfers come in sources whose own transfers follow one another (one rank's blocking
    sends on one route, one rank's gradient buckets): only a link that several sources cross
    needs its transfers merged and checked."""

    def __init__(self) -> None:
        # per link: (starts, ends or one duration for all)
        self.sources: dict[int, list[tuple[list[float], list[float] | float]]] = defaultdict(list)

    def add(self, links: list[tuple[Link, float]], starts: list[float], ends: Any) -> None:
        """Transfers on ``links`` from ``starts``, ending at ``ends`` (a list, or one duration
        for every transfer)."""
        if starts:
            for ln, _w in links:
                self.sources[id(ln)].append((starts, ends))

    def clear(self) -> bool:
        import numpy as np

        for sources in self.sources.values():
            if len(sources) < 2:
                continue
            t0 = np.concatenate([np.asarray(a, dtype=float) for a, _e in sources])
            t1 = np.concatenate(
                [
                    np.asarray(a, dtype=float) + e if isinstance(e, float) else np.asarray(e)
                    for a, e in sources
                ]
            )
            order = np.argsort(t0, kind="stable")
            t0, t1 = t0[order], t1[order]
            ends = np.maximum.accumulate(t1[:-1])
            if np.any(t0[1:] < ends - 1e-12 * np.maximum(1.0, np.abs(ends))):
                return False
        return True


def solo_time(links: list[tuple[Link, float]], nbytes: float) -> float:
    """Seconds ``nbytes`` take on ``links`` with nothing else on them (FlowNetwork's rate)."""
    if nbytes <= 0 or not links:
        return 0.0
    rate = min(ln.capacity / w for ln, w in links)
    return nbytes / rate


__all__ = ["LinkBusy", "solo_time"]
