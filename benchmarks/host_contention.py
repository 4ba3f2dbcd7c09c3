"""How much one host's processes slow each other, by kind of work (a script that prints
figures, not a test).

The CPU probe runs several gloo processes on one host, and the validation loop predicts runs
with one of them busy and with all of them busy. This measures, for one process alone and for
``--procs`` processes at once (one thread each): a DRAM-bound copy (64 MiB buffers), a
cache-resident copy (1 MiB) and a small GEMM. Where only the DRAM-bound work slows, a single
in-step factor fitted on one job under-corrects a job with a larger share of it.

Usage::

    python benchmarks/host_contention.py [--procs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time


def _rates(barrier: object = None) -> dict[str, float]:
    """The three rates in this process, each started together with the other processes
    (``barrier``) so that they overlap."""
    import torch

    torch.set_num_threads(1)

    def sync() -> None:
        if barrier is not None:
            barrier.wait()  # type: ignore[attr-defined]

    def copy_gbps(n: int, reps: int) -> float:
        a, b = torch.ones(n), torch.empty(n)
        for _ in range(3):
            b.copy_(a)
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            b.copy_(a)
        return 2 * 4 * n * reps / (time.perf_counter() - t) / 1e9

    def gemm_gflops(n: int, reps: int) -> float:
        x, w = torch.randn(n, n), torch.randn(n, n)
        for _ in range(3):
            x @ w
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            x @ w
        return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9

    return {
        "copy 64 MiB (GB/s)": copy_gbps(16 * 2**20, 100),
        "copy 1 MiB (GB/s)": copy_gbps(2**18, 8000),
        "GEMM 256^3 (GFLOP/s)": gemm_gflops(256, 1500),
    }


def _worker(barrier: object, out: object) -> None:
    out.put(_rates(barrier))  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="median of this many runs")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    alone: list[dict[str, float]] = []
    busy: list[dict[str, float]] = []
    for _ in range(a.repeat):
        with ctx.Pool(1) as pool:
            alone.append(pool.apply(_rates))
        barrier = ctx.Barrier(a.procs)
        out = ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(barrier, out)) for _ in range(a.procs)]
        for p in procs:
            p.start()
        every = [out.get() for _ in procs]
        for p in procs:
            p.join()
        busy.append({k: statistics.mean(r[k] for r in every) for k in every[0]})
    keys = list(alone[0])
    med_alone = {k: statistics.median(r[k] for r in alone) for k in keys}
    med_busy = {k: statistics.median(r[k] for r in busy) for k in keys}
    print(f"{'work':24s} {'alone':>10s} {f'{a.procs} busy, each':>16s} {'slowdown':>9s}")
    for k, v in med_alone.items():
        print(f"{k:24s} {v:10.1f} {med_busy[k]:16.1f} {v / med_busy[k]:8.2f}x")
    print(f"(medians of {a.repeat} runs; one thread per process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
