"""The SimPy model of one training step.

Per simulated rank: a compute stream (the rank's SimPy process, running its pipeline schedule)
and communication streams (DP, PP forward, PP backward) that run one job at a time, like CUDA
streams; the streams and collectives are callback-driven (:mod:`.comm`). Links are shared
through :class:`~simulator.network.flows.FlowNetwork`; storage reads for the data loader go
through the same mechanism.

Symmetric mode simulates one rank per pipeline stage (the rank class) and weights its flows by
the number of class members that share each link; full mode simulates every rank, with
collectives that start when all members have arrived, run their phases in lockstep and end for
all members together.

Every moment of each rank's step is attributed to exactly one category, so busy + idle
categories = wall time.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import Timeout

from ..config.scenario import ResolvedScenario
from ..network.collectives import choose
from ..network.flows import FlowNetwork
from ..network.topology import Topology
from ..workload.comm import gather_bytes_per_param, grad_bytes_per_param, pp_message_bytes
from ..workload.memory import optimizer_bytes_per_param, shard_group
from ..workload.model import param_breakdown
from ..workload.ops import Op, backward_ops, embedding_ops, head_ops, layer_ops
from .comm import Comm, Job, Stream
from .compute import OpTimer, Program, build_program
from .schedule import schedule
from .stragglers import pace as straggler_pace

CATEGORIES = (
    "compute",
    "optimizer",
    "comm_tp",
    "comm_cp",
    "comm_dp",
    "comm_pp",
    "pp_bubble",
    "data_stall",
    "imbalance",
    "straggler",
)
BUSY = ("compute", "optimizer")

STREAMS = ("compute", "tp", "cp", "dp", "pp-fwd", "pp-bwd", "io")


@dataclass
class RankResult:
    rank: int
    stage: int
    finish: float = 0.0
    acc: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))


@dataclass
class EngineResult:
    step_time: float
    ranks: dict[int, RankResult]
    classes: dict[int, RankResult]  # stage -> the class's representative
    mode: str
    events: int
    trace: list[dict[str, Any]] | None
    loader_done: float


class Simulation:
    def __init__(self, rs: ResolvedScenario, full: bool = False, trace: bool = False) -> None:
        self.rs = rs
        self.full = full
        self.env = simpy.Environment()
        self.topo = Topology(rs)
        self.lay = self.topo.layout
        self.net = FlowNetwork(self.env, self._capacity)
        self.timer = OpTimer(
            rs.gpu,
            rs.training.precision,
            rs.software.host_us_per_kernel.value,
            rs.software.flash_kernel,
        )
        self.pace = straggler_pace(rs)
        self.p = rs.pp
        self.v = rs.parallelism.virtual_stages
        self.m = rs.micro_batches
        self.z = rs.parallelism.zero_stage
        self.ov = rs.parallelism.overlap
        self.tracing = trace
        self.trace: list[dict[str, Any]] = []
        self.fabric_tier = self.topo.fabric_tier()
        self.network_tier = self.topo.network_tier()
        if full:
            self.ranks = list(range(self.lay.world))
        else:
            self.ranks = [self.lay.rank(0, 0, 0, s) for s in range(self.p)]
        self.results = {r: RankResult(r, self.lay.coords(r)[3]) for r in self.ranks}
        self._streams: dict[tuple[int, str], Stream] = {}
        self._recv: dict[tuple, simpy.Event] = {}  # a receiver waiting for this input
        self._arrived: set[tuple] = set()  # inputs delivered before their receiver asked
        self._sent_at: dict[tuple, float] = {}
        self._weights = self._symmetric_weights()
        self.comm = Comm(self.env, self.topo, self.net, full, self._link_weights)
        self._analytic = self._analytic_groups()
        pb = param_breakdown(rs.model, rs.training.seq_len)
        self.layer_params = (pb.attention_per_layer + pb.mlp_per_layer) / rs.tp + (
            pb.norms_per_layer
        )
        # Parameters outside the layers: the embedding (first stage), whose backward runs last,
        # and the output layer and final norm (last stage), whose backward runs first.
        self.emb_params = pb.embedding / rs.tp + pb.positions
        self.head_params = (pb.lm_head or (pb.embedding if rs.pp > 1 else 0)) / rs.tp + (
            pb.final_norm
        )
        self.extra_params = {
            s: (self.emb_params if s == 0 else 0.0) + (self.head_params if s == rs.pp - 1 else 0.0)
            for s in range(rs.pp)
        }
        # DDP with gradient_as_bucket_view=False copies gradients into its buckets and back.
        self.bucket_copy = rs.parallelism.dp_bucket_copy and rs.dp > 1 and self.z == 0
        self._build_programs()
        self._chunk_layers = self._split_chunks()
        self.shard_n = shard_group(rs)

    # -- links ---------------------------------------------------------------------------------
    def _capacity(self, key: tuple) -> float:
        st = self.rs.storage
        if key[0] == "storage_client":
            return st.read_gbps_per_client.value * 1e9
        if key[0] == "storage_agg":
            assert st.aggregate_read_gbps is not None
            return st.aggregate_read_gbps.value * 1e9
        return self.topo.capacity(key)

    def _symmetric_weights(self) -> dict[tuple[int, str], float]:
        """For each stage representative: class members sharing its node / NIC / leaf."""
        w: dict[tuple[int, str], float] = {}
        gpn = self.rs.gpus_per_node
        for s in range(self.p):
            members = self.lay.stage_members(s)
            rep = members[0]
            node = self.lay.node(rep)
            nic = self.topo.nic_of(rep)
            leaf = self.topo.leaf(node)
            on_node = [r for r in range(node * gpn, (node + 1) * gpn) if r in members]
            w[(s, "node")] = len(on_node)
            w[(s, "nic")] = sum(1 for r in on_node if self.topo.nic_of(r) == nic)
            lo = leaf * self.topo.nodes_per_leaf * gpn
            hi = lo + self.topo.nodes_per_leaf * gpn
            w[(s, "leaf")] = max(0, min(hi, members.stop) - max(lo, members.start))
        return w

    def _link_weights(
        self, rank: int, links: list[tuple[tuple, float]]
    ) -> list[tuple[tuple, float]]:
        if self.full:
            return links
        stage = self.lay.coords(rank)[3]
        out = []
        for key, frac in links:
            kind = key[0]
            if kind == "nic":
                mult = self._weights[(stage, "nic")]
            elif kind == "uplink":
                mult = self._weights[(stage, "leaf")]
            elif kind == "pcie_root":
                mult = self._weights[(stage, "node")]
            else:
                mult = 1.0
            out.append((key, frac * mult))
        return out

    def _uses_fabric(self, kind: str) -> bool:
        rep = self.ranks[0]
        if kind == "pp":
            return any(
                self.lay.node(r) == self.lay.node(r + len(self.lay.stage_members(0)))
                for r in (self.lay.stage_members(s)[0] for s in range(self.p - 1))
            )
        size = {"tp": self.rs.tp, "cp": self.rs.cp, "dp": self.rs.dp}[kind]
        return size > 1 and self.topo.shape(rep, kind).per_node > 1

    def _analytic_groups(self) -> set[str]:
        """Group kinds whose traffic stays on links nothing else uses: timed analytically."""
        out: set[str] = set()
        active = [
            k
            for k, n in (
                ("tp", self.rs.tp),
                ("cp", self.rs.cp),
                ("dp", self.rs.dp),
                ("pp", self.rs.pp),
            )
            if n > 1
        ]
        for kind in ("tp", "cp"):
            if kind not in active:
                continue
            shape = self.topo.shape(self.ranks[0], kind)
            if shape.nodes > 1:
                continue
            others = [k for k in active if k != kind and self._uses_fabric(k)]
            if not others:
                out.add(kind)
        return out

    # -- programs -----------------------------------------------------------------------------
    def _coll_times(self, ops: list) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        rep = self.ranks[0]
        for op in ops:
            if op.kind != "collective" or op.group not in self._analytic:
                continue
            shape = self.topo.shape(rep, op.group)
            out[f"{op.group}:{op.collective}:{op.msg_bytes}"] = choose(
                op.collective, shape, op.msg_bytes, self.fabric_tier, self.network_tier
            )[2]
        return out

    def _prog(self, ops: list) -> Program:
        return build_program(
            ops, self.timer, self._coll_times(ops), overlap_tp=self.ov.tp_comm, pace=self.pace
        )

    def _build_programs(self) -> None:
        rs = self.rs
        fwd = layer_ops(rs)
        bwd = backward_ops(fwd)
        self.p_fwd = self._prog(fwd)
        rc = rs.parallelism.recompute
        self.p_bwd = Program()
        if rc == "full":
            self.p_bwd.extend(self._prog(fwd))
        elif rc == "selective":
            attn = [
                o
                for o in fwd
                if o.kind == "attention"
                or o.name in ("attn_scores", "softmax_dropout", "attn_values")
            ]
            self.p_bwd.extend(self._prog(attn))
        self.p_bwd.extend(self._prog(bwd))
        emb = embedding_ops(rs)
        head = head_ops(rs)
        self.p_emb_f, self.p_emb_b = self._prog(emb), self._prog(backward_ops(emb))
        self.p_head_f, self.p_head_b = self._prog(head), self._prog(backward_ops(head))
        # The backward passes that produce the step's gradients (a chunk's last micro-batch:
        # under gradient accumulation DDP's hooks fire only then). With bucket copies, each
        # ends with its gradients' copy into the bucket: read the gradient, write the bucket.
        self.p_bwd_sync = self._with_bucket_copy(self.p_bwd, self.layer_params)
        self.p_emb_b_sync = self._with_bucket_copy(self.p_emb_b, self.emb_params)
        self.p_head_b_sync = self._with_bucket_copy(self.p_head_b, self.head_params)

    def _with_bucket_copy(self, prog: Program, params: float) -> Program:
        if not self.bucket_copy or params <= 0:
            return prog
        nbytes = 2.0 * params * grad_bytes_per_param(self.rs)
        out = Program(list(prog.items))
        out.extend(self._prog([Op("grad_bucket_copy_in", "memory", bytes=nbytes)]))
        return out

    def _split_chunks(self) -> dict[int, list[int]]:
        rs = self.rs
        p, v = self.p, self.v
        sl = rs.parallelism.stage_layers
        if sl is not None and len(sl) == p * v:
            return {s: [sl[c * p + s] for c in range(v)] for s in range(p)}
        per_stage = rs.stage_layers()
        out = {}
        for s in range(p):
            base, extra = divmod(per_stage[s], v)
            out[s] = [base + (1 if c < extra else 0) for c in range(v)]
        return out

    # -- helpers ------------------------------------------------------------------------------
    def _emit(
        self,
        rank: int,
        stream: str,
        name: str,
        start: float,
        dur: float,
        args: dict[str, Any] | None = None,
    ) -> None:
        if not self.tracing or dur <= 0:
            return
        pid = self.lay.node(rank) if self.full else self.lay.coords(rank)[3]
        tid = STREAMS.index(stream)
        if self.full:
            tid += 10 * (rank % self.rs.gpus_per_node)
        ev: dict[str, Any] = {
            "name": name,
            "ph": "X",
            "ts": start * 1e6,
            "dur": dur * 1e6,
            "pid": pid,
            "tid": tid,
        }
        if self.full:
            ev["args"] = {"rank": rank}
        if args:
            ev.setdefault("args", {}).update(args)
        self.trace.append(ev)

    def _submit(self, rank: int, stream: str, job: Job) -> Job:
        """Queue ``job`` on one of ``rank``'s communication streams."""
        if job.done:
            return job
        st = self._streams.get((rank, stream))
        if st is None:
            emit = self._emit if self.tracing else None
            st = self._streams[(rank, stream)] = Stream(self.env, rank, stream, emit)
        return st.submit(job)

    def _wait(self, job: Job) -> Generator:
        """Wait (in a rank's process) until ``job`` is done."""
        ev = job.event(self.env)
        if ev is not None:
            yield ev

    # -- the rank process ---------------------------------------------------------------------
    def run_rank(self, rank: int) -> Generator:
        rs = self.rs
        res = self.results[rank]
        acc = res.acc
        env = self.env
        t, c, d, stage = self.lay.coords(rank)
        order = schedule(rs.parallelism.pp_schedule.kind, stage, self.p, self.m, self.v)
        block = len(self.lay.stage_members(0))
        msg = pp_message_bytes(rs)
        dp_on = rs.dp > 1
        grad_b = grad_bytes_per_param(rs)
        bucket_target = rs.parallelism.dp_bucket_mb * 1e6
        pending_grads = 0.0
        dp_jobs: list[Job] = []
        last_b = {ch: None for ch in range(self.v)}
        for kind, mb, ch in order:
            if kind == "B":
                last_b[ch] = mb  # type: ignore[assignment]
        first_f_done: set[int] = set()
        grads_every_mb = self.z >= 3
        # ZeRO/FSDP collectives run over the shard group (hybrid sharding: part of DP).
        gather_kind = "dp_shard" if self.shard_n < rs.dp else "dp"

        def mark(cat: str, t0: float) -> None:
            acc[cat] += env.now - t0

        dp_ep = self.comm.endpoint(rank, gather_kind)
        collective = self.comm.collective
        grad_coll = "all_reduce" if self.z == 0 else "reduce_scatter"

        def launch_dp(nbytes: float) -> None:
            label = lambda: f"{grad_coll} {nbytes / 1e6:.0f} MB"  # noqa: E731
            dp_jobs.append(self._submit(rank, "dp", collective(dp_ep, grad_coll, nbytes, label)))

        def gather(nbytes: float, label: str) -> Job:
            return self._submit(rank, "dp", collective(dp_ep, "all_gather", nbytes, label))

        def charge(prog: Program, reps: int, t0: float) -> None:
            """Book ``reps`` runs of an analytic program that started at ``t0``."""
            for cat, dt in prog.categories.items():
                acc[cat] += dt * reps
            if self.tracing:
                self._trace_program(rank, prog, reps, t0)

        def run_items(prog: Program, reps: int, name: str) -> Generator:
            """Run a program ``reps`` times; analytic programs are one timeout."""
            if reps <= 0:
                return
            if prog.analytic:
                t0 = env.now
                total = prog.duration * reps
                if total > 0:
                    yield Timeout(env, total)
                charge(prog, reps, t0)
                return
            for _ in range(reps):
                for it in prog.items:
                    t0 = env.now
                    if it.kind == "span":
                        yield Timeout(env, it.dur)
                        it.book(acc)
                        self._emit(
                            rank,
                            "compute" if it.cat == "compute" else it.cat[5:],
                            it.name,
                            t0,
                            it.dur,
                        )
                    else:
                        ep = self.comm.endpoint(rank, it.group or "tp")
                        job = collective(ep, it.coll or "", it.size)
                        if not job.done:
                            job.begin(env.now)  # on the compute stream: runs now
                            yield from self._wait(job)
                        mark(f"comm_{it.group}", t0)
                        self._emit(rank, it.group or "tp", it.name, t0, env.now - t0)

        def layer_pass(
            prog: Program, layers: int, hook_before: Any, hook_after: Any, name: str
        ) -> Generator:
            if hook_before is None and hook_after is None:
                yield from run_items(prog, layers, name)
                return
            # Layer by layer: the hooks wait for parameters or launch gradient buckets. An
            # analytic layer is one timeout here, not a nested generator per layer.
            analytic = prog.analytic
            dur = prog.duration
            for i in range(layers):
                if hook_before is not None:
                    ev = hook_before(i)
                    if ev is not None:
                        t0 = env.now
                        yield ev
                        acc["comm_dp"] += env.now - t0
                if analytic:
                    t0 = env.now
                    if dur > 0:
                        yield Timeout(env, dur)
                    charge(prog, 1, t0)
                else:
                    yield from run_items(prog, 1, name)
                if hook_after is not None:
                    hook_after(i)

        # ZeRO-1/2: the parameter all-gather after the previous optimizer step runs while this
        # step starts, in buckets of dp_bucket_mb as Megatron's distributed optimizer does; each
        # layer's first forward waits for the bucket that holds its parameters.
        prefetched: dict[int, list[Job]] = {}
        if dp_on and self.z in (1, 2) and self.ov.param_gather:
            layer_bytes = self.layer_params * gather_bytes_per_param(rs)
            per_bucket = max(1, int(rs.parallelism.dp_bucket_mb * 1e6 // layer_bytes))
            for chunk in range(self.v):
                n_layers = self._chunk_layers[stage][chunk]
                jobs: list[Job] = []
                for first in range(0, n_layers, per_bucket):
                    count = min(per_bucket, n_layers - first)
                    jobs += [gather(layer_bytes * count, "param all_gather")] * count
                prefetched[chunk] = jobs
        for kind, mb, ch in order:
            # 1. wait for the input of this pass
            if kind == "F":
                needs = not (stage == 0 and ch == 0)
            else:
                needs = not (stage == self.p - 1 and ch == self.v - 1)
            if needs:
                key = self._recv_key(kind, mb, ch, rank)
                if key in self._arrived:
                    self._arrived.discard(key)
                else:
                    t0 = env.now
                    ev = self._recv[key] = env.event()
                    yield ev
                    sent = self._sent_at.get(key, t0)
                    split = min(max(sent, t0), env.now)
                    acc["pp_bubble"] += split - t0
                    acc["comm_pp"] += env.now - split
            layers = self._chunk_layers[stage][ch]
            t_compute = env.now
            # 2. the pass itself
            sync = kind == "B" and mb == last_b[ch]  # this chunk's gradients are complete
            if kind == "F":
                if stage == 0 and ch == 0:
                    yield from run_items(self.p_emb_f, 1, "embedding")
                before = None
                if dp_on and self.z >= 3:
                    before = self._gather_hook(gather, layers)
                elif ch in prefetched and ch not in first_f_done:
                    before = self._wait_hook(prefetched[ch])
                first_f_done.add(ch)
                yield from layer_pass(self.p_fwd, layers, before, None, "fwd")
                if stage == self.p - 1 and ch == self.v - 1:
                    yield from run_items(self.p_head_f, 1, "head")
            else:
                if stage == self.p - 1 and ch == self.v - 1:
                    head_b = self.p_head_b_sync if sync else self.p_head_b
                    yield from run_items(head_b, 1, "head_bwd")
                before = None
                after = None
                if dp_on and self.z >= 3:
                    before = self._gather_hook(gather, layers)
                if dp_on and self.ov.dp_grad and (grads_every_mb or mb == last_b[ch]):

                    def after(i: int) -> None:
                        nonlocal pending_grads
                        pending_grads += self.layer_params * grad_b
                        if pending_grads >= bucket_target:
                            launch_dp(pending_grads)
                            pending_grads = 0.0

                bwd = self.p_bwd_sync if sync else self.p_bwd
                yield from layer_pass(bwd, layers, before, after, "bwd")
                if stage == 0 and ch == 0:
                    emb_b = self.p_emb_b_sync if sync else self.p_emb_b
                    yield from run_items(emb_b, 1, "embedding_bwd")
            if self.tracing:
                self._emit(
                    rank,
                    "compute",
                    f"{kind}{mb}" + (f".{ch}" if self.v > 1 else ""),
                    t_compute,
                    env.now - t_compute,
                )
            # 3. send the output onward
            out_job: Job | None = None
            if kind == "F" and not (stage == self.p - 1 and ch == self.v - 1):
                dst_stage, dst_chunk = (stage + 1, ch) if stage < self.p - 1 else (0, ch + 1)
                out_job = self._send(rank, "F", mb, dst_chunk, dst_stage, block, msg)
            elif kind == "B" and not (stage == 0 and ch == 0):
                dst_stage, dst_chunk = (stage - 1, ch) if stage > 0 else (self.p - 1, ch - 1)
                out_job = self._send(rank, "B", mb, dst_chunk, dst_stage, block, msg)
            if out_job is not None and not self.ov.pp_p2p:
                # Blocking sends (the stack waits on the transfer on its compute stream).
                t0 = env.now
                yield from self._wait(out_job)
                mark("comm_pp", t0)

        params = sum(self._chunk_layers[stage]) * self.layer_params + self.extra_params.get(
            stage, 0.0
        )
        # 4. gradients: the rest of the buckets (or all of them without overlap), then wait
        if dp_on:
            own = self.extra_params.get(stage, 0.0) * grad_b
            if self.ov.dp_grad:
                pending_grads += own
                if pending_grads > 0:
                    launch_dp(pending_grads)
            else:
                total = sum(self._chunk_layers[stage]) * self.layer_params * grad_b + own
                n = max(1, math.ceil(total / bucket_target))
                # ZeRO-3/FSDP reduce-scatter every micro-batch's gradients.
                for _ in range(n * (self.m if self.z >= 3 else 1)):
                    launch_dp(total / n)
            if self.shard_n < rs.dp and self.z >= 1:
                total = (
                    (
                        sum(self._chunk_layers[stage]) * self.layer_params
                        + self.extra_params.get(stage, 0.0)
                    )
                    * grad_b
                    / self.shard_n
                )
                rep_ep = self.comm.endpoint(rank, "dp_rep")
                job = collective(rep_ep, "all_reduce", total, "replica all_reduce")
                dp_jobs.append(self._submit(rank, "dp", job))
            t0 = env.now
            for job in dp_jobs:
                yield from self._wait(job)
            mark("comm_dp", t0)

        def paced(name: str, t: float, cat: str) -> Generator:
            """A compute-stream span of ``t``, stretched to the expected slowest GPU's pace."""
            t0 = env.now
            yield env.timeout(t * self.pace)
            acc[cat] += t
            acc["straggler"] += t * (self.pace - 1.0)
            self._emit(rank, "compute", name, t0, t * self.pace)

        if self.bucket_copy:
            # DDP copies the reduced buckets back into each parameter's gradient (compute
            # stream, before the optimizer): read the bucket, write the gradient.
            t_copy = self.timer.memory_time(2.0 * params * grad_b)
            yield from paced("grad_bucket_copy_out", t_copy, "compute")
        # 5. optimizer step over this rank's shard, then (ZeRO-1/2 without overlap) the gather
        shard = params / (self.shard_n if self.z >= 1 else 1)
        yield from paced("optimizer", self._optimizer_time(shard), "optimizer")
        if dp_on and self.z in (1, 2) and not self.ov.param_gather:
            t0 = env.now
            yield from self._wait(gather(params * gather_bytes_per_param(rs), "param all_gather"))
            mark("comm_dp", t0)
        res.finish = env.now

    def _gather_hook(self, gather: Any, layers: int) -> Any:
        """Before each layer: the event its parameters arrive by (None if they have), with the
        next layer's gather queued behind it (prefetch one layer ahead)."""
        size = self.layer_params * gather_bytes_per_param(self.rs)
        pending: dict[int, Job] = {}

        def hook(i: int) -> simpy.Event | None:
            if i == 0:
                pending[0] = gather(size, "layer all_gather")
            if i + 1 < layers:
                pending[i + 1] = gather(size, "layer all_gather")
            return pending.pop(i).event(self.env)

        return hook

    def _wait_hook(self, jobs: list[Job]) -> Any:
        """Before each layer: the event its prefetched parameters arrive by (or None)."""
        return lambda i: jobs[i].event(self.env)

    def _optimizer_time(self, shard_params: float) -> float:
        return self.timer.optimizer_time(shard_params * optimizer_bytes_per_param(self.rs))

    def _recv_key(self, kind: str, mb: int, chunk: int, rank: int) -> tuple:
        if self.full:
            return (kind, mb, chunk, rank)
        return (kind, mb, chunk, self.lay.coords(rank)[3])

    def _send(
        self, rank: int, kind: str, mb: int, chunk: int, dst_stage: int, block: int, size: float
    ) -> Job:
        t, c, d, _ = self.lay.coords(rank)
        dst = self.lay.rank(t, c, d, dst_stage)
        key = self._recv_key(kind, mb, chunk, dst)
        stream = "pp-fwd" if kind == "F" else "pp-bwd"
        sent_at = self._sent_at
        env = self.env

        def started() -> None:
            sent_at[key] = env.now

        def delivered() -> None:
            ev = self._recv.pop(key, None)
            if ev is None:
                self._arrived.add(key)
            else:
                ev.succeed()

        label = lambda: f"send {kind}{mb} → stage {dst_stage}"  # noqa: E731
        return self._submit(
            rank, stream, self.comm.send(rank, dst, size, started, delivered, label)
        )

    # -- data loader --------------------------------------------------------------------------
    def loader(self) -> Generator:
        """Reads the next step's input while this step runs (one step of prefetch)."""
        rs = self.rs
        st = rs.storage
        total = rs.training.tokens_per_step * rs.training.input_bytes_per_token
        per_node = total / rs.nodes
        t0 = self.env.now
        yield self.env.timeout(st.latency_ms.value * 1e-3 * self.m)
        nodes = range(rs.nodes) if self.full else [0]
        jobs = []
        for node in nodes:
            links: list[tuple[tuple, float]] = [(("storage_client", node), 1.0)]
            if st.aggregate_read_gbps is not None:
                links.append((("storage_agg",), 1.0 if self.full else float(rs.nodes)))
            jobs.append(self.net.transfer(links, per_node))
        yield self.env.all_of(jobs)
        self.loader_done = self.env.now
        if self.tracing:
            for r in (
                self.ranks if not self.full else [n * rs.gpus_per_node for n in range(rs.nodes)]
            ):
                self._emit(r, "io", "read next batch", t0, self.env.now - t0)

    def _trace_program(self, rank: int, prog: Program, reps: int, t0: float) -> None:
        t = t0
        for _ in range(reps):
            for it in prog.items:
                stream = "compute" if it.cat == "compute" else it.cat[5:]
                self._emit(rank, stream, it.name, t, it.dur)
                t += it.dur

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        self.loader_done = 0.0
        procs = [self.env.process(self.run_rank(r)) for r in self.ranks]
        self.env.process(self.loader())
        # The run allocates millions of short-lived objects (events, flows, jobs) that
        # reference counting frees; the cyclic collector would rescan the live heap again and
        # again and doubles the run time. Nothing here leaves garbage cycles worth waiting for.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            if gc_was_on:
                gc.enable()
        for p in procs:
            if not p.processed:
                raise RuntimeError("simulation deadlocked: a rank never finished")
        finish = max(r.finish for r in self.results.values())
        step = max(finish, self.loader_done)
        # With a pipeline, stages finish apart because of the drain: that is pipeline bubble.
        tail = "pp_bubble" if self.p > 1 else "imbalance"
        for r in self.results.values():
            r.acc[tail] += finish - r.finish
            r.acc["data_stall"] += step - finish
        classes = {s: self.results[self.lay.stage_members(s)[0]] for s in range(self.p)}
        if self.tracing:
            self._trace_meta()
        return EngineResult(
            step,
            self.results,
            classes,
            "full" if self.full else "symmetric",
            self._count_events(),
            self.trace if self.tracing else None,
            self.loader_done,
        )

    def _count_events(self) -> int:
        # SimPy numbers every event it schedules with a running counter.
        eid = getattr(self.env, "_eid", None)
        return int(next(eid)) if eid is not None else 0

    def _trace_meta(self) -> None:
        meta = []
        pids = sorted({e["pid"] for e in self.trace} | ({0} if not self.trace else set()))
        for pid in pids:
            label = f"node {pid}" if self.full else f"stage {pid} (rank class)"
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
            tids = sorted({e["tid"] for e in self.trace if e["pid"] == pid})
            for tid in tids:
                local, stream = divmod(tid, 10) if self.full else (0, tid)
                name = STREAMS[stream] + (f" (gpu {local})" if self.full else "")
                meta.append(
                    {
                        "name": "thread_name",
                        "ph": "M",
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": name},
                    }
                )
        self.trace = meta + sorted(
            self.trace, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"])
        )


def run_engine(rs: ResolvedScenario, full: bool = False, trace: bool = False) -> EngineResult:
    return Simulation(rs, full=full, trace=trace).run()


__all__ = ["BUSY", "CATEGORIES", "EngineResult", "RankResult", "run_engine"]
