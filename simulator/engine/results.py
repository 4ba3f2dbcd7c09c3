"""What the engine reports: the time categories, the per-rank result and the step's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CATEGORIES = (
    "compute",
    "optimizer",
    "host",
    "comm_tp",
    "comm_cp",
    "comm_dp",
    "comm_pp",
    "pp_bubble",
    "data_stall",
    "imbalance",
    "straggler",
    "overlap",
    "offload",
)
BUSY = ("compute", "optimizer")

STREAMS = ("compute", "tp", "cp", "dp", "pp-fwd", "pp-bwd", "io", "waits")

# How the trace's "waits" thread names each idle category (a span per wait of the compute
# stream; the pipeline's waits are split into bubble and slower stage only in the metrics).
WAIT_LABELS = {
    "comm_tp": "exposed TP comm",
    "comm_cp": "exposed CP comm",
    "comm_dp": "exposed DP comm",
    "comm_pp": "exposed PP comm",
    "pp_bubble": "pipeline bubble or a slower stage",
    "imbalance": "waiting on other ranks",
    "data_stall": "data-loader stall",
}


def span_stream(cat: str) -> str:
    """The trace stream a span of category ``cat`` is drawn on: a communication span on its
    group's stream, anything else (compute, a wait on offloaded activations) on compute."""
    return cat[5:] if cat.startswith("comm_") else "compute"


@dataclass
class RankResult:
    rank: int
    stage: int
    finish: float = 0.0
    acc: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))


def mean_result(members: list[RankResult]) -> RankResult:
    """A stage's ranks as one class: each category's mean, the latest finish."""
    n = len(members)
    out = RankResult(members[0].rank, members[0].stage, max(r.finish for r in members))
    out.acc = {k: sum(r.acc[k] for r in members) / n for k in members[0].acc}
    return out


@dataclass
class EngineResult:
    step_time: float
    ranks: dict[int, RankResult]
    classes: dict[int, RankResult]  # stage -> the class's representative
    mode: str
    events: int
    trace: list[dict[str, Any]] | None
    loader_done: float
    direct: bool = False  # computed without the event queue (engine.direct); events = passes
