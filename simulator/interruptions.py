"""Interrupted runs: checkpoints and the share of wall time that makes progress (goodput).

A run that can be interrupted (a spot instance reclaimed) saves its model state every ``τ`` of
useful work, which takes ``δ`` (the state over the storage's write bandwidth), and after an
interruption spends ``R`` getting going again (new capacity, processes, communicators, and
reading the last checkpoint back) before it re-does the work since that checkpoint.

With interruptions arriving as a Poisson process of rate ``λ`` while the job runs, the expected
wall time to get one interval of work and its checkpoint done is the renewal result (e.g. Daly,
"A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 2006)::

    E[T] = (1/λ + R) · (exp(λ(τ + δ)) − 1)

so goodput = τ / E[T]. It tends to 1 − λ(τ/2 + R) − δ/τ when interruptions are rare, and never
charges more lost time than has passed, as a first-order ``λ(τ/2 + R)`` does once interruptions
come more often than every ``τ/2 + R``. The interval is the one that maximises goodput (it sits
near Young's √(2δ/λ) when interruptions are rare); with no time to write a checkpoint, a fixed
:data:`DEFAULT_INTERVAL_MIN` stands in, since the optimum would be to checkpoint continuously.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config.scenario import ResolvedScenario
from .workload.memory import bytes_per_param
from .workload.model import param_count

DEFAULT_INTERVAL_MIN = 30.0
"""Minutes between checkpoints where writing one takes no modelled time (no storage profile):
frequent enough to bound the loss, rare enough that checkpoint writes stay a small overhead."""

RESTART_MIN = 10.0
"""Minutes from an interruption to training again, besides reading the checkpoint back: get
replacement capacity, start the processes and initialise the communicators."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of the whole model state: its size and the time to write and read it."""

    bytes: float
    write_s: float
    read_s: float


@dataclass(frozen=True)
class Goodput:
    goodput: float
    """Share of wall time that makes progress (0..1]."""
    interval_s: float
    """Useful work between checkpoints."""
    restart_s: float
    """Time from an interruption to training again."""


def checkpoint(rs: ResolvedScenario) -> Checkpoint:
    """The model state a restart needs (working weights, master weights and optimizer states;
    no gradients), written and read by every node at once (each rank its shard, as Megatron's
    and PyTorch's distributed checkpoints do): per-node bandwidth times nodes, capped by the
    storage system's aggregate."""
    params = param_count(rs.model, rs.training.seq_len)
    w, _, opt = bytes_per_param(rs)
    size = params * (w + opt)
    st = rs.storage
    write = st.write_gbps_per_client.value * rs.nodes
    if st.aggregate_write_gbps is not None:
        write = min(write, st.aggregate_write_gbps.value)
    read = st.read_gbps_per_client.value * rs.nodes
    if st.aggregate_read_gbps is not None:
        read = min(read, st.aggregate_read_gbps.value)
    return Checkpoint(bytes=size, write_s=size / (write * 1e9), read_s=size / (read * 1e9))


def goodput(per_hour: float, ckpt: Checkpoint, step_s: float = 0.0) -> Goodput:
    """Goodput under interruptions at ``per_hour`` per wall-clock hour, with the best checkpoint
    interval (see the module docstring). A checkpoint is taken between optimizer steps, so with
    ``step_s`` given the interval is a whole number of steps."""
    restart = RESTART_MIN * 60.0 + ckpt.read_s
    if per_hour <= 0:
        return Goodput(1.0, math.inf, restart)
    lam = per_hour / 3600.0
    delta = ckpt.write_s

    def wall_per_work(tau: float) -> float:
        # expm1 keeps small λ(τ+δ) exact; the exponent is capped where goodput is ~0 anyway
        return (1.0 / lam + restart) * math.expm1(min(lam * (tau + delta), 700.0)) / tau

    if delta <= 0:
        tau = DEFAULT_INTERVAL_MIN * 60.0
    else:
        from scipy.optimize import minimize_scalar

        # wall_per_work is unimodal in log τ; search from 1 s to a year.
        res = minimize_scalar(
            lambda x: wall_per_work(math.exp(x)),
            bounds=(0.0, math.log(3.2e7)),
            method="bounded",
            options={"xatol": 1e-6},
        )
        tau = math.exp(res.x)
    if step_s > 0:
        steps = max(1.0, math.floor(tau / step_s))
        tau = min((steps * step_s, (steps + 1) * step_s), key=wall_per_work)
    return Goodput(1.0 / wall_per_work(tau), tau, restart)


__all__ = ["Checkpoint", "DEFAULT_INTERVAL_MIN", "Goodput", "RESTART_MIN", "checkpoint", "goodput"]
