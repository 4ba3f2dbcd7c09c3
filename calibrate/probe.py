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
import datetime as dt
import os
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .probe_base import (
    DEFAULT_PHASES,
    FORMAT,
    PHASES,
    VERSION,
    atomic_write_json,
    heartbeat_dir,
)
from .probe_collectives import CollectivePhase
from .probe_device import DevicePhases
from .probe_job_ops import JobOpsPhase
from .probe_train import TrainPhase

# A GPU's memory stays with PyTorch's caching allocator from one step to the next, so a step
# never pays to map memory. On a CPU, glibc hands a large freed block back to the kernel
# (munmap, or a trimmed heap top) and the next step's tensors fault every page in again: on a
# 2-core VM that is 8% of the probe job's step and 20-30% of a step with 16-64 MB logits
# (benchmarks/results/validate-rounds-2026-11-24-session12.txt, note). The probe's processes
# keep freed memory in their heap, as the caching allocator does, unless the caller set these
# (calibrate.launch starts them with this environment).
HEAP_KEEPING_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(2**31 - 1),
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
}


class Probe(CollectivePhase, DevicePhases, JobOpsPhase, TrainPhase):
    def phase_memory(self) -> None:
        """Copies of growing size, then the training job's own operations."""
        self.memory_copies()
        self.job_memory_ops()

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
            # what one device holds (the host's RAM above is not it)
            "device_memory_bytes": (
                int(self.torch.cuda.get_device_properties(self.device).total_memory)
                if self.cuda
                else None
            ),
            "world_size": self.world,
            "nodes": self.nodes,
            "procs_per_node": self.local_world,
            "hosts": len(set(hostnames)),  # 'nodes' on one host share its cores
            "threads_per_process": self.threads,
            # How the host allocator keeps freed memory (HEAP_KEEPING_ENV, set by the launcher).
            "malloc_env": {k: os.environ[k] for k in HEAP_KEEPING_ENV if k in os.environ},
            "args": {k: v for k, v in vars(a).items() if not k.startswith("fail")},
            "phases_done": [],
            "notes": [],
        }
        self.save()
        wanted = [p.strip() for p in a.phases.split(",")] if a.phases else list(DEFAULT_PHASES)
        self.wanted = wanted
        seconds: dict[str, float] = {}
        self.result["phase_seconds"] = seconds
        for phase in PHASES[1:]:
            if phase not in wanted:
                continue
            self.enter(phase)
            if phase != "collectives":
                self.plan_phase(phase, [q for q in PHASES if q in wanted and q not in seconds])
            t0 = time.monotonic()
            getattr(self, f"phase_{phase}")()
            seconds[phase] = time.monotonic() - t0
            self.result["phases_done"].append(phase)
            self.save()
            self.sync()
        self.enter("done")
        self.save(complete=True)
        if self.pg:
            dist.barrier()
            dist.destroy_process_group()
        if self.local_rank == 0:
            # every rank is past its last heartbeat (the barrier): under torchrun nobody else
            # removes the folder (clustersim's own launcher does, too)
            shutil.rmtree(self.hb, ignore_errors=True)
        return 0

    # collectives -------------------------------------------------------------------------------


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
        help="seconds for the whole probe: the collective sweep takes up to half (larger sizes "
        "are skipped past it), the GEMM sweep, speed blocks and training steps shrink to what "
        "is left",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds a collective may wait for a dead or hung rank",
    )
    p.add_argument(
        "--started-at",
        type=float,
        default=None,
        help="epoch seconds the time budget counts from (default: when the probe starts)",
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
    # 16 pairs: on the 2-core VM one sync cost's paired differences scatter 9-51 ms about a
    # 20-27 ms median (2026-11-24), so 8 left the median ±4 ms, and wider models inherit twice that
    p.add_argument("--train-steps", type=int, default=16)
    p.add_argument("--train-warmup", type=int, default=3)
    p.add_argument("--fsdp", action="store_true", help="wrap the training model in FSDP")
    p.add_argument("--jobs", default=None, help="jobs phase: JSON list of model configurations")
    p.add_argument("--speed-shape", default=None, help="speed work's GEMM shape T,h")
    p.add_argument("--speed-reps", type=int, default=1, help="jobs phase: units per speed block")
    p.add_argument("--speed-blocks", type=int, default=6, help="jobs phase: speed blocks per job")
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
