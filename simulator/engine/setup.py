"""The set-up of one step's simulation: the SimPy environment, the topology, the per-layer
programs, stream helpers and the trace (the data loader's process is in
:mod:`simulator.engine.loader`). Which traffic shares which links (link
capacities and weights, the groups timed analytically) is in :mod:`simulator.engine.sharing`;
the rank process that runs the pipeline schedule is in :mod:`simulator.engine.sim`."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from ..config.parallelism import ZeroSharding
from ..config.scenario import ResolvedScenario
from ..config.software import attention_kernel, on
from ..network.collectives import choose
from ..network.flows import FlowNetwork
from ..network.nccl import Phase
from ..network.together import finish_together
from ..network.topology import Topology
from ..workload.buckets import end_params, layer_tensors
from ..workload.comm import (
    gather_bytes_per_param,
    grad_bytes_per_param,
    tied_embedding_bytes,
)
from ..workload.memory import (
    bytes_per_param,
    layer_gather_bytes_per_param,
    layer_params_per_rank,
    shard_group,
)
from ..workload.model import param_tensors
from ..workload.ops import (
    Op,
    backward_ops,
    embedding_ops,
    head_ops,
    layer_ops,
    pp_recv_ops,
)
from ..workload.recompute import full_recomputed_ops, recomputed_ops
from ..workload.tp_backward import stack_backward
from .clock import BucketEnvironment
from .comm import Comm, Job, Stream
from .compute import OpTimer
from .loader import LoaderProcess
from .program import Program, build_program, offload_wait, twin_suffixes
from .results import RankResult
from .sharing import LinkSharing
from .stragglers import pace as straggler_pace

# The per-pass programs a simulation builds (``_build_programs``).
PROGRAMS = (
    "p_fwd",
    "p_bwd",
    "p_bwd_sync",
    "p_emb_f",
    "p_emb_b",
    "p_emb_b_sync",
    "p_head_f",
    "p_head_b",
    "p_head_b_sync",
    "p_recv",
)


class SimulationBase(LoaderProcess, LinkSharing):  # LoaderProcess brings Tracing
    # The per-pass programs (``PROGRAMS``), set from ``_build_programs``.
    p_fwd: Program
    p_bwd: Program
    p_bwd_sync: Program
    p_emb_f: Program
    p_emb_b: Program
    p_emb_b_sync: Program
    p_head_f: Program
    p_head_b: Program
    p_head_b_sync: Program
    p_recv: Program

    def __init__(self, rs: ResolvedScenario, full: bool = False, trace: bool = False) -> None:
        self.rs = rs
        self.full = full
        # Full mode's ranks act at few distinct instants, so its events share instants by the
        # thousand; symmetric mode's few processes rarely do, and SimPy's own heap is cheaper.
        self.env = BucketEnvironment() if full else simpy.Environment()
        self.topo = Topology(rs)
        self.lay = self.topo.layout
        self.net = FlowNetwork(self.env, self._capacity)
        self.timer = OpTimer(
            rs.gpu,
            rs.training.precision,
            rs.software.host_us_per_kernel.value,
            attention_kernel(rs.software, rs.gpu),
            rs.model.head_dim,
            on(rs.software.fp8_backward_fast_accum),
            rs.software.host_us_per_collective.value if rs.software.host_us_per_collective else 0.0,
        )
        self.pace = straggler_pace(rs)
        self.p = rs.pp
        self.v = rs.parallelism.virtual_stages
        self.m = rs.micro_batches
        self.z = rs.zero_stage
        self.ov = rs.parallelism.overlap
        self.tracing = trace
        self.trace: list[dict[str, Any]] = []
        self.in_pass: set[int] = set()
        self.fabric_tier = self.topo.fabric_tier()
        self.network_tier = self.topo.network_tier()
        if full:
            self.ranks = list(range(self.lay.world))
        else:
            self.ranks = [self.lay.rank(0, 0, 0, s) for s in range(self.p)]
        self.results = {r: RankResult(r, self.lay.coords(r)[3]) for r in self.ranks}
        self._streams: dict[tuple[int, str], Stream] = {}
        # Compute that runs while the rank's DP stream holds a collective loses the SMs the
        # collective's kernels occupy (share s): each second of overlap costs s/(1-s) more.
        sms = rs.gpu.sm_count.value if rs.gpu.sm_count else 0.0
        share = min(0.9, rs.software.comm_sms.value / sms) if sms else 0.0
        self.contention = share / (1.0 - share)
        self.dp_streams = {r: self._stream(r, "dp") for r in self.ranks} if self.contention else {}
        self._recv: dict[tuple, simpy.Event] = {}  # a receiver waiting for this input
        self._arrived: set[tuple] = set()  # inputs delivered before their receiver asked
        self._sent_at: dict[tuple, float] = {}
        self._weights = self._symmetric_weights()
        self.comm = Comm(self.env, self.topo, self.net, full, self._link_weights)
        self._analytic = self._analytic_groups()
        self.layer_params = layer_params_per_rank(rs)
        # the same, as the tensors DP buckets are filled with (workload.buckets), elements
        self.layer_tensors_el = layer_tensors(rs)
        # Parameters outside the layers: the embedding (first stage), whose backward runs last,
        # and the output layer and final norm (last stage), whose backward runs first.
        self.emb_params, self.head_params = end_params(rs)
        self.extra_params = {
            s: (self.emb_params if s == 0 else 0.0) + (self.head_params if s == rs.pp - 1 else 0.0)
            for s in range(rs.pp)
        }
        pt = param_tensors(rs.model)
        self.layer_tensors = pt.per_layer
        # a tied embedding is held again by the last stage when PP > 1, as its parameters are
        head_tensors = pt.head + (1 if rs.model.tied_embeddings and rs.pp > 1 else 0)
        self.extra_tensors = {
            s: (pt.embedding if s == 0 else 0) + (head_tensors if s == rs.pp - 1 else 0)
            for s in range(rs.pp)
        }
        # The shared word embedding's gradient the first and last stages exchange each step.
        self.tied_bytes = tied_embedding_bytes(rs)
        # DDP with gradient_as_bucket_view=False copies gradients into its buckets and back.
        self.bucket_copy = rs.parallelism.dp_bucket_copy and rs.dp_cp > 1 and self.z == 0
        progs = self._build_programs(self._analytic)
        self.__dict__.update(progs)
        # The programs' twins with TP and an in-node CP ring timed analytically, for passes
        # that run while nothing else can reach their links (see passes.PassRunner.run_items):
        # for each item of a program, the rest of its twin from there (from the first item:
        # the whole twin).
        self.twin_rest: dict[int, list[Program]] = {}
        # ZeRO-1/2 parameter gathers per (stage, chunk): bucket sizes and the bucket each
        # layer waits for (PassRunner._prefetch_params)
        self._gather_plans: dict[tuple[int, int], tuple[tuple[float, ...], tuple[int, ...]]] = {}
        self.guard_streams: dict[int, list[Stream]] = {}
        guards = self._pass_guards()
        if guards is not None:
            kinds = self.twin_groups()
            assert kinds is not None  # (the guards exist only where the twin does)
            fast = self._build_programs(self._analytic | kinds)
            for name in PROGRAMS:
                rest = twin_suffixes(progs[name], fast[name])
                if rest is not None and fast[name].analytic and not progs[name].analytic:
                    self.twin_rest[id(progs[name])] = rest
            self.guard_streams = {
                r: [self._stream(r, name) for name in names] for r, names in guards.items()
            }
        self._chunk_layers = self._split_chunks()
        self.shard_n = shard_group(rs)
        # ZeRO/FSDP collectives run over the shard group (hybrid sharding: part of DP).
        self.gather_kind = "dp_shard" if self.shard_n < rs.dp_cp else "dp"

    # -- programs -----------------------------------------------------------------------------
    def _coll_plans(self, ops: list, groups: set[str]) -> dict[str, tuple[str, list[Phase], float]]:
        """For each collective of ``groups`` among ``ops`` (key ``"group:coll:size"``): its
        group, and the phases and analytic time of the algorithm chosen for it."""
        out: dict[str, tuple[str, list[Phase], float]] = {}
        rep = self.ranks[0]
        for op in ops:
            if op.kind != "collective" or op.group not in groups:
                continue
            shape = self.topo.shape(rep, op.group)
            fabric = self.topo.fabric_tier(rep, op.group)
            _algo, phases, t = choose(op.collective, shape, op.msg_bytes, fabric, self.network_tier)
            out[f"{op.group}:{op.collective}:{op.msg_bytes}"] = (op.group, phases, t)
        return out

    def programs(self, analytic: set[str]) -> dict[str, Program]:
        """The per-pass programs with the collectives of ``analytic`` timed in closed form, as
        on links no other traffic reaches (those it already times so, and ``analytic``)."""
        return self._build_programs(self._analytic | analytic)

    def _build_programs(self, analytic: set[str]) -> dict[str, Program]:
        """The programs named in ``PROGRAMS``, with the collectives of ``analytic`` timed
        analytically and the others run through the flow network."""
        rs = self.rs

        def prog(ops: list, groups: set[str] = analytic) -> Program:
            plans = self._coll_plans(ops, groups)
            times: dict[str, float | None] = {k: t for k, (_g, _p, t) in plans.items()}
            # every collective's time alone: the host's lead while it runs (a host-bound stack)
            lead = None
            if self.timer.host_coll_s > 0 or self.timer.host_s > 0:
                kinds = {op.group for op in ops if op.kind == "collective"}
                alone = self._coll_plans(ops, kinds - groups)
                lead = {**{k: t for k, (_g, _p, t) in alone.items()}, **times}

            def together(keys: list[str]) -> list[float]:
                fabric = self.topo.fabric_tier(self.ranks[0], plans[keys[0]][0])
                return finish_together([plans[k][1] for k in keys], fabric, self.network_tier)

            return build_program(
                ops, self.timer, times, overlap_tp=self.ov.tp_comm, pace=self.pace,
                together=together, lead=lead,
            )  # fmt: skip

        fwd = layer_ops(rs)
        bwd = stack_backward(rs, fwd)
        p_fwd = prog(fwd)
        rc = rs.parallelism.recompute
        p_bwd = Program()
        if rc == "full":
            p_bwd.extend(prog(full_recomputed_ops(rs, fwd)))
        elif rc == "selective":
            p_bwd.extend(prog(recomputed_ops(rs, fwd)))
        p_bwd.extend(prog(bwd))
        if rs.parallelism.offload_activation_layers:
            # A copy hides behind a whole layer pass, its collectives included: timed
            # analytically, so that a pass run through the flows and its analytic twin wait
            # alike (recomputation is refused with offloading: bwd is the whole pass).
            every = {"tp", "cp", "dp", "pp"}
            p_fwd.extend(offload_wait(rs, prog(fwd, every).duration))
            p_bwd.extend(offload_wait(rs, prog(bwd, every).duration))
        emb = embedding_ops(rs)
        head = head_ops(rs)
        p_emb_b, p_head_b = prog(backward_ops(emb)), prog(stack_backward(rs, head))

        def mem(name: str, nbytes: float) -> Program:
            return prog([Op(name, "memory", bytes=nbytes)])

        sw = rs.software
        sharded = rs.dp_cp > 1 and self.z >= 3 and self.layer_params > 0  # gathers per layer
        if on(sw.gather_copy_out) and sharded:
            # Each pass's gather of the layer, copied out of the all-gather buffer.
            nbytes = 2 * layer_gather_bytes_per_param(rs) * self.layer_params
            p_fwd.extend(mem("gather_copy_out", nbytes))
            p_bwd.extend(mem("gather_copy_out", nbytes))
        if on(sw.grad_flatten_copy) and sharded:
            # The layer's gradients (the working weights' width) read, and written into the
            # flat reduce-scatter input (the reduction's width).
            width = gather_bytes_per_param(rs) + grad_bytes_per_param(rs)
            p_bwd.extend(mem("grad_flatten", width * self.layer_params))
        fused = on(sw.grad_accumulate_fusion) and grad_bytes_per_param(rs) == 4
        if on(sw.grad_accumulate_add) and not fused:
            # Every backward adds its fresh weight gradients (the working weights' width) into
            # the buffer the DP reduction reads: read both, write the buffer (cast to the
            # buffer's width first: that temporary written and read too).
            g = grad_bytes_per_param(rs)
            per_param = 2 * g + bytes_per_param(rs)[0] + 2 * g * on(sw.grad_accumulate_cast)
            for p, params in (
                (p_bwd, self.layer_params),
                (p_emb_b, self.emb_params),
                (p_head_b, self.head_params),
            ):
                if params > 0:
                    p.extend(mem("grad_accumulate", params * per_param))

        # The backward passes that produce the step's gradients (a chunk's last micro-batch:
        # under gradient accumulation DDP's hooks fire only then). With bucket copies, each
        # ends with its gradients' copy into the bucket: read the gradient, write the bucket.
        def with_bucket_copy(p: Program, params: float) -> Program:
            if not self.bucket_copy or params <= 0:
                return p
            out = Program(list(p.items))
            out.extend(mem("grad_bucket_copy_in", 2.0 * params * grad_bytes_per_param(rs)))
            return out

        return {
            "p_fwd": p_fwd,
            "p_bwd": p_bwd,
            "p_bwd_sync": with_bucket_copy(p_bwd, self.layer_params),
            "p_emb_f": prog(emb),
            "p_emb_b": p_emb_b,
            "p_emb_b_sync": with_bucket_copy(p_emb_b, self.emb_params),
            "p_head_f": prog(head),
            "p_head_b": p_head_b,
            "p_head_b_sync": with_bucket_copy(p_head_b, self.head_params),
            "p_recv": prog(pp_recv_ops(rs)),
        }

    def _stage_params(self, stage: int) -> float:
        """Parameters one rank of ``stage`` holds: its layers, and the embedding or output
        layer on the first and last stage."""
        return sum(self._chunk_layers[stage]) * self.layer_params + self.extra_params.get(
            stage, 0.0
        )

    def _stage_tensors(self, stage: int) -> int:
        """Parameter tensors the optimizer of one rank of ``stage`` visits: each TP rank holds a
        shard of each. A ZeRO optimizer (Megatron's distributed optimizer, DeepSpeed) steps a
        1/n slice of the stage's contiguous buffer: about 1/n of the tensors, one of them cut
        at each end. FSDP is counted per parameter, as FSDP2 (and torchtitan) shard them; a
        flat-parameter FSDP1 steps fewer, larger tensors."""
        n = sum(self._chunk_layers[stage]) * self.layer_tensors + self.extra_tensors.get(stage, 0)
        zero = isinstance(self.rs.parallelism.sharding, ZeroSharding)
        if zero and self.z >= 1 and self.shard_n > 1:
            return -(-n // self.shard_n) + 1
        return n

    def _tied_peer(self, rank: int, stage: int) -> int | None:
        """The rank at the other end of the pipeline that ``rank`` exchanges the tied
        embedding's gradient with (None where it has none to exchange)."""
        if self.tied_bytes <= 0 or stage not in (0, self.p - 1):
            return None
        t, c, d, _ = self.lay.coords(rank)
        return self.lay.rank(t, c, d, self.p - 1 - stage)

    def _split_chunks(self) -> dict[int, list[int]]:
        return {s: self.rs.chunk_layers(s) for s in range(self.p)}

    # -- helpers ------------------------------------------------------------------------------
    def _stream(self, rank: int, name: str) -> Stream:
        st = self._streams.get((rank, name))
        if st is None:
            emit = self._emit if self.tracing else None
            st = self._streams[(rank, name)] = Stream(self.env, rank, name, emit)
        return st

    def _submit(self, rank: int, stream: str, job: Job) -> Job:
        """Queue ``job`` on one of ``rank``'s communication streams."""
        if job.done:
            return job
        return self._stream(rank, stream).submit(job)

    def _book_wait(self, rank: int, jobs: list[Job], t0: float, cat: str) -> None:
        """Book the wait from ``t0`` to now for ``jobs`` (run one after another on a stream):
        the part in which a job waited for its peers to arrive (full mode: a member whose
        group straddles nodes, or runs behind) as ``imbalance``, the rest as ``cat``."""
        now = self.env.now
        peers = 0.0
        for job in jobs:
            if job.began is not None:
                peers += max(0.0, min(job.began, now) - max(job.t0, t0))
        acc = self.results[rank].acc
        acc["imbalance"] += peers
        acc[cat] += now - t0 - peers
        if self.tracing:
            self._waited(rank, "imbalance", t0, t0 + peers)
            self._waited(rank, cat, t0 + peers, now)

    def _wait(self, job: Job) -> Generator:
        """Wait (in a rank's process) until ``job`` is done."""
        ev = job.event(self.env)
        if ev is not None:
            yield ev

    def _count_events(self) -> int:
        # SimPy numbers every event it schedules with a running counter.
        eid = getattr(self.env, "_eid", None)
        return int(next(eid)) if eid is not None else 0
