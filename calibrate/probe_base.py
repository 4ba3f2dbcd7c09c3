"""The probe's process: its rank and devices, its heartbeat, and the measurement helpers every
phase uses (timing local work, reducing over ranks). The phases live in
:mod:`calibrate.probe_collectives`, :mod:`calibrate.probe_device`,
:mod:`calibrate.probe_job_ops` and :mod:`calibrate.probe_train`; :mod:`calibrate.probe` puts
them together."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

FORMAT = "clustersim-probe"
VERSION = 1
PHASES = ("init", "collectives", "compute", "speed", "memory", "storage", "train", "jobs")
# What a plain probe run measures ("jobs" is validate's: other training jobs, asked for by name).
DEFAULT_PHASES = PHASES[1:-1]
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p")

# How the phases after the collective sweep share what is left of --time-budget, and about
# how long each takes at full length on a 2-core CPU (so a short share shortens its timings).
PHASE_WEIGHT = {"compute": 0.22, "speed": 0.2, "memory": 0.18, "storage": 0.04, "train": 0.36}
PHASE_NOMINAL_S = {"compute": 6.0, "speed": 4.5, "memory": 5.0, "storage": 0.3}

# What _timeit_cold writes between calls to empty the caches: at least 64 MB and four times
# the CPU's last-level cache as Linux reports it (server parts hold 100 MB or more), and more
# than an H100's 50 MB or a B200's 126 MB of L2 (datasheets) on a GPU.
FLUSH_BYTES, FLUSH_BYTES_GPU = 64 * 2**20, 512 * 2**20


def cpu_flush_bytes() -> int:
    """:data:`FLUSH_BYTES`, or four times the largest CPU cache sysfs lists if that is more."""
    largest = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            txt = f.read_text().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(txt[-1:], 1)
            largest = max(largest, int(txt.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return max(FLUSH_BYTES, 4 * largest)


# The probe's training job: small enough for a CPU, big enough that compute dominates noise.
DEFAULT_MODEL = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}


def default_threads(procs_on_host: int) -> int:
    """Threads per process so that processes × threads ≤ cores."""
    return max(1, (os.cpu_count() or 1) // max(1, procs_on_host))


def partial_path(out: Path) -> Path:
    """Where an unfinished probe writes when ``out`` already holds a complete probe: beside it,
    so that an interrupted re-run never replaces a complete file with an unfinished one."""
    return out.with_name(f"{out.stem}.partial{out.suffix or '.json'}")


def is_complete_probe(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("complete") is True


def is_probe_file(path: Path) -> bool:
    """Whether ``path`` holds a probe file (complete or not) this tool wrote: the only kind of
    existing file a probe may replace."""
    import re

    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return re.match(rb'\s*\{\s*"format"\s*:\s*"clustersim-probe"', head) is not None


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


class ProbeBase:
    # Set by Probe.run once the process group is up.
    dist: Any
    backend: str
    pg: bool

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
        # Until this probe completes, a complete probe already at --out is kept as it is.
        self.save_to = partial_path(self.out) if is_complete_probe(self.out) else self.out
        self.hb = heartbeat_dir(self.out)
        self.progress = 0
        self.phase = "start"
        self.detail = ""
        self.threads = args.threads or default_threads(self.local_world)
        torch.set_num_threads(self.threads)
        self.cuda = torch.cuda.is_available()
        self.device = torch.device(f"cuda:{self.local_rank}" if self.cuda else "cpu")
        # --time-budget is the whole probe's, counted from here (torch imported); each phase
        # sizes its work to what is left (see budget_left)
        self.t_start = time.monotonic()
        if getattr(args, "started_at", None):
            self.t_start -= max(0.0, time.time() - float(args.started_at))
        self.budget_end = self.t_start + args.time_budget
        self.deadline = self.budget_end  # the collective sweep's, set when it starts
        self.wanted: list[str] = []
        self.train_steps = int(args.train_steps)
        self.phase_end = self.budget_end  # this phase's share of the budget (see plan_phase)
        self.target_scale = 1.0  # timings' target durations, scaled down on a short budget
        self._flush: Any = None  # the buffer _timeit_cold writes to empty the caches
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

    def alone_on_host(self, work: Any, expect_s: float) -> Any:
        """``work()`` run by local rank 0 of each host while the host's other processes sleep a
        little longer than ``expect_s`` (asleep rather than waiting in a barrier, which may poll
        its socket), so that it has the host to itself; None on the other ranks and on a host
        with one process. Every rank calls it."""
        if self.local_world <= 1:
            return None
        self.sync()
        out = None
        if self.local_rank == 0:
            out = work()
        else:
            end = time.monotonic() + 1.3 * expect_s + 0.2
            with self._local():
                while (left := end - time.monotonic()) > 0:
                    time.sleep(min(left, 0.5))
        self.sync()
        return out

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
        atomic_write_json(self.out if complete else self.save_to, self.result)
        if complete and self.save_to != self.out:
            self.save_to.unlink(missing_ok=True)

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

    def plan_phase(self, phase: str, remaining: list[str]) -> None:
        """Give ``phase`` its share of the budget left: by the weights of :data:`PHASE_WEIGHT`
        over the phases still to run; timings inside it aim at proportionally shorter runs
        when the share is below the phase's usual length (:data:`PHASE_NOMINAL_S`)."""
        # this rank's own clock: no collective here, so a rank that hangs as the phase starts is
        # not joined in silence by the others (the launcher names the one without heartbeats);
        # decisions every rank must share go through phase_left
        left = self.budget_end - time.monotonic()
        total = sum(PHASE_WEIGHT.get(p, 0.0) for p in remaining) or 1.0
        share = max(0.0, left) * PHASE_WEIGHT.get(phase, 0.0) / total
        self.phase_end = time.monotonic() + share
        nominal = PHASE_NOMINAL_S.get(phase)
        self.target_scale = min(1.0, max(0.1, share / nominal)) if nominal else 1.0

    def phase_left(self) -> float:
        """Seconds left of this phase's share, the same on every rank."""
        return -self.reduce_max(-(self.phase_end - time.monotonic()))

    def budget_left(self) -> float:
        """Seconds of the time budget left, the same on every rank (the least of theirs)."""
        return -self.reduce_max(-(self.budget_end - time.monotonic()))

    def over_budget(self) -> bool:
        """Rank 0's clock decides, so every rank skips the same measurements."""
        return self.reduce_max(1.0 if time.monotonic() > self.deadline else 0.0) > 0

    # -- phases --------------------------------------------------------------------------------

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
        target_s *= self.target_scale
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

    def _timeit_cold(
        self, fn: Any, target_s: float = 0.15, min_calls: int = 5, max_calls: int = 40
    ) -> tuple[float, float, int]:
        """(cold, warm) seconds per call, medians over single calls, MAX over ranks: before
        each cold call a buffer larger than the caches is written, so the call starts with its
        operands out of cache as inside a training step (the step's other work evicted them),
        and each warm call repeats the call before it. Device events time a GPU's calls (as
        ``triton.testing.do_bench`` does, which also clears the L2 cache before each run)."""
        torch = self.torch
        if self._flush is None:
            n = (FLUSH_BYTES_GPU if self.cuda else cpu_flush_bytes()) // 4
            self._flush = torch.zeros(n, device=self.device)
        with self._local():
            fn()
            self._sync_dev()
            t0 = time.perf_counter()
            self._flush.add_(1.0)
            fn()
            self._sync_dev()
            first = max(time.perf_counter() - t0, 1e-7)
        calls = int(min(max_calls, max(min_calls, target_s * self.target_scale / (2 * first))))
        calls = int(self.reduce_max(calls))
        if self.pg:
            self.dist.barrier()
        cold: list[float] = []
        warm: list[float] = []
        for _ in range(calls):
            self._flush.add_(1.0)
            if self.pg and not self.cuda:
                # processes sharing a host's caches and memory bus all flush, then all time:
                # one's flush never overlaps another's timed call (a GPU's flush stays on it)
                self.dist.barrier()
            cold.append(self._one_call(fn))
            warm.append(self._one_call(fn))
        return (
            self.reduce_max(statistics.median(cold)),
            self.reduce_max(statistics.median(warm)),
            calls,
        )

    def _one_call(self, fn: Any) -> float:
        if self.cuda:
            torch = self.torch
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # the device kept busy while the call is queued: the start event fires when the
            # call can start, not when the host gets round to launching it
            torch.cuda._sleep(200_000)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return float(a.elapsed_time(b)) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

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
