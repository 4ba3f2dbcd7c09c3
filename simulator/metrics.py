"""What a simulated run yields: step time, throughput, TFLOP/s, MFU, idle breakdown, memory.

The idle breakdown is per rank class (pipeline stage); the cluster-wide figures are the mean over
classes, which all have the same number of GPUs, so busy + Σ idle = step time holds for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config.scenario import ResolvedScenario
from .engine.sim import BUSY, CATEGORIES, EngineResult
from .workload.memory import memory_report
from .workload.model import hardware_flops_per_token, model_flops_per_token, param_count
from .workload.recompute import skips_last_matmul


@dataclass
class Metrics:
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    memory_gb_per_gpu: float
    fits: bool
    busy_s: float
    idle_s: dict[str, float]
    breakdown_s: dict[str, float]
    per_class: dict[str, dict[str, float]]
    gpus: int
    mode: str
    events: int
    params: int
    scaling_efficiency: float | None = None
    scaling_reference: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def idle_fraction(self) -> float:
        return sum(self.idle_s.values()) / self.step_time_s if self.step_time_s else 0.0

    @property
    def drawing_fraction(self) -> float:
        """Share of GPU wall time at the power of computing: compute and optimizer, and the
        compute that overlapping DP collectives stretched (``overlap``, idle for the step's
        accounting, but the SMs are busy then), 0..1."""
        if not self.step_time_s:
            return 0.0
        busy = self.busy_s + self.idle_s.get("overlap", 0.0)
        return min(1.0, max(0.0, busy / self.step_time_s))


def _split_stage_waits(rs: ResolvedScenario, per_class: dict[str, dict[str, float]]) -> None:
    """Split each stage's pipeline wait into the pipeline's own bubble and waiting on slower
    stages. A stage of per-micro-batch time t (its compute and the communication on its
    critical path, pipeline sends included) in a balanced pipeline idles (p-1)/v · t while
    the pipeline fills and drains ((p-1)/(m+p-1) of a 1F1B step; v virtual stages divide it);
    what a lighter stage waits beyond that is the heavier stages' extra work, each micro-batch
    (``imbalance``, "waiting on other stages or ranks"). Balanced stages keep their whole wait as
    bubble; busy + idle is unchanged."""
    m = rs.micro_batches
    if rs.pp < 2 or m < 1:
        return
    fill = (rs.pp - 1) / rs.parallelism.virtual_stages
    for acc in per_class.values():
        wait = acc.get("pp_bubble", 0.0)
        # A micro-batch's time on the stage: its compute (at a straggler's pace, slowed by
        # DP collectives beside it, waiting on offloaded activations) and the communication
        # on its critical path, the pipeline's own sends included.
        own = (
            "compute",
            "host",
            "comm_tp",
            "comm_cp",
            "comm_pp",
            "straggler",
            "overlap",
            "offload",
        )
        per_mb = sum(acc.get(k, 0.0) for k in own) / m
        extra = wait - fill * per_mb
        if extra > 1e-12 * max(wait, 1.0):
            acc["pp_bubble"] = wait - extra
            acc["imbalance"] = acc.get("imbalance", 0.0) + extra


def compute_metrics(rs: ResolvedScenario, res: EngineResult) -> Metrics:
    step = res.step_time
    tokens = rs.training.tokens_per_step
    s = rs.training.seq_len
    gpus = rs.gpus
    mflops = model_flops_per_token(rs.model, s) * tokens
    hflops = (
        hardware_flops_per_token(
            rs.model, s, rs.parallelism.recompute, rs.selective_policy, skips_last_matmul(rs)
        )
        * tokens
    )
    peak = rs.gpu.peak_flops(rs.training.precision)
    per_class: dict[str, dict[str, float]] = {
        # (plain floats: the direct walk books some from numpy)
        f"stage{stage}": {k: float(v) for k, v in rr.acc.items()}
        for stage, rr in res.classes.items()
    }
    _split_stage_waits(rs, per_class)
    mean = dict.fromkeys(CATEGORIES, 0.0)
    for acc in per_class.values():
        for k, v in acc.items():
            mean[k] += v / len(per_class)
    busy = sum(mean[k] for k in BUSY)
    idle = {k: v for k, v in mean.items() if k not in BUSY}
    mem = memory_report(rs)
    return Metrics(
        step_time_s=step,
        tokens_per_s=tokens / step,
        samples_per_s=rs.training.global_batch / step,
        model_tflops_per_gpu=mflops / step / gpus / 1e12,
        hardware_tflops_per_gpu=hflops / step / gpus / 1e12,
        mfu=mflops / step / gpus / peak,
        hfu=hflops / step / gpus / peak,
        memory_gb_per_gpu=mem.peak.total_gb,
        fits=mem.fits,
        busy_s=busy,
        idle_s=idle,
        breakdown_s=mean,
        per_class=per_class,
        gpus=gpus,
        mode=res.mode,
        events=res.events,
        params=param_count(rs.model, s),
    )
