"""`simulate`: a pure function from a resolved scenario to metrics and cost.

No global state: sweeps may call it thousands of times, in any process (today's date is read
only for a note on a price quoted after it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from .catalog import replacement_notes
from .config.hardware import DEFAULT_CLOCK_EXP
from .config.loading import resolve_dict
from .config.price_checks import price_slips
from .config.scenario import ResolvedScenario
from .cost import CostReport, compute_cost
from .engine.compute import efficiency_fallbacks, unit_slips
from .engine.periodic import run_periodic
from .engine.sim import EngineResult, run_engine
from .engine.stragglers import pace as straggler_pace
from .errors import UserError
from .interruptions import RunReport, run_report, unmodelled_failures
from .limits import check_dp_collectives, check_full_size, check_trace_size
from .metrics import Metrics, compute_metrics
from .workload.memory import TIGHT_SHARE, memory_report
from .workload.model import attention_core_flops_per_token, model_flops_per_token


@dataclass
class SimResult:
    rs: ResolvedScenario
    metrics: Metrics
    cost: CostReport | None
    engine: EngineResult
    run: RunReport
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        m = self.metrics
        rs = self.rs
        return {
            "scenario": rs.name,
            "file": rs.source_file,
            "gpus": m.gpus,
            "nodes": rs.nodes,
            "gpu": rs.gpu.name,
            "mode": m.mode,
            "layout": rs.layout(),
            # every GPU's compute stretched to the expected slowest one's (run.stragglers)
            "straggler_pace": straggler_pace(rs),
            "step_time_s": m.step_time_s,
            "tokens_per_s": m.tokens_per_s,
            "samples_per_s": m.samples_per_s,
            "model_tflops_per_gpu": m.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": m.hardware_tflops_per_gpu,
            "mfu": m.mfu,
            "hfu": m.hfu,
            "scaling_efficiency": m.scaling_efficiency,
            "scaling_reference": m.scaling_reference,
            "memory_gb_per_gpu": m.memory_gb_per_gpu,
            "fits": m.fits,
            "busy_s": m.busy_s,
            "idle_s": m.idle_s,
            "breakdown_s": m.breakdown_s,
            "per_class": m.per_class,
            "params": m.params,
            "events": m.events,
            "goodput": self.run.goodput,
            "tokens_per_step": rs.training.tokens_per_step,
            "run_tokens": rs.run.tokens,
            "time_to_train_days": self.run.time_to_train_days,
            "interruptions": self.run.notes,
            "reliability": self.run.reliability,
            "notes": self.notes,
            "cost": self.cost.as_dict() if self.cost else None,
        }


def _node_aligned(rs: ResolvedScenario) -> bool:
    """Whether every group sits on nodes, leaf switches, NICs and (PCIe through the host) CPU
    sockets as the first of its kind does."""
    from .network.layout import layout_of
    from .network.topology import Topology

    if not layout_of(rs).node_aligned():
        return False
    topo = Topology(rs)
    return topo.socket_aligned() and topo.nic_aligned() and (rs.nodes <= 1 or topo.leaf_aligned())


def _full_or_periodic(rs: ResolvedScenario) -> EngineResult:
    try:
        check_full_size(rs)
    except UserError:
        return run_periodic(rs)
    return run_engine(rs, full=True)


# The share of the step spent waiting for the host above which simulate says so.
HOST_BOUND_SHARE = 0.1


def simulate(
    rs: ResolvedScenario, full: bool = False, trace: bool = False, scaling: bool = True
) -> SimResult:
    notes: list[str] = []
    if not full and not _node_aligned(rs):
        # Groups that straddle nodes differ from rank to rank: simulate every rank where that
        # is affordable, else say that the one simulated per stage may be the faster kind.
        try:
            check_full_size(rs)
            full = True
            notes.append(
                "some TP/CP/shard/stage groups straddle node (or leaf switch, or CPU socket) "
                "boundaries, or share NICs, and others do not, so every rank was simulated "
                "(full mode)"
            )
        except UserError:
            notes.append(
                "some TP/CP/shard/stage groups straddle node (or leaf switch, or CPU socket) "
                "boundaries, or share NICs, and others do not; symmetric mode simulated one "
                "rank per stage and may be optimistic: use GPUs per node (and per socket, per "
                "NIC, and nodes per leaf) that the group sizes divide (or that divide them)"
            )
    notes.extend(rs.override_notes)
    notes.extend(rs.plan_notes())
    notes.extend(replacement_notes(rs.profile_names()))
    if rs.gpu.clock_scale < 1.0:
        g = rs.gpu
        a = g.power_clock_exponent.value if g.power_clock_exponent else DEFAULT_CLOCK_EXP
        notes.append(
            f"GPUs limited to {g.power_limit_w.value:g} W of their {g.tdp_w.value:g} W TDP "  # type: ignore[union-attr]
            f"(cluster.gpu.power_limit_w): compute-bound kernels run at {g.clock_scale:.3f} "
            f"of the rated clock (board power ~ clock^{a:g}); memory-bound ones are unchanged"
        )
    notes.extend(rs.model_notes())
    notes.extend(unmodelled_failures(rs))
    notes.extend(efficiency_fallbacks(rs))
    notes.extend(unit_slips(rs))
    notes.extend(price_slips(rs.price, dt.date.today()))
    if full:
        check_full_size(rs)
    if trace:
        check_trace_size(rs, full)
    check_dp_collectives(rs, full)
    # Symmetric mode extrapolates the steady state where that is exact; a trace or the full
    # mode needs every event.
    eng = run_engine(rs, full=full, trace=trace) if full or trace else run_periodic(rs)
    met = compute_metrics(rs, eng)
    if not met.fits:
        notes.insert(
            0,
            f"the plan needs {met.memory_gb_per_gpu:,.1f} GB per GPU of the "
            f"{rs.gpu.capacity_gb:,.1f} GB there is: it cannot run as given, and every "
            "figure here is for a plan that does not fit (`clustersim check` suggests changes "
            "that make it fit)",
        )
    elif met.memory_gb_per_gpu > TIGHT_SHARE * rs.gpu.capacity_gb:
        # (no figures of its own: a sweep prints a note once for all the points it concerns)
        notes.append(
            f"memory is tight: above {TIGHT_SHARE:.0%} of the GPU's; PyTorch's caching "
            "allocator reserves more than the live tensors counted here, so leave headroom "
            "(`clustersim check`)"
        )
    m, seq = rs.model, rs.training.seq_len
    attention = m.layers * 3.0 * attention_core_flops_per_token(m, seq)
    if max(met.mfu, met.hfu) > 1.0 and attention > 0.25 * model_flops_per_token(m, seq):
        notes.append(
            f"{'HFU' if met.hfu >= met.mfu else 'MFU'} {max(met.mfu, met.hfu):.0%}: attention "
            "is counted as the full s×s product, the convention published MFU figures use, "
            "and a causal kernel computes about half of it; at this sequence length attention "
            "dominates, so the utilisation overstates the GPU's work"
        )
    host = met.breakdown_s.get("host", 0.0)
    if host > HOST_BOUND_SHARE * met.step_time_s:
        per_call = rs.software.host_us_per_collective
        notes.append(
            f"host-bound: the GPUs wait {host / met.step_time_s:.0%} of the step for the host to "
            f"issue kernels ({rs.software.host_us_per_kernel.value:g} us each"
            + (f", {per_call.value:g} us per collective call" if per_call else "")
            + " in the stack's profile): a larger micro-batch gives each kernel more work, a "
            "lower TP degree issues fewer collectives, and CUDA graphs or torch.compile issue "
            "fewer, larger kernels"
        )
    if scaling:
        _scaling(rs, met)
        ref_nodes = (met.scaling_reference or {}).get("nodes", 0)
        if ref_nodes > rs.nodes:
            notes.append(
                f"the scaling reference ({ref_nodes} nodes) is larger than this cluster "
                f"({rs.nodes}): the efficiency compares per-GPU throughput with a bigger "
                "layout, so above 100% means this one does more per GPU"
            )
    run = run_report(rs, met.step_time_s)
    cost = compute_cost(
        rs,
        met.step_time_s,
        min(1.0, max(0.0, met.idle_fraction)),
        met.drawing_fraction,
        run=run,
    )
    return SimResult(rs, met, cost, eng, run, notes)


def reference_layout(rs: ResolvedScenario) -> ResolvedScenario | None:
    """The same model and plan on the scenario's reference node count, or on the fewest nodes
    on which it divides and fits. The global batch stays (strong scaling) where it divides."""
    base = dict(rs.raw)
    if not base:
        return None
    par = dict(base.get("parallelism") or {})
    par["dp"] = "auto"
    base["parallelism"] = par
    if rs.run.scaling_reference is not None:
        candidates = [rs.run.scaling_reference.nodes]
    else:
        candidates = _reference_candidates(rs)
    why: UserError | None = None
    # A reference whose groups straddle nodes unevenly where the scenario's do not runs slower
    # per GPU for its placement alone (a ring's pace is set by the node with fewest members),
    # which would read as scaling above 100%: taken only if no evenly placed one fits.
    aligned = _node_aligned(rs)
    uneven: ResolvedScenario | None = None
    for nodes in candidates:
        data = {**base, "cluster": {**base["cluster"], "nodes": nodes}}
        if nodes > 1 and not data["cluster"].get("network") and rs.network is not None:
            data["cluster"]["network"] = {"profile": rs.network.name}
        for sets in ([], _weak_batch(rs, nodes)):
            try:
                ref = resolve_dict(data, sets, rs.source_file)
            except UserError as exc:
                why = why or exc
                continue
            if rs.run.scaling_reference is not None:
                return ref
            if memory_report(ref).fits:
                if not aligned or _node_aligned(ref):
                    return ref
                uneven = uneven or ref
    if uneven is not None:
        return uneven
    if rs.run.scaling_reference is not None:
        # The user asked for this reference: say why it cannot be laid out, not nothing.
        reason = why.message if why is not None else "it cannot be laid out"
        raise UserError(
            f"the scaling reference on {rs.run.scaling_reference.nodes} node(s) is not a valid "
            f"layout of this plan: {reason}",
            file=rs.source_file,
            path="run.scaling_reference.nodes",
            hint=(why.hint if why is not None and why.hint else "")
            + ("; or " if why is not None and why.hint else "")
            + "pick a node count whose GPUs hold whole TP x PP x CP groups "
            f"({rs.tp * rs.pp * rs.cp} GPUs each), or remove run.scaling_reference",
        )
    return None


def _reference_candidates(rs: ResolvedScenario) -> list[int]:
    """Node counts to try for the reference, fewest first: multiples of the smallest count whose
    GPUs hold whole model-parallel groups; every one of the first 32, then doubling, so that the
    search costs a few dozen resolutions even on 100,000 nodes."""
    from math import gcd

    group = rs.tp * rs.pp * rs.cp
    step = group // gcd(group, rs.gpus_per_node)
    out: list[int] = []
    k = 1
    while k * step <= rs.nodes:
        out.append(k * step)
        k = k + 1 if k < 32 else k * 2
    if rs.nodes not in out:
        out.append(rs.nodes)
    return out


def _weak_batch(rs: ResolvedScenario, nodes: int) -> list[str]:
    gb = max(1, rs.training.global_batch * nodes // rs.nodes)
    return [f"training.global_batch={gb}"]


def _scaling(rs: ResolvedScenario, met: Metrics) -> None:
    ref = reference_layout(rs)
    if ref is None:
        return
    if ref.nodes == rs.nodes and ref.training.global_batch == rs.training.global_batch:
        met.scaling_efficiency = 1.0
        met.scaling_reference = {  # the scenario itself: the same fields as any reference
            "nodes": ref.nodes,
            "gpus": ref.gpus,
            "dp": ref.dp,
            "global_batch": ref.training.global_batch,
            "step_time_s": met.step_time_s,
            "tokens_per_s_per_gpu": met.tokens_per_s / met.gpus,
        }
        return
    rm = compute_metrics(ref, run_periodic(ref) if _node_aligned(ref) else _full_or_periodic(ref))
    per_gpu = met.tokens_per_s / met.gpus
    ref_per_gpu = rm.tokens_per_s / rm.gpus
    met.scaling_efficiency = per_gpu / ref_per_gpu
    met.scaling_reference = {
        "nodes": ref.nodes,
        "gpus": ref.gpus,
        "dp": ref.dp,
        "global_batch": ref.training.global_batch,
        "step_time_s": rm.step_time_s,
        "tokens_per_s_per_gpu": ref_per_gpu,
    }
