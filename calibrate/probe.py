"""The torch.distributed probe: measures collectives, compute, memory, storage and a small real
training step, and writes one JSON file (``format: clustersim-probe``, ``version: 1``).

Run it under any launcher that sets RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE and
MASTER_ADDR / MASTER_PORT (torchrun does)::

    torchrun --nproc-per-node 2 -m calibrate.probe --out p.json

or through ``clustersim probe --nproc 2 --out p.json``, which launches the processes itself and
watches them (see :mod:`calibrate.launch`). Without RANK in the environment it runs as a single
process.

Collectives are timed in the nccl-tests manner: warm-up iterations, a barrier, many iterations,
the time per iteration reduced with MAX over ranks; ``algbw = S / t`` and ``busbw = algbw ·
factor`` with S the full buffer (all-gather: the gathered output; reduce-scatter: the input).

Faults: rank 0 rewrites the output atomically (tmp file + ``os.replace``) after every phase, so
a crash leaves valid JSON with ``complete: false`` and every measurement finished before. Each
rank writes a heartbeat file (``<out>.hb/rank<R>.json``: phase and progress counter) that the
launcher reads to name the rank and phase that died or hung.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FORMAT = "clustersim-probe"
VERSION = 1
PHASES = ("init", "collectives", "compute", "speed", "memory", "storage", "train")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p")

# The probe's training job: small enough for a CPU, big enough that compute dominates noise.
DEFAULT_MODEL = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}


def default_threads(procs_on_host: int) -> int:
    """Threads per process so that processes × threads ≤ cores."""
    return max(1, (os.cpu_count() or 1) // max(1, procs_on_host))


def atomic_write_json(path: Path, data: Any) -> None:
    from simulator.report.files import write_json

    write_json(path, data)


def heartbeat_dir(out: Path) -> Path:
    return out.parent / (out.name + ".hb")


def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


class Probe:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.args = args
        self.torch = torch
        env = os.environ
        self.rank = int(env.get("RANK", "0"))
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world = int(env.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.node = self.rank // self.local_world
        self.nodes = max(1, self.world // self.local_world)
        self.out = Path(args.out)
        self.hb = heartbeat_dir(self.out)
        self.progress = 0
        self.phase = "start"
        self.detail = ""
        self.threads = args.threads or default_threads(self.local_world)
        torch.set_num_threads(self.threads)
        self.cuda = torch.cuda.is_available()
        self.device = torch.device(f"cuda:{self.local_rank}" if self.cuda else "cpu")
        self.deadline = time.monotonic() + args.time_budget  # reset when collectives start
        self.result: dict[str, Any] = {}

    # -- bookkeeping ----------------------------------------------------------------------------
    def beat(self, phase: str | None = None, detail: str = "") -> None:
        if phase is not None:
            self.phase = phase
        self.detail = detail
        self.progress += 1
        try:
            atomic_write_json(
                self.hb / f"rank{self.rank}.json",
                {
                    "rank": self.rank,
                    "node": self.node,
                    "pid": os.getpid(),
                    "phase": self.phase,
                    "detail": detail,
                    "progress": self.progress,
                    "time": time.time(),
                },
            )
        except OSError:
            pass

    @contextlib.contextmanager
    def _local(self, every_s: float = 1.0) -> Any:
        """Heartbeats every ``every_s`` while this rank runs purely local work (no collective
        inside), so a long measurement on a slow or busy machine is not taken for a hang; a rank
        blocked in a collective stays silent, and the launcher can still tell who hangs."""
        import threading

        stop = threading.Event()

        def pulse() -> None:
            while not stop.wait(every_s):
                self.beat(detail=self.detail)

        t = threading.Thread(target=pulse, daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()

    def enter(self, phase: str) -> None:
        self.beat(phase)
        a = self.args
        if a.fail_rank is not None and a.fail_rank == self.rank and a.fail_phase == phase:
            sys.stderr.write(f"probe: rank {self.rank} failing on purpose in phase {phase}\n")
            sys.stderr.flush()
            if a.fail_mode == "hang":
                while True:
                    time.sleep(3600)
            os._exit(1)

    def save(self, complete: bool = False) -> None:
        if self.rank != 0:
            return
        self.result["complete"] = complete
        self.result["phases_done"] = list(self.result.get("phases_done", []))
        atomic_write_json(self.out, self.result)

    def sync(self) -> None:
        if self.world > 1:
            self.dist.barrier()
        if self.cuda:
            self.torch.cuda.synchronize()

    def reduce_max(self, x: float) -> float:
        if self.world <= 1:
            return x
        t = self.torch.tensor([x], dtype=self.torch.float64)
        if self.backend == "nccl":
            t = t.to(self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())

    def gather_floats(self, xs: list[float]) -> list[list[float]]:
        """Every rank's list (all of the same length), in rank order."""
        if self.world <= 1:
            return [xs]
        t = self.torch.tensor(xs, dtype=self.torch.float64)
        if self.backend == "nccl":
            t = t.to(self.device)
        out = [self.torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t)
        return [[float(v) for v in o.cpu().tolist()] for o in out]

    def over_budget(self) -> bool:
        """Rank 0's clock decides, so every rank skips the same measurements."""
        return self.reduce_max(1.0 if time.monotonic() > self.deadline else 0.0) > 0

    # -- phases --------------------------------------------------------------------------------
    def run(self) -> int:
        import torch.distributed as dist

        self.dist = dist
        a = self.args
        self.enter("init")
        self.backend = "nccl" if self.cuda else "gloo"
        if self.cuda:
            self.torch.cuda.set_device(self.device)
        if self.world > 1 or "MASTER_ADDR" in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            dist.init_process_group(
                self.backend,
                rank=self.rank,
                world_size=self.world,
                timeout=dt.timedelta(seconds=a.timeout),
            )
            self.pg = True
        else:
            self.pg = False
        hostnames = [socket.gethostname()]
        if self.pg:
            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, hostnames[0])
            hostnames = gathered
        devices = (
            [self.torch.cuda.get_device_name(i) for i in range(self.torch.cuda.device_count())]
            if self.cuda
            else [platform.processor() or platform.machine()]
        )
        self.result = {
            "format": FORMAT,
            "version": VERSION,
            "complete": False,
            "host": socket.gethostname(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "torch": self.torch.__version__,
            "python": platform.python_version(),
            "backend": self.backend if self.pg else "none",
            "device_type": self.device.type,
            "devices": devices,
            "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_bytes": _memory_bytes(),
            "world_size": self.world,
            "nodes": self.nodes,
            "procs_per_node": self.local_world,
            "hosts": len(set(hostnames)),  # 'nodes' on one host share its cores
            "threads_per_process": self.threads,
            "args": {k: v for k, v in vars(a).items() if not k.startswith("fail")},
            "phases_done": [],
            "notes": [],
        }
        self.save()
        wanted = [p.strip() for p in a.phases.split(",")] if a.phases else list(PHASES[1:])
        for phase in PHASES[1:]:
            if phase not in wanted:
                continue
            self.enter(phase)
            getattr(self, f"phase_{phase}")()
            self.result["phases_done"].append(phase)
            self.save()
            self.sync()
        self.enter("done")
        self.save(complete=True)
        if self.pg:
            dist.barrier()
            dist.destroy_process_group()
        return 0

    # collectives -------------------------------------------------------------------------------
    def _groups(self) -> list[tuple[str, Any, list[int]]]:
        """(label, group handle, ranks) for this rank: the world when one node; intra-node and
        inter-node groups when several (every rank creates every group, as torch requires)."""
        dist = self.dist
        if self.nodes <= 1:
            return [("intra", None, list(range(self.world)))]
        mine: list[tuple[str, Any, list[int]]] = []
        for n in range(self.nodes):
            ranks = list(range(n * self.local_world, (n + 1) * self.local_world))
            g = dist.new_group(ranks) if len(ranks) > 1 else None
            if self.rank in ranks and len(ranks) > 1:
                mine.append(("intra", g, ranks))
        for lr in range(self.local_world):
            ranks = [n * self.local_world + lr for n in range(self.nodes)]
            g = dist.new_group(ranks)
            if self.rank in ranks:
                mine.append(("inter", g, ranks))
        return mine

    def _coll_fn(self, op: str, nbytes: int, group: Any, ranks: list[int]) -> tuple[Any, str]:
        torch, dist = self.torch, self.dist
        n = len(ranks)
        elems = max(n, nbytes // 4 // n * n)
        dev = self.device
        kw = {"group": group} if group is not None else {}
        if op == "all_reduce":
            buf = torch.ones(elems, device=dev)
            return (lambda: dist.all_reduce(buf, **kw)), "all_reduce"
        if op == "broadcast":
            buf = torch.ones(elems, device=dev)
            return (lambda: dist.broadcast(buf, src=ranks[0], **kw)), "broadcast"
        if op == "all_gather":
            inp = torch.ones(elems // n, device=dev)
            outp = torch.empty(elems, device=dev)
            fn = getattr(dist, "all_gather_single", None) or getattr(
                dist, "all_gather_into_tensor", None
            )
            if fn is not None and self._works(lambda: fn(outp, inp, **kw)):
                return (lambda: fn(outp, inp, **kw)), fn.__name__
            outs = list(outp.chunk(n))
            return (lambda: dist.all_gather(outs, inp, **kw)), "all_gather(list)"
        if op == "reduce_scatter":
            inp = torch.ones(elems, device=dev)
            outp = torch.empty(elems // n, device=dev)
            fn = getattr(dist, "reduce_scatter_single", None) or getattr(
                dist, "reduce_scatter_tensor", None
            )
            if fn is not None and self._works(lambda: fn(outp, inp, **kw)):
                return (lambda: fn(outp, inp, **kw)), fn.__name__
            me = ranks.index(self.rank)

            def fallback() -> None:
                dist.all_reduce(inp, **kw)
                outp.copy_(inp[me * (elems // n) : (me + 1) * (elems // n)])

            return fallback, "fallback: all_reduce + slice (no reduce_scatter in this backend)"
        if op == "all_to_all":
            inp = torch.ones(elems, device=dev)
            outp = torch.empty(elems, device=dev)
            if self._works(lambda: dist.all_to_all_single(outp, inp, **kw)):
                return (lambda: dist.all_to_all_single(outp, inp, **kw)), "all_to_all_single"
            ins, outs = list(inp.chunk(n)), list(outp.chunk(n))

            def a2a_p2p() -> None:
                me = ranks.index(self.rank)
                reqs = []
                for j, r in enumerate(ranks):
                    if r == self.rank:
                        outs[j].copy_(ins[j])
                        continue
                    reqs.append(dist.isend(ins[j], r, **kw))
                    reqs.append(dist.irecv(outs[j], r, **kw))
                for q in reqs:
                    q.wait()
                del me

            return a2a_p2p, "fallback: pairwise isend/irecv (no all_to_all in this backend)"
        if op == "p2p":
            buf = torch.ones(max(1, nbytes // 4), device=dev)
            a, b = ranks[0], ranks[1]

            def pingpong() -> None:
                # One iteration = a→b and b→a; the timing divides by 2 (one-way time).
                if self.rank == a:
                    dist.send(buf, b, **kw)
                    dist.recv(buf, b, **kw)
                elif self.rank == b:
                    dist.recv(buf, a, **kw)
                    dist.send(buf, a, **kw)

            return pingpong, "send/recv ping-pong between the group's first two ranks (t/2)"
        raise ValueError(op)

    def _works(self, fn: Any) -> bool:
        try:
            fn()
            ok = 1.0
        except (RuntimeError, NotImplementedError, ValueError, AttributeError):
            ok = 0.0
        # every rank must agree, or the next collective would mismatch
        return self.reduce_max(1.0 - ok) == 0.0

    def phase_collectives(self) -> None:
        a = self.args
        rows: list[dict[str, Any]] = []
        self.result["collectives"] = rows
        if self.world <= 1:
            self.result["notes"].append("world size 1: no collectives measured")
            return
        self.deadline = time.monotonic() + a.time_budget
        sizes = []
        s = 1024
        while s <= a.max_bytes:
            sizes.append(s)
            s *= a.size_factor
        groups = self._groups()
        impls: dict[str, str] = {}
        budget_hit = False
        # Small sizes of every collective first, so a short budget still samples them all.
        for nbytes in sizes:
            if budget_hit:
                break
            for op in COLLECTIVES:
                for label, g, ranks in groups:
                    if self.over_budget():
                        budget_hit = True
                        self.result["notes"].append(
                            f"time budget ({a.time_budget:g} s) reached: collectives stopped "
                            f"before {op} {label} {nbytes} B"
                        )
                        break
                    self.beat(detail=f"{op} {label} {nbytes} B")
                    row = self._time_coll(op, nbytes, g, ranks)
                    row["group"] = label
                    impls[op] = row.pop("impl")
                    if self.rank == ranks[0]:
                        rows.append(row)
                    # inter-node rows are measured concurrently by every local rank; rank 0 keeps
                    # its own group's figures
                if budget_hit:
                    break
            self.save()
        self.result["collective_impl"] = impls
        fallbacks = {k: v for k, v in impls.items() if v.startswith("fallback")}
        for k, v in fallbacks.items():
            self.result["notes"].append(f"{k}: {v}")
            sys.stderr.write(f"probe: {k} measured with {v}\n")

    def _time_coll(self, op: str, nbytes: int, group: Any, ranks: list[int]) -> dict[str, Any]:
        n = len(ranks)
        fn, impl = self._coll_fn(op, nbytes, group, ranks)
        kw = {"group": group} if group is not None else {}
        for _ in range(self.args.warmup):
            fn()
        self.dist.barrier(**kw)
        t0 = time.perf_counter()
        fn()
        self._sync_dev()
        first = time.perf_counter() - t0
        # The same iteration count on every rank: from the slowest rank's first iteration.
        first = self._group_max(first, group)
        iters = int(min(self.args.max_iters, max(self.args.min_iters, 0.05 / max(first, 1e-7))))
        # Three timed runs, the median kept: one descheduled moment on a shared CPU spoils a
        # run, not the figure (nccl-tests' single average assumes a quiet machine).
        per_run = max(1, iters // 3)
        runs = []
        for _ in range(3):
            self.dist.barrier(**kw)
            t0 = time.perf_counter()
            for _ in range(per_run):
                fn()
            self._sync_dev()
            runs.append((time.perf_counter() - t0) / per_run)
        iters = 3 * per_run
        t = statistics.median(runs)
        if op == "p2p":
            t /= 2.0
        t = self._group_max(t, group)
        size = nbytes if op != "p2p" else max(1, nbytes // 4) * 4
        size = max(n, nbytes // 4 // n * n) * 4 if op != "p2p" else size
        algbw = size / t / 1e9
        return {
            "op": op,
            "group_size": n if op != "p2p" else 2,
            "ranks": ranks,
            "bytes": size,
            "time_s": t,
            "iters": iters,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * bus_factor(op, n if op != "p2p" else 2),
            "impl": impl,
        }

    def _group_max(self, x: float, group: Any) -> float:
        t = self.torch.tensor([x], dtype=self.torch.float64)
        if self.backend == "nccl":
            t = t.to(self.device)
        kw = {"group": group} if group is not None else {}
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, **kw)
        return float(t.item())

    def _sync_dev(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    # compute ---------------------------------------------------------------------------------
    def _timeit(
        self, fn: Any, target_s: float = 0.15, max_iters: int = 50, repeats: int = 3
    ) -> tuple[float, int]:
        """Seconds per call: the median of ``repeats`` timed runs (robust to a shared CPU),
        MAX over ranks; the same iteration count on every rank."""
        with self._local():
            fn()
            self._sync_dev()
            t0 = time.perf_counter()
            fn()
            self._sync_dev()
        first = max(time.perf_counter() - t0, 1e-7)
        iters = int(min(max_iters, max(1, target_s / repeats / first)))
        iters = int(self.reduce_max(iters))
        if self.pg:
            self.dist.barrier()
        runs = []
        with self._local():
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                self._sync_dev()
                runs.append((time.perf_counter() - t0) / iters)
        return self.reduce_max(statistics.median(runs)), iters * repeats

    def model_config(self) -> dict[str, int]:
        return dict(
            DEFAULT_MODEL,
            **{
                k: v
                for k, v in {
                    "layers": self.args.layers,
                    "hidden": self.args.hidden,
                    "batch": self.args.batch,
                    "seq": self.args.seq,
                }.items()
                if v
            },
        )

    def phase_compute(self) -> None:
        torch = self.torch
        dtypes = ["fp32", "bf16"] + (["fp16"] if self.cuda else [])
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
        cfg = self.model_config()
        T, h, V = cfg["batch"] * cfg["seq"], cfg["hidden"], cfg["vocab"]
        # Square sizes, and the training job's own GEMM shapes (forward and backward).
        shapes = [(n, n, n) for n in (64, 128, 256, 384, 512, 768, 1024)]
        if self.cuda:
            shapes += [(n, n, n) for n in (2048, 4096, 8192)]
        shapes += [
            (T, h, 3 * h),
            (T, h, h),
            (T, h, 4 * h),
            (T, 4 * h, h),
            (T, h, V),
            (T, V, h),
            (h, T, 4 * h),
            (4 * h, T, h),
            (h, T, V),
        ]
        rows: list[dict[str, Any]] = []
        self.result["matmul"] = rows
        for dname in dtypes:
            for m, k, n in shapes:
                self.beat(detail=f"matmul {dname} {m}x{k}x{n}")
                x = torch.randn(m, k, device=self.device).to(tdt[dname])
                y = torch.randn(k, n, device=self.device).to(tdt[dname])
                t, it = self._timeit(lambda x=x, y=y: torch.matmul(x, y))
                fl = 2.0 * m * k * n
                rows.append(
                    {
                        "dtype": dname,
                        "m": m,
                        "k": k,
                        "n": n,
                        "flops": fl,
                        "time_s": t,
                        "iters": it,
                        "tflops": fl / t / 1e12,
                    }
                )
        self.save()
        # Per-operation overhead (the CPU's "kernel launch"): a one-element in-place add.
        self.beat(detail="op overhead")
        one = torch.zeros(1, device=self.device)
        t, it = self._timeit(lambda: one.add_(1.0), target_s=0.05, max_iters=2000)
        self.result["op_overhead"] = {
            "op": "x.add_(1) on a 1-element tensor",
            "time_s": t,
            "iters": it,
        }
        # Attention: scaled_dot_product_attention (causal) forward + backward on the training
        # job's shape, FLOPs counted as the simulator does (full s×s, backward = 2× forward).
        self.beat(detail="attention")
        import torch.nn.functional as F

        b, s, nh = cfg["batch"], cfg["seq"], cfg["heads"]
        hd = h // nh
        q, k_, v = (
            torch.randn(b, nh, s, hd, device=self.device, requires_grad=True) for _ in range(3)
        )

        def attn() -> None:
            o = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
            o.sum().backward()

        t, it = self._timeit(attn)
        fl = 3 * 4.0 * s * nh * hd * b * s
        self.result["attention"] = {
            "batch": b,
            "seq": s,
            "heads": nh,
            "head_dim": hd,
            "dtype": "fp32",
            "flops_fwd_bwd": fl,
            "time_s": t,
            "iters": it,
            "tflops": fl / t / 1e12,
            "kernel": "scaled_dot_product_attention(is_causal=True)",
        }

    def phase_speed(self, block_s: float = 0.1, blocks: int = 24, warmup: int = 2) -> None:
        """How much a device's speed varies from one step-sized stretch of work to the next,
        and between devices: every rank at once runs the same block (a GEMM of the training
        job's MLP shape and a GELU over its output) back to back, timed block by block, with no
        synchronisation in between. Feeds ``speed_cv`` (stragglers)."""
        torch = self.torch
        cfg = self.model_config()
        T, h = cfg["batch"] * cfg["seq"], cfg["hidden"]
        x = torch.randn(T, h, device=self.device)  # fp32, as the training job
        w = torch.randn(h, 4 * h, device=self.device)

        def unit() -> None:
            torch.nn.functional.gelu(torch.matmul(x, w))

        self.beat(detail="speed variation")
        for _ in range(3):
            unit()
        self._sync_dev()
        t0 = time.perf_counter()
        for _ in range(5):
            unit()
        self._sync_dev()
        per = max((time.perf_counter() - t0) / 5, 1e-7)
        reps = int(self.reduce_max(max(1, round(block_s / per))))
        self.sync()
        times: list[float] = []
        for _ in range(blocks + warmup):
            t0 = time.perf_counter()
            for _ in range(reps):
                unit()
            self._sync_dev()
            times.append(time.perf_counter() - t0)
        per_rank = self.gather_floats(times[warmup:])
        self.result["speed_variation"] = {
            "work": f"{reps} × (matmul {T}x{h}x{4 * h} + GELU), fp32",
            "reps": reps,
            "block_target_s": block_s,
            "warmup_blocks": warmup,
            "block_times_s": per_rank,
        }

    def phase_memory(self) -> None:
        torch = self.torch
        rows: list[dict[str, Any]] = []
        self.result["memory"] = rows
        for mb in (8, 32, 128):
            self.beat(detail=f"copy {mb} MiB")
            n = mb * 2**20 // 4
            src = torch.ones(n, device=self.device)
            dst = torch.empty(n, device=self.device)
            t, it = self._timeit(lambda src=src, dst=dst: dst.copy_(src))
            moved = 2 * n * 4  # read + write
            rows.append(
                {
                    "kind": "copy",
                    "bytes": n * 4,
                    "bytes_moved": moved,
                    "time_s": t,
                    "iters": it,
                    "gbps": moved / t / 1e9,
                }
            )
            t, it = self._timeit(lambda src=src, dst=dst: dst.copy_(torch.nn.functional.gelu(src)))
            moved = 4 * n * 4  # gelu: read + write a temporary, then copy it
            rows.append(
                {
                    "kind": "gelu+copy",
                    "bytes": n * 4,
                    "bytes_moved": moved,
                    "time_s": t,
                    "iters": it,
                    "gbps": moved / t / 1e9,
                }
            )

        self.save()
        self._job_memory_ops()

    def _job_memory_ops(self) -> None:
        """The training job's own memory-bound operations on its shapes, forward and backward
        (as Vidur and vTrain profile a model's operators), and its optimizer step: the
        simulator's byte counts over these times give the bandwidth fractions it uses."""
        torch = self.torch
        F = torch.nn.functional
        from .model import ProbeTransformer

        cfg = self.model_config()
        T, h, V = cfg["batch"] * cfg["seq"], cfg["hidden"], cfg["vocab"]
        dev = self.device

        def fwd_bwd(make: Any) -> Any:
            def run() -> None:
                for leaf in (x_h, x_4h, logits, w, b):
                    leaf.grad = None  # as zero_grad(set_to_none=True): no accumulation adds
                out = make()
                out.backward(gout[out.shape])

            return run

        x_h = torch.randn(T, h, device=dev, requires_grad=True)
        x_4h = torch.randn(T, 4 * h, device=dev, requires_grad=True)
        logits = torch.randn(T, V, device=dev, requires_grad=True)
        target = torch.randint(0, V, (T,), device=dev)
        w, b = torch.ones(h, device=dev, requires_grad=True), torch.zeros(h, device=dev)
        b.requires_grad_(True)
        gout = {
            torch.Size([T, h]): torch.randn(T, h, device=dev),
            torch.Size([T, 4 * h]): torch.randn(T, 4 * h, device=dev),
            torch.Size([]): torch.ones((), device=dev),
        }
        a1, a2 = torch.randn(T, h, device=dev), torch.randn(T, h, device=dev)
        ops: dict[str, tuple[str, Any]] = {
            "layernorm": (
                f"layer_norm ({T}x{h}) fwd+bwd",
                fwd_bwd(lambda: F.layer_norm(x_h, (h,), w, b)),
            ),
            "gelu": (f"gelu ({T}x{4 * h}) fwd+bwd", fwd_bwd(lambda: F.gelu(x_4h))),
            "add": (f"add ({T}x{h})", lambda: torch.add(a1, a2)),
            "cross_entropy": (
                f"cross_entropy ({T}x{V}) fwd+bwd",
                fwd_bwd(lambda: F.cross_entropy(logits, target)),
            ),
        }
        rows: dict[str, Any] = {}
        for key, (what, fn) in ops.items():
            self.beat(detail=f"job op {key}")
            t, it = self._timeit(fn, target_s=0.1)
            rows[key] = {"op": what, "time_s": t, "iters": it}
        self.beat(detail="job op optimizer")
        model = ProbeTransformer(
            **{k: cfg[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        )
        model = model.to(dev)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        t, it = self._timeit(opt.step, target_s=0.1)
        n = sum(p.numel() for p in model.parameters())
        rows["optimizer"] = {
            "op": f"AdamW (foreach) step over the job's {n} fp32 parameters",
            "params": n,
            "time_s": t,
            "iters": it,
        }
        self.result["job_ops"] = rows

    def phase_storage(self) -> None:
        rows: dict[str, Any] = {}
        if self.local_rank != 0:
            return
        base = Path(self.args.storage_path or tempfile.gettempdir())
        size = self.args.storage_bytes
        path = base / f"clustersim-probe-{socket.gethostname()}-{os.getpid()}.bin"
        block = os.urandom(1 << 20)
        try:
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                left = size
                while left > 0:
                    f.write(block[: min(left, len(block))])
                    left -= len(block)
                f.flush()
                os.fsync(f.fileno())
            tw = time.perf_counter() - t0
            self.beat(detail="storage read")
            fd = os.open(path, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                os.read(fd, 4096)
                first = time.perf_counter() - t0
                os.lseek(fd, 0, os.SEEK_SET)
                t0 = time.perf_counter()
                while os.read(fd, 1 << 22):
                    pass
                tr = time.perf_counter() - t0
            finally:
                os.close(fd)
            rows = {
                "path": str(base),
                "bytes": size,
                "write_s": tw,
                "read_s": tr,
                "first_byte_s": first,
                "write_gbps": size / tw / 1e9,
                "read_gbps": size / tr / 1e9,
                "note": "sequential write with fsync, then read after posix_fadvise "
                "DONTNEED (the page cache may still serve part of the read)",
            }
        finally:
            try:
                path.unlink()
            except OSError:
                pass
        if self.node == 0:
            self.result["storage"] = rows

    # training --------------------------------------------------------------------------------
    def phase_train(self) -> None:
        torch = self.torch
        from .model import ProbeTransformer

        cfg = self.model_config()
        torch.manual_seed(0)
        model = ProbeTransformer(
            **{k: cfg[k] for k in ("layers", "hidden", "heads", "vocab", "seq")}
        ).to(self.device)
        params = sum(p.numel() for p in model.parameters())
        wrap = "none"
        if self.pg and self.world > 1:
            if self.args.fsdp:
                from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

                model = FSDP(model)  # type: ignore[assignment]
                wrap = "fsdp"
            else:
                from torch.nn.parallel import DistributedDataParallel as DDP

                model = DDP(model, bucket_cap_mb=25)  # type: ignore[assignment]
                wrap = "ddp"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        g = torch.Generator().manual_seed(self.rank)
        tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g)
        tokens = tokens.to(self.device)
        lossf = torch.nn.functional.cross_entropy

        def step(grad_sync: bool = True) -> float:
            opt.zero_grad(set_to_none=True)
            with contextlib.nullcontext() if grad_sync else model.no_sync():  # type: ignore[operator]
                logits = model(tokens[:, :-1])
                loss = lossf(logits.reshape(-1, cfg["vocab"]), tokens[:, 1:].reshape(-1))
                loss.backward()
            opt.step()
            self._sync_dev()
            return float(loss.detach())

        def timed(what: str, grad_sync: bool = True) -> list[float]:
            out: list[float] = []
            for i in range(self.args.train_steps):
                self.beat(detail=f"{what} {i}")
                t0 = time.perf_counter()
                step(grad_sync)
                out.append(time.perf_counter() - t0)
            return out

        for i in range(self.args.train_warmup):
            self.beat(detail=f"train warm-up {i}")
            step()
        # The same step without gradient synchronisation (DDP's no_sync: no all-reduce, no
        # bucket copies), every rank at once: the compute-stream work of one step on a device
        # whose host is fully busy, as the simulator's compute and optimizer time describe it.
        compute_only: list[list[float]] | None = None
        alone: list[float] | None = None
        if wrap == "ddp":
            self.sync()
            compute_only = self.gather_floats(timed("train step without gradient sync", False))
            # ... and by one process per host while the host's others wait: how much of the
            # difference is the host's other devices being busy (shared caches, memory bus).
            self.sync()
            if self.local_world > 1 and self.local_rank == 0:
                alone = timed("train step without gradient sync, alone on the host", False)
        self.sync()
        times = timed("train step")
        if wrap == "none":  # one process: the step is all compute-stream work
            compute_only = [list(times)]
        # per-step time = slowest rank's (MAX over ranks, step by step)
        times = [self.reduce_max(t) for t in times]
        self.result["train"] = {
            "model": {
                **cfg,
                "mlp": "gelu",
                "norm": "layernorm",
                "position": "learned",
                "tied_embeddings": False,
                "linear_bias": False,
                "attention": "scaled_dot_product_attention(is_causal=True)",
            },
            "params": params,
            "dtype": "fp32",
            "optimizer": "adamw (foreach)",
            "wrapper": wrap,
            "bucket_cap_mb": 25,
            "world_size": self.world,
            "nodes": self.nodes,
            "procs_per_node": self.local_world,
            "threads_per_process": self.threads,
            "batch_per_rank": cfg["batch"],
            "warmup_steps": self.args.train_warmup,
            "step_times_s": times,
            "step_time_median_s": statistics.median(times),
            "step_time_min_s": min(times),
        }
        if compute_only is not None:
            self.result["train"].update(
                {
                    "compute_step_times_s": compute_only,
                    "compute_step_median_s": statistics.median(
                        t for rank_times in compute_only for t in rank_times
                    ),
                    "compute_step_how": (
                        "the same step with DDP's no_sync (no all-reduce, no bucket copies), "
                        "every rank at once; per rank"
                        if wrap == "ddp"
                        else "the step itself (one process: no communication)"
                    ),
                }
            )
        if alone:  # rank 0 is local rank 0 of its host
            self.result["train"].update(
                {
                    "alone_compute_step_times_s": alone,
                    "alone_compute_step_median_s": statistics.median(alone),
                }
            )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m calibrate.probe", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", required=True, help="probe JSON to write (rank 0)")
    p.add_argument("--max-bytes", type=int, default=64 * 2**20)
    p.add_argument("--size-factor", type=int, default=4, help="message size step (×)")
    p.add_argument(
        "--time-budget",
        type=float,
        default=60.0,
        help="seconds for the collective sweep (larger sizes are skipped past it); "
        "compute, memory, storage and training use fixed small sets",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds a collective may wait for a dead or hung rank",
    )
    p.add_argument("--storage-path", default=None)
    p.add_argument("--storage-bytes", type=int, default=64 * 2**20)
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per process (0: cores // processes on the host)",
    )
    p.add_argument("--phases", default="", help=f"comma list of {', '.join(PHASES[1:])}")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=50)
    p.add_argument("--train-steps", type=int, default=8)
    p.add_argument("--train-warmup", type=int, default=3)
    p.add_argument("--fsdp", action="store_true", help="wrap the training model in FSDP")
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--fail-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fail-phase", default=None, help=argparse.SUPPRESS)
    p.add_argument("--fail-mode", choices=("exit", "hang"), default="exit", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return Probe(args).run()


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["FORMAT", "VERSION", "PHASES", "atomic_write_json", "heartbeat_dir", "main"]
