"""Interrupted runs: checkpoints and the share of wall time that makes progress (goodput).

A run is interrupted when a GPU fails (the GPU profile's ``mtbf_hours`` per GPU: a synchronous
job stops when any of its GPUs does), when anything else of the platform does (its
``mtbf_other_hours``: hosts, NICs, switches, software) and, on spot, when an instance is
reclaimed (the price
profile's preemptions per instance a day). It saves its model state every ``τ`` of
useful work, which takes ``δ`` (the state over the storage's write bandwidth), and after an
interruption spends ``R`` getting going again (new capacity, processes, communicators, and
reading the last checkpoint back) before it re-does the work since that checkpoint.

With interruptions arriving as a Poisson process of rate ``λ`` (the GPUs are held, and can fail
or be reclaimed, during a restart too, which then starts over), the expected wall time to get
one interval of work and its checkpoint done is Daly's ("A higher order estimate of the optimum
checkpoint interval for restart dumps", FGCS 22, 2006, eq. 9)::

    E[T] = exp(λR) / λ · (exp(λ(τ + δ)) − 1)

so goodput = τ / E[T]. It tends to 1 − λ(τ/2 + R) − δ/τ when interruptions are rare, and never
charges more lost time than has passed, as a first-order ``λ(τ/2 + R)`` does once interruptions
come more often than every ``τ/2 + R``. The interval is the one that maximises goodput (it sits
near Young's √(2δ/λ) when interruptions are rare, and does not depend on R); with no time to
write a checkpoint, a fixed :data:`DEFAULT_INTERVAL_MIN` stands in, since the optimum would be to
checkpoint continuously.

Checkpoints are written by the nodes that hold a shard of the state: every node where the
optimizer state is sharded over data parallelism (ZeRO/FSDP, Megatron's distributed
optimizer), else the nodes of one data-parallel replica (plain DDP saves one copy: its
tensor-, pipeline- and context-parallel ranks, wherever the layout puts them). A restart reads
back what every GPU holds: each data-parallel replica loads the parts of the state that are
replicated over data parallelism (the working weights unless ZeRO-3/FSDP shards them, the
optimizer state without ZeRO), so a plain-DDP job of DP replicas reads DP copies, over every
node's read bandwidth up to the storage's aggregate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config.prices import CloudPrice
from .config.scenario import ResolvedScenario
from .errors import UserError
from .network.layout import layout_of
from .workload.memory import bytes_per_param, shard_group
from .workload.model import param_count

DEFAULT_INTERVAL_MIN = 30.0
"""Minutes between checkpoints where writing one takes no modelled time (no storage profile):
frequent enough to bound the loss, rare enough that checkpoint writes stay a small overhead."""

RESTART_MIN = 10.0
"""Minutes from an interruption to training again, besides reading the checkpoint back: detect
the failure, get replacement capacity, start the processes and initialise the communicators.
Sources: MegaScale (Jiang et al., NSDI 2024, Sec. 6.3), over 10,000 GPUs: "The average time
required for detecting failure and executing diagnostic tests is less than 10 minutes", and back
to the pre-crash progress "within 15 minutes from the latest checkpoints" (which includes the
checkpoint load and the lost steps); its Sec. 3.5 puts communicator set-up under 30 s at that
scale once optimised (1,047 s before, on 2,048 GPUs). FT-HSDP (Meta, arXiv 2602.00277):
synchronous training at O(100K) GPUs stalls "10 minutes" per failure recovery. Llama 3 (Sec.
3.3.4: over 90% effective training time with 466 interruptions in 54 days) bounds everything
lost per interruption at about 17 minutes. Faster stacks reach 3 minutes (FT-HSDP), older ones
that wait out PyTorch's 10-minute NCCL timeout 20 or more."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of the whole model state: its size and the time to write and read it."""

    bytes: float
    write_s: float
    read_s: float
    read_bytes: float = 0.0
    """What a restart loads over every GPU: ``bytes`` with the replicated parts once per
    data-parallel replica."""


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
    no gradients), written by the nodes that hold a shard of it and loaded by every GPU, each
    replicated part once per data-parallel replica (see the module docstring): per-node
    bandwidth times those nodes, capped by the storage system's aggregate."""
    params = param_count(rs.model, rs.training.seq_len)
    w, _, opt = bytes_per_param(rs)
    size = params * (w + opt)
    st = rs.storage
    z, replicas = rs.zero_stage, rs.dp_cp
    copies = replicas / shard_group(rs)  # HSDP: the shard groups hold a copy each
    weights = w * (copies if z >= 3 else replicas)
    loaded = params * (weights + opt * (copies if z >= 1 else replicas))
    hosts = rs.fabric.hosts(rs.gpus_per_node)  # storage clients per node
    per_host = -(-rs.gpus_per_node // hosts)
    if z >= 1 and copies == 1:
        writers = rs.nodes * hosts
    else:
        # The hosts of the ranks that hold one copy of the state, each writing its part: data-
        # parallel replica 0 (its TP x PP x CP ranks), or with hybrid sharding shard group 0
        # (the other groups hold copies, as the replicas do; a restart reads one per group)
        lay = layout_of(rs)
        gpn, cp = rs.gpus_per_node, rs.cp
        one = cp if z == 0 else shard_group(rs)  # DP x CP ranks, CP fastest
        writers = len(
            {
                (r // gpn, r % gpn // per_host)
                for r in (
                    lay.rank(t, j % cp, j // cp, p)
                    for t in range(rs.tp)
                    for j in range(one)
                    for p in range(rs.pp)
                )
            }
        )
    write = st.write_gbps_per_client.value * writers
    if st.aggregate_write_gbps is not None:
        write = min(write, st.aggregate_write_gbps.value)
    read = st.read_gbps_per_client.value * rs.nodes * hosts
    if st.aggregate_read_gbps is not None:
        read = min(read, st.aggregate_read_gbps.value)
    return Checkpoint(
        bytes=size, write_s=size / (write * 1e9), read_s=loaded / (read * 1e9), read_bytes=loaded
    )


def _hours(seconds: float) -> str:
    """Hours for a message: ``12.5``, or ``3.2e+12`` where grouped digits would run on."""
    h = seconds / 3600.0
    return f"{h:,.1f}" if h < 1e7 else f"{h:.3g}"


def _best_interval(lam: float, delta: float) -> float:
    """The τ that minimises wall time per unit of work, (exp(λ(τ+δ)) − 1) / τ: where its
    derivative vanishes, (1 − x)·exp(x) = exp(−λδ) with x = λτ in (0, 1). The left side falls
    from 1 to 0 over that interval, so bisection finds the one root (Young's √(2δ/λ) when
    λδ is small)."""
    c = math.exp(-lam * delta)
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if (1.0 - mid) * math.exp(mid) > c:
            lo = mid
        else:
            hi = mid
    return max(0.5 * (lo + hi), 1e-12) / lam


def goodput(
    per_hour: float, ckpt: Checkpoint, step_s: float = 0.0, work_s: float | None = None
) -> Goodput:
    """Goodput under interruptions at ``per_hour`` per wall-clock hour, with the best checkpoint
    interval (see the module docstring). A checkpoint is taken between optimizer steps, so with
    ``step_s`` given the interval is a whole number of steps. ``work_s``: the whole run's work
    (its steps' time); where running it through without a checkpoint inside loses less than
    the best interval would (a run short beside the interval), that is the plan, and a failure
    starts the run again (its final save is no cost of fault tolerance)."""
    restart = RESTART_MIN * 60.0 + ckpt.read_s
    if per_hour <= 0:
        return Goodput(1.0, math.inf, restart)
    lam = per_hour / 3600.0
    delta = ckpt.write_s

    restart_factor = math.exp(min(lam * restart, 700.0)) / lam

    def wall_per_work(tau: float) -> float:
        # expm1 keeps small λ(τ+δ) exact; the exponent is capped where goodput is ~0 anyway
        return restart_factor * math.expm1(min(lam * (tau + delta), 700.0)) / tau

    if delta <= 0:
        tau = DEFAULT_INTERVAL_MIN * 60.0
    else:
        tau = _best_interval(lam, delta)
    if step_s > 0:
        steps = max(1.0, math.floor(tau / step_s))
        tau = min((steps * step_s, (steps + 1) * step_s), key=wall_per_work)
    if work_s is not None and work_s > 0.0:
        whole = restart_factor * math.expm1(min(lam * work_s, 700.0)) / work_s
        if whole <= wall_per_work(tau):
            return Goodput(1.0 / whole, work_s, restart)
    return Goodput(1.0 / wall_per_work(tau), tau, restart)


@dataclass(frozen=True)
class RunReport:
    """The whole run, priced or not: the share of wall time that makes progress, and the
    time to train the token budget (``run.tokens``; None without one)."""

    goodput: float
    time_to_train_days: float | None
    notes: list[str]
    reliability: dict[str, float | None] | None = None
    """The figures behind ``goodput`` where anything interrupts the run (None otherwise):
    ``interruptions_per_hour`` (GPU and other failures, spot preemptions), ``checkpoint_gb``,
    ``checkpoint_write_s``, ``checkpoint_interval_s`` and ``checkpoint_interval_steps`` (the
    interval that loses least; None where the run is short enough to run through without a
    checkpoint inside it), ``restart_s`` (an interruption to training again) and
    ``expected_interruptions`` over the run's wall time (None without ``run.tokens``)."""


def run_report(rs: ResolvedScenario, step_s: float) -> RunReport:
    notes: list[str] = []
    figures: dict[str, float | None] = {}
    g = run_goodput(rs, step_s, notes, figures)
    days = None
    if rs.run.tokens is not None:
        days = rs.run.tokens / rs.training.tokens_per_step * step_s / g / 86400.0
    if figures:
        rate = figures["interruptions_per_hour"]
        figures["expected_interruptions"] = (
            rate * days * 24.0 if days is not None and rate is not None else None
        )
    return RunReport(g, days, notes, figures or None)


UNMODELLED_FAILURES = "are not modelled"


def unmodelled_failures(rs: ResolvedScenario) -> list[str]:
    """A note for each failure rate the GPU profile does not give: those interruptions are
    left out, so the run looks more reliable than it is."""
    g = rs.gpu
    missing = [f for f in ("mtbf_hours", "mtbf_other_hours") if getattr(g, f) is None]
    if not missing:
        return []
    what = {"mtbf_hours": "GPU failures", "mtbf_other_hours": "host, network and software failures"}
    return [
        f"GPU profile '{g.name}' gives no {' or '.join(missing)}: "
        f"{' and '.join(what[f] for f in missing)} {UNMODELLED_FAILURES}, so wall time, "
        "time to train and cost leave those interruptions out"
    ]


def run_goodput(
    rs: ResolvedScenario,
    step_s: float,
    notes: list[str],
    figures: dict[str, float | None] | None = None,
) -> float:
    """The scenario's goodput with the best checkpoint interval, and lines for ``notes`` that
    say where the interruptions come from and what they cost (and, into ``figures``, the
    numbers those lines give: see :attr:`RunReport.reliability`)."""
    rates: list[str] = []
    per_hour = 0.0
    for what, mtbf in (
        (f"GPU failures: {rs.gpus} GPUs at", rs.gpu.mtbf_hours),
        ("other failures (host, network, software):", rs.gpu.mtbf_other_hours),
    ):
        if mtbf is not None:
            per_hour += rs.gpus / mtbf.value
            rates.append(
                f"{what} one per {mtbf.value:,.0f} GPU-hours, one every "
                f"{mtbf.value / rs.gpus:,.1f} h"
            )
    price = rs.price
    spot = isinstance(price, CloudPrice) and rs.price_tier == "spot"
    if spot:
        assert isinstance(price, CloudPrice)
        per_node = price.spot_preemptions_per_day
        if per_node is None:
            notes.append(
                "spot: the profile gives no preemption rate, so preemptions are not modelled "
                "(time and cost are a lower bound)"
            )
        else:
            # Preemptions strike per instance: the whole instances the cluster's nodes rent.
            instances, size = price.instances(rs.nodes, rs.gpus_per_node)
            per_day = per_node.value * instances
            per_hour += per_day / 24.0
            rates.append(
                f"spot preemptions: {per_day:g} a day ({per_node.value:g} per instance × "
                f"{instances} {size:g}-GPU instances)"
            )
    if per_hour <= 0:
        return 1.0
    ck = checkpoint(rs)
    work = None
    if rs.run.tokens is not None and step_s > 0:
        work = math.ceil(rs.run.tokens / rs.training.tokens_per_step) * step_s
    g = goodput(per_hour, ck, step_s, work)
    through = work is not None and g.interval_s >= work  # no checkpoint inside the run
    if figures is not None:
        figures.update(
            interruptions_per_hour=per_hour,
            checkpoint_gb=ck.bytes / 1e9,
            checkpoint_write_s=ck.write_s,
            checkpoint_interval_s=None if through else g.interval_s,
            checkpoint_interval_steps=(
                round(g.interval_s / step_s) if step_s > 0 and not through else None
            ),
            restart_s=g.restart_s,
        )
    if rs.storage.technology == "local_nvme":
        notes.append(
            f"checkpoints go to {rs.storage.name}, node-local storage a failed or reclaimed "
            "node takes with it: a real run also copies them to shared storage (not timed)"
        )
    how = (
        f"a checkpoint of {ck.bytes / 1e9:,.0f} GB takes {ck.write_s:.0f} s to write to "
        f"{rs.storage.name}; "
    )
    if through and work is not None:
        how += (
            f"the run's {work / 60:,.1f} min of work loses less run through without one than "
            "with checkpoints at the best interval, so none is written inside it (a failure "
            "starts the run again)"
        )
    else:
        how += (
            f"written every {g.interval_s / 60:,.1f} min of work "
            + (f"({g.interval_s / step_s:,.0f} steps, " if step_s > 0 else "(")
            + "the interval that loses least)"
        )
    between = 3600.0 / per_hour
    if not spot and g.goodput < 0.01 and step_s >= between > 2.0 * (g.restart_s + ck.write_s):
        # A restart and a checkpoint would leave time to progress, but no checkpoint can
        # fall inside a step: fewer GPUs only make the step longer.
        raise UserError(
            f"one step takes {_hours(step_s)} h, longer than the {_hours(between)} h "
            f"between interruptions of this cluster ({'; '.join(rates)}), so hardly a step "
            f"ever finishes ({g.goodput:.2%} of the time makes progress)",
            file=rs.source_file,
            path="training.global_batch",
            hint="a step that long is the tokens it holds: lower training.global_batch or "
            "training.seq_len (clustersim check shows the layout without the run's figures)",
        )
    if g.goodput < 0.01:
        hint = "use fewer GPUs, faster checkpoint storage or a more reliable part"
        if rs.zero_stage < 3 and rs.dp_cp > 1:
            hint += (
                ", or shard the weights too (ZeRO-3 or FSDP: a restart then reads each part "
                "once, not once per data-parallel replica)"
            )
        if spot:
            assert isinstance(price, CloudPrice)
            others = [t for t, r in price.tier_rates().items() if r is not None and t != "spot"]
            hint = f"use the {' or '.join(others)} tier of {price.name}, or fewer nodes"
        raise UserError(
            f"interruptions ({'; '.join(rates)}) leave {g.goodput:.2%} of the time for "
            f"progress, even at the best checkpoint interval: {how}; a restart takes "
            f"{g.restart_s / 60:,.1f} min (every GPU reading its part back: "
            f"{ck.read_bytes / 1e9:,.0f} GB in all)",
            file=rs.source_file,
            path="cluster.pricing.tier" if spot else "cluster.nodes",
            hint=hint,
        )
    notes.append(
        f"interruptions: {'; '.join(rates)}. {how[0].upper()}{how[1:]}; a restart takes "
        f"{g.restart_s / 60:.1f} min (new capacity, start-up, every GPU reading its part "
        f"back: {ck.read_bytes / 1e9:,.0f} GB in all), "
        f"then the work since the last checkpoint is re-done: {g.goodput:.1%} of wall time "
        f"makes progress, so time to train and $ per useful step are {1.0 / g.goodput:.3f}× "
        "the uninterrupted figures"
    )
    return g.goodput


__all__ = [
    "Checkpoint",
    "DEFAULT_INTERVAL_MIN",
    "Goodput",
    "RESTART_MIN",
    "RunReport",
    "checkpoint",
    "goodput",
    "run_goodput",
    "run_report",
]
