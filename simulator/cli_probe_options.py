"""The probe command's options, checked before anything is launched (one message and exit 2
for a bad one), and turned into the probe processes' arguments."""

from __future__ import annotations

import math
import os

from .errors import UserError

MAX_PROBE_BYTES = 1 << 34
# The longest --timeout taken: a day. torch.distributed keeps its timeouts in milliseconds in a
# C int (about 24.8 days), and a longer wait than a day is a typo, not a plan.
MAX_TIMEOUT_S = 86_400.0


def check_timeout(timeout: float, hint: str) -> None:
    """Refuse a --timeout that is not a positive number of seconds up to a day."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise UserError(
            f"--timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:,.0f} "
            f"(a day) (got {timeout:g})",
            path="--timeout",
            hint=hint,
        )


def probe_args(
    nproc: int,
    max_bytes: int,
    time_budget: float,
    timeout: float,
    storage_path: str | None,
    threads: int,
    fsdp: bool,
    fail_rank: int | None,
    fail_phase: str | None,
    fail_mode: str,
) -> list[str]:
    """The probe processes' arguments for these options; a UserError for a bad one."""
    if nproc < 1:
        raise UserError("--nproc must be at least 1", path="--nproc", hint="e.g. --nproc 2")
    _check_procs(nproc, "--nproc")
    check_timeout(
        timeout, "seconds without progress before a rank counts as hung, e.g. --timeout 60"
    )
    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise UserError(
            f"--threads must be 0 (cores // nproc) up to this machine's {cores} cores "
            f"(got {threads}): more threads than cores only slow each process down",
            path="--threads",
            hint="e.g. --threads 1, or leave it out",
        )
    if not 4096 <= max_bytes <= MAX_PROBE_BYTES:
        raise UserError(
            f"--max-bytes must be from 4096 bytes (two message sizes) to {MAX_PROBE_BYTES:,} "
            f"(16 GiB, nccl-tests' largest) (got {max_bytes})",
            path="--max-bytes",
            hint="the largest collective message timed, e.g. --max-bytes 67108864",
        )
    if not (math.isfinite(time_budget) and time_budget > 0):
        raise UserError(
            f"the time budget must be a positive number of seconds (got {time_budget:g})",
            path="--time-budget",
            hint="the whole probe's budget, e.g. --time-budget 60",
        )
    import time

    # the budget counts from now: the processes' start-up (importing torch) is part of it
    args = ["--max-bytes", str(max_bytes), "--time-budget", str(time_budget)]
    args += ["--started-at", repr(time.time())]
    if storage_path:
        if not os.path.isdir(storage_path):
            raise UserError(
                f"'{storage_path}' is not a folder"
                + (" (it is a file)" if os.path.exists(storage_path) else " (it does not exist)"),
                path="--storage-path",
                hint="give the folder (on the storage to measure) the test file is written in",
            )
        args += ["--storage-path", storage_path]
    if threads:
        args += ["--threads", str(threads)]
    if fsdp:
        import torch

        if not torch.cuda.is_available():
            # (torch 2.13 on CPU: "FSDP needs a non-CPU accelerator device")
            raise UserError(
                "--fsdp needs GPUs: PyTorch's FullyShardedDataParallel refuses a CPU device",
                path="--fsdp",
                hint="leave --fsdp out on this machine (the training step then uses DDP)",
            )
        args.append("--fsdp")
    if fail_rank is not None and fail_phase:
        args += [
            "--fail-rank",
            str(fail_rank),
            "--fail-phase",
            fail_phase,
            "--fail-mode",
            fail_mode,
        ]
    return args


def _check_procs(n: int, opt: str) -> None:
    """Refuse more local processes than the machine can time: every one runs measurements of
    its own, and beyond a few per core they would time only their contention."""

    cores = os.cpu_count() or 1
    cap = max(8, 2 * cores)
    if n > cap:
        raise UserError(
            f"{n} processes on this machine of {cores} cores: beyond {cap} the probe would "
            "time only their contention",
            path=opt,
            hint=f"at most {cap}: one process per GPU (on a CPU machine, per core or two)",
        )
