"""Launch local probe processes and watch them.

Starts ``nodes × nproc`` processes of ``python -m calibrate.probe`` on this machine with the
environment torchrun would give them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT); "nodes" here are groups of processes
that the probe treats as separate nodes (its intra/inter-node groups follow LOCAL_WORLD_SIZE).

If a process exits non-zero, or no process makes progress (heartbeat files) for ``timeout``
seconds, the others are stopped and a :class:`ProbeFailed` names the rank and phase.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .probe import FORMAT, HEAP_KEEPING_ENV, VERSION, atomic_write_json, heartbeat_dir


class ProbeFailed(Exception):
    def __init__(self, message: str, rank: int | None, phase: str | None) -> None:
        super().__init__(message)
        self.rank = rank
        self.phase = phase


@dataclass
class LaunchResult:
    out: Path
    seconds: float


def _die_with_parent(launcher: int) -> Callable[[], None]:
    """For a worker, run before it starts: SIGTERM when the launcher dies (Linux), so that a
    killed or hung-up probe leaves no worker measuring on (and loading the machine) behind
    it; a launcher already gone by then ends the worker at once."""

    def arm() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            except OSError:
                return
            if os.getppid() != launcher:
                os._exit(1)

    return arm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _beats(hb: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for f in hb.glob("rank*.json"):
        try:
            d = json.loads(f.read_text())
            out[int(d["rank"])] = d
        except (OSError, ValueError, KeyError):
            continue
    return out


def _failure(beats: dict[int, dict], rank: int, what: str, err: Path | None = None) -> ProbeFailed:
    """A ProbeFailed naming the phase (and detail) rank last reported in its heartbeat, and
    the last line the rank wrote to its error output (the exception that stopped it)."""
    phase = beats.get(rank, {}).get("phase", "start-up")
    detail = beats.get(rank, {}).get("detail", "")
    last = _last_error_line(err) if err is not None else ""
    return ProbeFailed(
        f"{what} in phase '{phase}'"
        + (f" ({detail})" if detail else "")
        + (f"; its last error: {last}" if last else ""),
        rank,
        phase,
    )


def _last_error_line(path: Path) -> str:
    """The last non-blank line of a rank's error output (at most 300 characters)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    lines = [ln.strip() for ln in lines if ln.strip()]
    return lines[-1][:300] if lines else ""


def launch(
    out: Path,
    nproc: int,
    nodes: int = 1,
    args: list[str] | None = None,
    timeout: float = 60.0,
    log=None,
    on_beats: Callable[[dict[int, dict]], None] | None = None,
) -> LaunchResult:
    """Run the probe on ``nodes × nproc`` local processes; raise ProbeFailed on a fault."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    hb = heartbeat_dir(out)
    shutil.rmtree(hb, ignore_errors=True)
    hb.mkdir(parents=True)
    world = nproc * nodes
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "calibrate.probe",
        "--out",
        str(out),
        "--timeout",
        str(timeout),
        *(args or []),
    ]
    procs: dict[int, subprocess.Popen] = {}
    errs: dict[int, Any] = {}
    t_start = time.monotonic()
    root = str(Path(__file__).resolve().parent.parent)
    last_progress = time.monotonic()
    last_sig: tuple = ()
    failure: ProbeFailed | None = None
    try:
        # Started inside the try: an interrupt between two starts still stops the first.
        for rank in range(world):
            env = dict(
                {**HEAP_KEEPING_ENV, **os.environ},
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank % nproc),
                LOCAL_WORLD_SIZE=str(nproc),
                GROUP_RANK=str(rank // nproc),
                NODE_RANK=str(rank // nproc),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
            )
            # each rank's error output to a file (a pipe nobody reads blocks a rank that
            # writes much), read back for the cause where the rank fails
            if log is None:
                errs[rank] = open(hb / f"rank{rank}.err", "wb")  # noqa: SIM115
            procs[rank] = subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=errs[rank] if log is None else log,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        while True:
            codes = {r: p.poll() for r, p in procs.items()}
            beats = _beats(hb)
            if on_beats is not None:
                on_beats(beats)
            bad = {r: c for r, c in codes.items() if c not in (None, 0)}
            if bad:
                r = min(bad)
                failure = _failure(
                    beats, r, f"rank {r} died (exit code {bad[r]})", hb / f"rank{r}.err"
                )
                break
            if all(c == 0 for c in codes.values()):
                break
            sig = tuple(sorted((r, b.get("progress")) for r, b in beats.items()))
            now = time.monotonic()
            if sig != last_sig:
                last_sig, last_progress = sig, now
            elif now - last_progress > timeout:
                # The rank furthest behind is the one the others wait for.
                running = [r for r, c in codes.items() if c is None]
                r = min(
                    running,
                    key=lambda q: (
                        beats.get(q, {}).get("time", 0),
                        beats.get(q, {}).get("progress", 0),
                    ),
                )
                what = f"no progress for {timeout:g} s: rank {r} hung"
                if r not in beats:  # never reported: still starting (importing torch)
                    what = (
                        f"rank {r} had not started after --timeout {timeout:g} s (a rank "
                        "takes several seconds to import torch and join: give a longer "
                        "--timeout)"
                    )
                failure = _failure(beats, r, what, hb / f"rank{r}.err")
                break
            time.sleep(0.1)
    finally:
        # A second Ctrl-C or SIGTERM must not cut the clean-up short: held until it is done.
        held = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
        for p in procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for fh in errs.values():
            fh.close()
        shutil.rmtree(hb, ignore_errors=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    if failure is not None:
        _mark_failed(out, str(failure), failure.rank, failure.phase, world, nodes)
        raise failure
    return LaunchResult(out, time.monotonic() - t_start)


def _mark_failed(
    out: Path, message: str, rank: int | None, phase: str | None, world: int, nodes: int
) -> None:
    """Keep what rank 0 wrote (valid JSON, written atomically) and record the fault; a complete
    probe already at ``out`` stays, and the unfinished one is beside it."""
    from .probe_base import is_complete_probe, partial_path

    if is_complete_probe(out):
        out = partial_path(out)
    data: dict = {}
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        data = {
            "format": FORMAT,
            "version": VERSION,
            "world_size": world,
            "nodes": nodes,
            "host": socket.gethostname(),
            "phases_done": [],
        }
    data["complete"] = False
    data["error"] = {"message": message, "rank": rank, "phase": phase}
    atomic_write_json(out, data)
