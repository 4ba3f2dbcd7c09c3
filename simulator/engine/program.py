"""The per-layer "programs" the engine runs.

A *program* is the list of items a pass over one layer runs on the compute stream: compute
spans and collectives. Collectives whose links no other traffic uses are timed analytically and
folded into the program (exact: nothing can contend with them); the others go through the flow
network at run time. :func:`build_program` turns an operation list into one, timing each
operation with :class:`~simulator.engine.compute.OpTimer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

from ..config.scenario import ResolvedScenario
from ..workload.ops import Op
from .compute import OpTimer


@dataclass
class Item:
    """One step of a program: a span of known length, or a collective to run through flows."""

    kind: str  # "span" or "coll"
    name: str
    dur: float = 0.0
    cat: str = "compute"  # accounting category of a span
    wait: float = 0.0  # part of ``dur`` that is straggler wait (see engine.stragglers)
    host: float = 0.0  # part of ``dur`` the GPU waits for the host to issue kernels
    hide: float = 0.0  # a flow collective: seconds of the span before it that it may overlap
    group: str | None = None
    coll: str | None = None
    size: float = 0.0

    def book(self, acc: dict[str, float]) -> None:
        """Add this span's time to ``acc``: its category, less the straggler wait and the
        wait for the host it holds."""
        acc[self.cat] = acc.get(self.cat, 0.0) + self.dur - self.wait - self.host
        if self.wait:
            acc["straggler"] = acc.get("straggler", 0.0) + self.wait
        if self.host:
            acc["host"] = acc.get("host", 0.0) + self.host


@dataclass
class Program:
    """Built once, then run many times: its summaries are computed on first use."""

    items: list[Item] = field(default_factory=list)

    @cached_property
    def analytic(self) -> bool:
        return all(i.kind == "span" for i in self.items)

    @cached_property
    def duration(self) -> float:
        return sum(i.dur for i in self.items)

    @cached_property
    def categories(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i in self.items:
            if i.kind == "span":
                i.book(out)
        return out

    @cached_property
    def compute_share(self) -> float:
        """The share of its time the program computes (its compute spans, stretched to a
        straggler's pace): what DP collectives running beside it slow down."""
        busy = sum(i.dur for i in self.items if i.kind == "span" and i.cat == "compute")
        return busy / self.duration if self.duration > 0 else 0.0

    @cached_property
    def span_runs(self) -> list[tuple[int, float, tuple[tuple[str, float], ...]] | None]:
        """For each item that starts two or more spans back to back: the index after them,
        their length, and what they book, span by span ((category, seconds), as
        :meth:`Item.book` adds them); ``None`` elsewhere. A span that a collective after it
        hides under (``hide``) is left out of the run: that collective starts inside it."""
        items, n = self.items, len(self.items)
        out: list[tuple[int, float, tuple[tuple[str, float], ...]] | None] = [None] * n
        for i in range(n):
            j = i
            while j < n and items[j].kind == "span":
                j += 1
            if j < n and j > i and items[j].hide > 0:
                j -= 1
            if j - i < 2:
                continue
            booked: list[tuple[str, float]] = []
            for it in items[i:j]:
                booked.append((it.cat, it.dur - it.wait - it.host))
                if it.wait:
                    booked.append(("straggler", it.wait))
                if it.host:
                    booked.append(("host", it.host))
            out[i] = (j, sum(it.dur for it in items[i:j]), tuple(booked))
        return out

    def extend(self, other: Program) -> None:
        self.items.extend(other.items)
        for name in ("analytic", "duration", "categories", "compute_share", "span_runs"):
            self.__dict__.pop(name, None)


def twin_suffixes(flow: Program, twin: Program) -> list[Program] | None:
    """For each item of ``flow``, the rest of ``twin`` from the same point on: ``twin`` is
    ``flow`` with its collectives timed analytically (the same spans, each collective a span of
    its own, or none where it takes no time). ``None`` where the two do not line up."""
    out: list[Program] = []
    j = 0
    titems = twin.items
    for it in flow.items:
        out.append(Program(titems[j:]))
        nxt = titems[j] if j < len(titems) else None
        if it.kind == "span":
            if nxt is None or nxt.kind != "span" or nxt.name != it.name or nxt.dur != it.dur:
                return None
            j += 1
        elif nxt is not None and nxt.cat == f"comm_{it.group}" and nxt.name == it.name:
            j += 1
    return out if j == len(titems) else None


def offload_wait(rs: ResolvedScenario, layer_s: float) -> Program:
    """What a layer pass waits for activation offloading, averaged over the model's layers: an
    offloaded layer's saved activations cross the host link while the next layer computes (to
    the host after its forward, back before its backward), so only what the copy takes
    beyond one layer's pass (``layer_s``) stalls the step, in ``parallelism.
    offload_activation_layers`` of every ``model.layers``."""
    n = rs.parallelism.offload_activation_layers
    link = rs.gpu.host_link_gbps
    if not n or link is None:
        return Program()
    from ..workload.activations import activation_bytes_per_layer

    eff = rs.gpu.efficiency.host_link
    bw = link.value * 1e9 * (eff.value if eff else 1.0)
    f = rs.fabric
    if f.technology == "pcie_switch" and f.shared_uplink_gbps is not None:
        # every GPU behind the switch copies its layers at the same time, up one uplink
        up = f.shared_uplink_gbps.value * 1e9 * f.achievable_fraction.value
        bw = min(bw, up / rs.gpus_per_node)
    copy = activation_bytes_per_layer(rs) / bw
    stall = max(0.0, copy - layer_s) * n / rs.model.layers
    return Program([Item("span", "activation offload", stall, "offload")] if stall > 0 else [])


# The attention's kernels without a fused one (``ops.layer_ops``; the softmax between them is
# a memory-bound op), whose time a CP ring's exchange hides behind.
ATTENTION_OPS = ("attn_scores", "attn_values")


def build_program(
    ops: list[Op],
    timer: OpTimer,
    coll_time: dict[str, float | None],
    cat: str = "compute",
    overlap_tp: bool = False,
    pace: float = 1.0,
    together: Callable[[list[str]], list[float]] | None = None,
    lead: dict[str, float | None] | None = None,
) -> Program:
    """Compute spans merged where adjacent; a collective becomes a span when ``coll_time`` gives
    its analytic time for the group (key ``"group:coll:size"``), else a flow-network item.

    ``pace`` (≥ 1) stretches every compute span to the expected slowest GPU's; the stretch is the
    span's ``wait``.

    Inside a span each op starts when the GPU is free and the host has issued it (one kernel
    per ``host_us_per_kernel``), so a span of short kernels runs at the host's pace.

    With ``overlap_tp`` a TP collective hides behind the GEMM right before it, in the same span
    (as in Megatron's TP communication overlap; each GEMM hides one collective), from the
    GEMM's start to the span's end; only what that cannot cover stays exposed. An analytic one
    is shortened by that time; one that runs through the flow network starts that long before
    the span ends (its ``hide``). A collective the stack itself launches beside the GEMM
    before it (``Op.overlapped``: Megatron's asynchronous TP backward) hides the same way.

    A CP ring's collectives start together behind the attention kernel before them and share
    its links, as in the flow network: ``together`` gives, for the keys of such a run, when
    each ends after their common start (without it, one after another).

    The host issues ahead while the GPU runs an exposed collective: ``lead`` gives each
    collective's time alone (key as ``coll_time``), so a program and its twin with the
    collectives timed analytically keep the same spans (without it, ``coll_time``'s)."""
    prog = Program()
    # The span being built, in seconds from its start: ``end``, when the GPU finishes its
    # last kernel so far; ``issued``, when the host has issued them all (one kernel per
    # host_us_per_kernel: eager frameworks); ``gemm_at``, when the latest GEMM began.
    end = issued = 0.0
    gpu = 0.0  # the span's kernels' own time so far
    gemm_at: float | None = None
    # A CP ring's exchange hides behind the attention kernel before it (``attn``: its
    # duration, paced); ``ring``: the exposed time of each analytic collective of the run
    # started behind it, in order.
    attn = attn_at = 0.0
    ring: list[float] = []
    in_attn = False  # within the attention's kernels (one fused, or scores-softmax-values)
    pending_name: list[str] = []

    def hide() -> float:
        """How long the span's latest GEMM runs before the span ends: what an overlapped TP
        collective right after it can hide behind (it starts with the GEMM)."""
        return (end - gemm_at) * pace if gemm_at is not None else 0.0

    def attn_window() -> float:
        """How long from the attention's start to the span's end (paced): what a CP ring's
        exchange runs beside (the kernel, and the host's issue of what follows where that
        takes longer)."""
        return max(attn, (end - attn_at) * pace)

    def flush(then: float = 0.0) -> None:
        """Close the span; ``then``: how long the GPU is busy with what follows it (an exposed
        collective), which the host spends issuing the next span's kernels."""
        nonlocal end, issued, gemm_at, pending_name, gpu
        if end > 0:
            # the span's time beyond its kernels' own is the GPU waiting for the host; the
            # straggler's stretch is its kernels' (the span stretches whole, as it always has)
            host = end - gpu if end - gpu > 1e-9 * end else 0.0
            prog.items.append(
                Item(
                    "span",
                    "+".join(pending_name[:3]) + ("…" if len(pending_name) > 3 else ""),
                    end * pace,
                    cat,
                    wait=(end - host) * (pace - 1.0),
                    host=host * pace,
                )
            )
        # A GEMM hides only the collective right after its span. The host issues the next
        # span's kernels while the GPU runs ``then`` (the host clock is relative to each span's
        # start; a lead passes through a span without kernels), and so it does while this
        # span's kernels outlast their issue: that lead is carried too. (It was not: a TP
        # collective the stack hides behind its GEMM then took the host's lead with it, and a
        # host-bound step ran up to 4% slower with the overlap on than off.) The clock is the
        # span's own, which ``pace`` stretches at its end: ``then``, in seconds, enters it
        # unstretched.
        issued = -then / pace + (issued if end == 0.0 else min(0.0, issued - end))
        end = gpu = 0.0
        gemm_at = None
        pending_name = []

    def key(op: Op) -> str:
        return f"{op.group}:{op.collective}:{op.msg_bytes}"

    def ring_run(i: int) -> list[float]:
        """Exposed seconds of each analytic CP collective from ``ops[i]`` on that starts
        with it behind the attention kernel: each waited for in turn after the span ends."""
        keys: list[str] = []
        # The host's lead once this span closes (``flush``); each later collective of the run
        # costs it ``host_coll_s`` (a stack's Python around each call)
        lead = min(0.0, issued - end)
        for op in ops[i:]:
            if op.only == "backward":
                continue
            if op.kind != "collective" or op.group != "cp" or not op.overlapped:
                break
            if keys:
                lead += timer.host_coll_s
                if lead > 0:
                    # the host issues it after a span of its own, which it starts under, not
                    # with the one before; within the lead it has none (as through the flows)
                    break
            keys.append(key(op))
        if together is not None:
            ends = together(keys)
        else:
            ends = list(accumulate(coll_time.get(k) or 0.0 for k in keys))
        hidden = min(attn_window() * ops[i].cover, end * pace)
        out, waited = [], hidden
        for e in ends:
            out.append(max(0.0, e - waited))
            waited = max(waited, e)
        return out

    for i, op in enumerate(ops):
        if op.only == "backward":
            continue  # a forward pass's list holds it for its backward (ops.backward_ops)
        if op.kind == "collective":
            assert op.group is not None and op.collective is not None
            t = coll_time.get(key(op))
            # The host issues the collective after the span's kernels; the GPU cannot start it
            # sooner (a stack's Python around each call: host_us_per_collective).
            issued += timer.host_coll_s
            end = max(end, issued)
            if op.group == "cp" and op.overlapped:
                if t is not None:  # the run's exposed times, worked out at its first
                    if not ring:
                        ring = ring_run(i)
                    exposed = ring.pop(0)
                    flush()  # (a ring through the flows has no estimate to lead by either)
                    if exposed > 0:
                        prog.items.append(Item("span", op.name, exposed, "comm_cp"))
                    continue
                covered = attn_window() * op.cover  # through the flows: each beside it
                then = 0.0
            else:
                covered = hide() if op.overlapped or (overlap_tp and op.group == "tp") else 0.0
                # the host's lead while the GPU runs the collective: its time alone, whether
                # the engine times it so or through the flows (the same spans either way)
                alone = lead.get(key(op)) if lead is not None else t
                then = max(0.0, (alone or 0.0) - covered)
            if t is None:
                flush(then)
                prog.items.append(
                    Item(
                        "coll",
                        op.name,
                        group=op.group,
                        coll=op.collective,
                        size=op.msg_bytes,
                        hide=covered,
                    )
                )
                continue
            t = max(0.0, t - covered)
            # The collective ends the span even when the GEMM hides all of it: the host issues
            # the spans on either side of it separately (as when it runs through the flows).
            flush(then)
            if t > 0:
                prog.items.append(Item("span", op.name, t, f"comm_{op.group}"))
            continue
        dt = timer.time(op)
        start = max(end, issued)
        if op.kind == "attention" or op.name.startswith(ATTENTION_OPS):
            if not in_attn:
                attn_at = start
            attn = (attn if in_attn else 0.0) + dt * pace
            in_attn = True
        elif op.kind != "memory":
            in_attn = False
        # An op starts when the GPU is free and the host has issued it, and ends no sooner
        # than the host has issued all its kernels: a span of short kernels runs at the
        # host's pace, not the GPU's (the stack's host_us_per_kernel).
        both = op.kind == "gemm" and op.backward and op.part == "both"
        issued += (2 if both else 1) * timer.host_s
        end = max(start + dt, issued)
        gpu += dt
        if op.kind == "gemm":
            gemm_at = start
        pending_name.append(op.name)
    flush()
    return prog
