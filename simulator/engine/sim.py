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
from collections.abc import Generator
from functools import partial

from ..config.scenario import ResolvedScenario
from ..workload.buckets import FULL, chunk_bucket_count, chunk_tensors
from ..workload.comm import (
    grad_bucket_bytes,
    grad_bytes_per_param,
    grad_wire_bytes_per_param,
    pp_message_bytes,
)
from ..workload.memory import (
    buffer_bytes_per_param,
    gather_bytes_per_param,
    optimizer_bytes_per_param,
)
from .comm import Job
from .passes import PassRunner
from .results import BUSY, CATEGORIES, STREAMS, EngineResult, RankResult, mean_result
from .schedule import schedule


class Simulation(PassRunner):
    # Micro-batches at whose first forward on stage 0 the state is recorded (engine.steady),
    # and whether the data loader runs (engine.steady times it in closed form instead).
    marks: frozenset[int] = frozenset()
    with_loader = True

    def run_rank(self, rank: int) -> Generator:
        rs = self.rs
        res = self.results[rank]
        acc = res.acc
        env = self.env
        t, c, d, stage = self.lay.coords(rank)
        order = schedule(rs.parallelism.pp_schedule.kind, stage, self.p, self.m, self.v)
        block = len(self.lay.stage_members(0))
        msg = pp_message_bytes(rs)
        dp_on = rs.dp_cp > 1
        grad_b = grad_wire_bytes_per_param(rs)
        targets = [grad_bucket_bytes(rs, grad_b, stage, ch) for ch in range(self.v)]
        pending_grads = 0.0
        dp_jobs: list[Job] = []
        last_b = {ch: None for ch in range(self.v)}
        for kind, mb, ch in order:
            if kind == "B":
                last_b[ch] = mb  # type: ignore[assignment]
        first_f_done: set[int] = set()
        # ZeRO-2/3 and FSDP keep only their shard of the gradients, so every micro-batch's are
        # reduce-scattered (DeepSpeed stage 2 reduces at every micro-step); ZeRO-1 and plain DP
        # accumulate whole gradients and reduce once.
        grads_every_mb = self.z >= 2

        def mark(cat: str, t0: float) -> None:
            acc[cat] += env.now - t0
            if self.tracing:
                self._waited(rank, cat, t0, env.now)

        dp_ep = self.comm.endpoint(rank, self.gather_kind)
        collective = self.comm.collective
        grad_coll = "all_reduce" if rs.grads_all_reduced else "reduce_scatter"

        # Hybrid sharding (FSDP HYBRID_SHARD): each reduce-scatter inside the shard group is
        # followed by an all-reduce of the shard across the replicas, in the same post-backward
        # hook (torch/distributed/fsdp/_runtime_utils.py _reduce_grad), so it overlaps the
        # backward unit by unit and runs every micro-batch the reduce-scatter does. Queued on
        # the DP stream right behind its reduce-scatter: PyTorch gives it a stream of its own,
        # which lets the next unit's reduce-scatter (inside the node) run beside it; one stream
        # serialises the two.
        rep_ep = self.comm.endpoint(rank, "dp_rep") if self.shard_n < rs.dp_cp else None

        def launch_dp(nbytes: float) -> None:
            label = lambda: f"{grad_coll} {nbytes / 1e6:.0f} MB"  # noqa: E731
            dp_jobs.append(self._submit(rank, "dp", collective(dp_ep, grad_coll, nbytes, label)))
            if rep_ep is not None:
                shard = nbytes / self.shard_n
                label = lambda: f"replica all_reduce {shard / 1e6:.0f} MB"  # noqa: E731
                job = collective(rep_ep, "all_reduce", shard, label)
                dp_jobs.append(self._submit(rank, "dp", job))

        layer_grads = tuple(t * grad_b for t in self.layer_tensors_el)
        gw = gather_bytes_per_param(rs)

        def add_grads(nbytes: float, ch: int) -> None:
            """A tensor's gradients ready for the overlapped reduction: buckets fill with whole
            tensors and go out when full (workload.buckets)."""
            nonlocal pending_grads
            pending_grads += nbytes
            if pending_grads >= targets[ch] * FULL:
                launch_dp(pending_grads)
                pending_grads = 0.0

        def gather(nbytes: float, label: str) -> Job:
            return self._submit(rank, "dp", collective(dp_ep, "all_gather", nbytes, label))

        run_items = partial(self.run_items, rank)
        layer_pass = partial(self.layer_pass, rank)

        prefetched, own_gather = self._prefetch_params(stage, gather, dp_on)
        for kind, mb, ch in order:
            if self.marks and mb in self.marks and kind == "F" and ch == 0 and stage == 0:
                self.on_mark(mb)
            # 1. wait for the input of this pass
            if kind == "F":
                needs = not (stage == 0 and ch == 0)
            else:
                needs = not (stage == self.p - 1 and ch == self.v - 1)
            if needs:
                key = self._recv_key(kind, mb, ch, rank)
                if key in self._arrived:
                    self._arrived.discard(key)
                    self._sent_at.pop(key, None)
                else:
                    t0 = env.now
                    ev = self._recv[key] = env.event()
                    yield ev
                    sent = self._sent_at.pop(key, t0)
                    split = min(max(sent, t0), env.now)
                    acc["pp_bubble"] += split - t0
                    acc["comm_pp"] += env.now - split
                    if self.tracing:
                        self._waited(rank, "pp_bubble", t0, split)
                        self._waited(rank, "comm_pp", split, env.now)
                if self.p_recv.items:  # the receiver re-assembles a scattered input
                    yield from run_items(self.p_recv, 1, "recv_gather")
            layers = self._chunk_layers[stage][ch]
            t_compute = env.now
            if self.tracing:
                self.in_pass.add(rank)
            # 2. the pass itself
            sync = kind == "B" and mb == last_b[ch]  # this chunk's gradients are complete
            if kind == "F":
                if dp_on and self.z >= 3:
                    # ZeRO-3/FSDP shard the embedding and the output layer too: the root unit
                    # that holds them is gathered as each micro-batch's forward begins, ahead
                    # of the layers', and kept through its backward (FSDP does not reshard
                    # the root after forward).
                    first = stage == 0 and ch == 0
                    last = stage == self.p - 1 and ch == self.v - 1
                    root = (self.emb_params if first else 0.0) + (self.head_params if last else 0.0)
                    if root > 0:
                        job = gather(root * gw, "root all_gather")
                        if first:
                            own_gather["embedding"] = job
                        if last:
                            own_gather["head"] = job
                if stage == 0 and ch == 0:
                    yield from self._await_gather(rank, own_gather, "embedding")
                    yield from run_items(self.p_emb_f, 1, "embedding")
                before = None
                if dp_on and self.z >= 3:
                    before = self._gather_hook(gather, layers)
                elif ch in prefetched and ch not in first_f_done:
                    before = self._wait_hook(prefetched[ch])
                first_f_done.add(ch)
                yield from layer_pass(self.p_fwd, layers, before, None, "fwd")
                if stage == self.p - 1 and ch == self.v - 1:
                    yield from self._await_gather(rank, own_gather, "head")
                    yield from run_items(self.p_head_f, 1, "head")
            else:
                if stage == self.p - 1 and ch == self.v - 1:
                    head_b = self.p_head_b_sync if sync else self.p_head_b
                    yield from run_items(head_b, 1, "head_bwd")
                    if dp_on and self.ov.dp_grad and (sync or grads_every_mb):
                        # The output layer's gradients are complete first: DDP and Megatron
                        # fill their buckets in reverse parameter order, so they open the
                        # first bucket instead of waiting for the embedding's at the end.
                        add_grads(self.head_params * grad_b, ch)
                before = None
                after = None
                if dp_on and self.z >= 3:
                    before = self._gather_hook(gather, layers)
                if dp_on and self.ov.dp_grad and (grads_every_mb or mb == last_b[ch]):

                    def after(i: int, ch: int = ch) -> None:
                        for t in layer_grads:
                            add_grads(t, ch)

                bwd = self.p_bwd_sync if sync else self.p_bwd
                yield from layer_pass(bwd, layers, before, after, "bwd")
                if stage == 0 and ch == 0:
                    emb_b = self.p_emb_b_sync if sync else self.p_emb_b
                    yield from run_items(emb_b, 1, "embedding_bwd")
                if dp_on and not self.ov.dp_grad and grads_every_mb:
                    # ZeRO-2/3 keep only their shard, so without overlap each micro-batch's
                    # gradients are reduced as its backward ends (DeepSpeed without
                    # overlap_comm, on the compute stream), before the next pass: exposed.
                    nbytes = sum(chunk_tensors(rs, stage, ch, grad_b))
                    n = max(1, chunk_bucket_count(rs, stage, ch, grad_b, targets[ch]))
                    t0 = env.now
                    for _ in range(n):
                        launch_dp(nbytes / n)
                    yield from self._wait(dp_jobs[-1])
                    self._book_wait(rank, dp_jobs[-n:], t0, "comm_dp")
                if dp_on and self.ov.dp_grad and grads_every_mb:
                    # The embedding's gradients are reduce-scattered every micro-batch too,
                    # like the layers' and the output layer's (ZeRO-2/3 keep only their shard),
                    # and what is left in a bucket goes out as the backward ends (DeepSpeed
                    # flushes its last bucket after each backward): no bucket holds two
                    # micro-batches' gradients.
                    if stage == 0 and ch == 0 and self.emb_params > 0:
                        add_grads(self.emb_params * grad_b, ch)
                    if pending_grads:
                        launch_dp(pending_grads)
                        pending_grads = 0.0
                elif dp_on and self.ov.dp_grad and ch > 0 and mb == last_b[ch] and pending_grads:
                    # A chunk's buckets hold its own parameters only (one DDP module each): what
                    # is left of a later chunk goes out when its last backward ends; the first
                    # chunk's, the last to finish, at the end of the step with the embedding's.
                    launch_dp(pending_grads)
                    pending_grads = 0.0
            if self.tracing:
                self.in_pass.discard(rank)
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

        params = self._stage_params(stage)
        # 4. gradients: the rest of the buckets (or all of them without overlap), then wait
        if dp_on:
            if self.ov.dp_grad:
                if not grads_every_mb and stage == 0:
                    # the embedding's gradients, last of all (the output layer's went with
                    # its backward; under ZeRO-2/3 both go with each micro-batch's, above)
                    pending_grads += self.emb_params * grad_b
                if pending_grads > 0:
                    launch_dp(pending_grads)
            else:
                if not grads_every_mb:  # (ZeRO-2/3 reduced each micro-batch's, above)
                    total, n = self._grad_buckets(stage)
                    for _ in range(n):
                        launch_dp(total / n)
        peer = self._tied_peer(rank, stage)
        if peer is not None:
            # The first and last stages all-reduce the shared word embedding's gradient beside
            # the DP reduction (Megatron after it, DeepSpeed before it; both block before the
            # optimizer): between two ranks, each sends the whole shard to the other.
            size = self.tied_bytes
            label = lambda: f"embedding all_reduce {size / 1e6:.0f} MB"  # noqa: E731
            tied = self._submit(rank, "dp", self.comm.exchange(rank, peer, size, label))
        else:
            tied = None
        if dp_jobs:
            t0 = env.now
            for job in dp_jobs:
                yield from self._wait(job)
            self._book_wait(rank, dp_jobs, t0, "comm_dp")
        if tied is not None:
            # Waiting for the other end of the pipeline to reach the exchange is waiting on
            # another stage (bubble, or imbalance beyond the drain: metrics); the transfer
            # itself is gradient communication.
            t0 = env.now
            yield from self._wait(tied)
            begun = tied.began if tied.began is not None else t0
            acc["pp_bubble"] += max(0.0, begun - t0)
            acc["comm_dp"] += env.now - max(begun, t0)
            if self.tracing:
                self._waited(rank, "pp_bubble", t0, max(begun, t0))
                self._waited(rank, "comm_dp", max(begun, t0), env.now)

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
            t_copy = self.timer.memory_time(2.0 * params * grad_bytes_per_param(rs))
            yield from paced("grad_bucket_copy_out", t_copy, "compute")
        # 5. optimizer step over this rank's shard, then (ZeRO-1/2 without overlap) the gather
        shard = params / (self.shard_n if self.z >= 1 else 1)
        t_opt = self._optimizer_time(shard, params, self._stage_tensors(stage))
        yield from paced("optimizer", t_opt, "optimizer")
        if dp_on and self.z in (1, 2) and not self.ov.param_gather:
            t0 = env.now
            job = self._gather_exposed(stage, params, gather)
            yield from self._wait(job)
            self._book_wait(rank, [job], t0, "comm_dp")
        res.finish = env.now

    def on_mark(self, mb: int) -> None:
        """Stage 0 is about to start micro-batch ``mb`` (one of ``marks``)."""

    def _optimizer_time(self, shard_params: float, params: float, tensors: int = 0) -> float:
        """The optimizer step over the rank's shard, and the passes over its whole buffer;
        ``tensors``: the parameter tensors it visits (a shard of each under ZeRO/FSDP)."""
        nbytes = shard_params * optimizer_bytes_per_param(self.rs)
        return self.timer.optimizer_time(nbytes + params * buffer_bytes_per_param(self.rs), tensors)

    def _stage_class(self, stage: int) -> RankResult:
        """The result that stands for a stage: its representative in symmetric mode; in full
        mode the mean over its ranks (they differ where groups straddle nodes unevenly, or
        under a straggler or failure of one rank)."""
        members = self.lay.stage_members(stage)
        if not self.full:
            return self.results[members[0]]
        return mean_result([self.results[r] for r in members])

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        self.loader_done = 0.0
        procs = [self.env.process(self.run_rank(r)) for r in self.ranks]
        if self.with_loader:
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
            if self.tracing:
                self._waited(r.rank, tail, r.finish, finish)
                self._waited(r.rank, "data_stall", finish, step)
        classes = {s: self._stage_class(s) for s in range(self.p)}
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


def run_engine(rs: ResolvedScenario, full: bool = False, trace: bool = False) -> EngineResult:
    return Simulation(rs, full=full, trace=trace).run()


__all__ = [
    "BUSY",
    "CATEGORIES",
    "STREAMS",
    "EngineResult",
    "RankResult",
    "Simulation",
    "run_engine",
]
