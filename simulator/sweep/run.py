"""Running a sweep: points evaluated on a local process pool (default), in this process, or on
Ray; rows written as points finish; a re-run with the same output resumes.

Output: CSV (default), JSON lines (``.jsonl``) or Parquet (``.parquet``, needs pyarrow). While
the sweep runs, each finished point's rows are appended in one write to the output (CSV/JSONL)
or to ``<out>.partial.jsonl`` (Parquet), so an interrupted sweep loses no finished point. A
re-run reads what is there, keeps every complete point (all of its ``point_rows`` present) and
evaluates only the rest. At the end the file is rewritten atomically, sorted by point, so an
interrupted-and-resumed sweep gives the same file as an uninterrupted one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..report.files import write_atomic
from .fingerprint import point_salts
from .plans import evaluate_point
from .rows import (
    Rows,
    append,
    check_output,
    columns,
    complete_points,
    finish,
    is_owner,
    journal,
    keep_until_finished,
    read_all,
    read_rows,
    release_kept,
    replaced_copy,
    replaced_owner,
    run_id,
    sound,
    text,
    unmatched,
)
from .spec import Point, SweepSpec


def _pool(
    args: list[tuple[str, dict[str, Any], Point, list[str], str]], workers: int
) -> Iterator[Rows]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ex = ProcessPoolExecutor(max_workers=max(1, min(workers, len(args))), initializer=_worker_init)
    try:
        futs = [ex.submit(evaluate_point, *a) for a in args]
        for f in as_completed(futs):
            yield f.result()
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or failed: the points not started are cancelled and the
        # workers stopped now, not after the rest of the sweep has been computed; the rows
        # already appended stay.
        for proc in list(getattr(ex, "_processes", {}).values()):
            proc.terminate()
        # With its workers gone the pool's manager thread ends at once; waiting for it means
        # nothing of the pool still runs at interpreter exit, where a wake-up racing its
        # closing pipe printed a traceback (concurrent.futures _python_exit, Python 3.11).
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


def _worker_init() -> None:
    """A pool worker ignores Ctrl-C (the parent stops it), ends at SIGTERM, and gets one when
    its parent dies (Linux), so a killed sweep leaves no worker behind."""
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited by fork
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def reachable(address: str | None) -> None:
    """A HOST:PORT Ray address must accept a connection within seconds: Ray itself retries an
    unreachable one for minutes, printing its own connection errors."""
    import socket

    if not address or address in ("auto", "local") or address.startswith("ray://"):
        return
    if "://" in address:
        raise UserError(
            f"'{address}' is a URL: Ray's --address is the head's HOST:PORT (its GCS port, "
            "6379 by default), or ray://HOST:PORT for Ray Client",
            path="--address",
            hint="e.g. --address 10.0.0.1:6379 (the dashboard's http:// URL does not serve jobs)",
        )
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # let Ray say what it makes of it
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            pass
    except OSError as exc:
        raise UserError(
            f"could not reach the Ray cluster at '{address}': {exc.strerror or exc}",
            path="--address",
            hint="start it (ray start --head) or give its address; leave --address out "
            "for a local Ray",
        ) from None


def _ray_connect(address: str | None) -> Any:
    """Ray, connected to ``address`` (or a local Ray); a UserError where it cannot be."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "the Ray executor needs Ray", hint='pip install "clustersim[ray]"'
        ) from None
    if not ray.is_initialized():
        import signal

        term = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # ConnectionError, ValueError (format), RuntimeError, ...
            raise UserError(
                f"could not reach the Ray cluster at '{address}': "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                path="--address",
                hint="start it (ray start --head) and give HOST:PORT (or ray://HOST:PORT with "
                "ray[client]); leave --address out for a local Ray",
            ) from None
        if term is not None and signal.getsignal(signal.SIGTERM) is not term:
            signal.signal(signal.SIGTERM, term)  # Ray installs its own; ours says what was kept
    return ray


def _ray(
    args: list[tuple[str, dict[str, Any], Point, list[str], str]], address: str | None
) -> Iterator[Rows]:
    ray = _ray_connect(address)
    remote = ray.remote(evaluate_point)
    pending = [remote.remote(*a) for a in args]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


@contextmanager
def _only_writer(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on a file beside ``out`` while this run writes it (the kernel
    drops it when the process ends, however it ends); another run's lock is a refusal."""
    try:
        import fcntl
    except ImportError:  # (no flock: not a POSIX system) nothing to hold
        yield
        return
    lock = out.with_name(f".{out.name[:200]}.lock")  # (``out``: the file a link names)
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(
            f"another clustersim sweep is writing '{out}' now",
            path="--out",
            hint="let it finish (a sweep run again afterwards reuses its points), or give "
            "another --out",
        ) from None
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # (still held: no other run can have taken it)
        os.close(fd)


def run_sweep(
    spec: SweepSpec,
    base: dict[str, Any],
    pts: list[Point],
    out: Path,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    on_point: Callable[[int, int], None] | None = None,
    on_stale: Callable[[int], None] | None = None,
    replace: bool = True,
) -> Rows:
    """Evaluate every point not already in ``out``; return all rows (sorted) and write them.
    A finished point is reused only if it came from the same base scenario, sweep settings and
    profiles (its key covers them), renumbered and relabelled as the spec now has it;
    ``on_stale`` is told how many rows of ``out`` match no point of this run (they are
    dropped; without ``replace`` the run refuses instead, writing nothing). One sweep at a
    time writes ``out``: a second is refused while the first runs."""
    if out.is_symlink():  # its journal, kept copies and final file go beside the file it names
        out = Path(os.path.realpath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    with _only_writer(out):
        cols = columns(spec)
        pts = [
            p.model_copy(update={"salt": salt})
            for p, salt in zip(pts, point_salts(spec, base, pts), strict=True)
        ]
        read = read_all(out)
        have = complete_points([r for r in read if sound(r, cols)])
        keys = {p.key for p in pts}
        # every row read that stands for no point of this run, sound or not (a deleted
        # column, another program's rows): dropping it is the user's call
        stale = unmatched(read, keys)
        if stale and not replace:
            raise UserError(
                f"{stale} of the {len(read)} row(s) in '{out}' match no point of this run (another "
                "spec or base scenario, other sweep settings, a profile it names changed, "
                "clustersim's code changed, or the file was damaged): the run would drop them",
                path="--out",
                hint="give another --out to keep them, or --replace to drop them",
            )
        this_run = run_id(keys)
        # This run, interrupted after it kept the file as it was: its copy already holds those
        # rows (the output now may hold some of this run's too), so it is neither refused nor
        # copied again.
        resumed = is_owner(out, this_run)
        if stale and not resumed:
            for kept in [*(replaced_copy(f) for f in dict.fromkeys((out, journal(out)))),
                         replaced_owner(out)]:  # fmt: skip
                if kept.exists() or kept.is_symlink():
                    # An earlier --replace run that did not finish (or a file of the user's)
                    # already holds that name: copying over it, or dropping these rows beside
                    # it, would lose one of the two.
                    raise UserError(
                        f"'{kept}' already exists (the file an earlier --replace run kept and did "
                        f"not finish with, or another file), and this run would drop {stale} "
                        f"row(s) of '{out}' too",
                        path="--out",
                        hint=f"move '{kept}' away (or delete it) and run again, or give "
                        "another --out",
                    )
        if stale and on_stale:
            on_stale(stale)
        # --replace drops those rows only once this run has finished: until then the file as it
        # was stays beside the new one (an interrupted run loses nothing of it), marked as this
        # run's, so that only this run, or this run resumed, removes it.
        if stale and not resumed:
            keep_until_finished(out, this_run)
        rows: Rows = []
        for p in pts:
            for r in have.get(p.key, []):
                # The same point under the spec as it is now: its number and axis labels (an axis
                # added, dropped or renamed since the rows were written).
                r = {k: v for k, v in r.items() if not k.startswith("axis_")}
                r.update(point=p.index, **{f"axis_{k}": v for k, v in p.labels.items()})
                rows.append(r)
        todo = [p for p in pts if p.key not in have]
        # The journal holds exactly the complete points kept, before new ones are appended.
        if executor == "ray":
            # before the output is touched: Ray retries an unreachable HOST:PORT for minutes, and
            # a run that cannot connect leaves no file behind
            reachable(address)
            _ray_connect(address)
        j = journal(out)
        write_atomic(j, text(j, cols, rows))
        auto = spec.auto()
        args: list[tuple[str, dict[str, Any], Point, list[str], str]] = [
            (spec.name, base, p, auto, str(spec.keep)) for p in todo
        ]
        if executor == "serial" or (executor == "local" and (workers == 1 or len(args) <= 1)):
            results: Iterator[Rows] = (evaluate_point(*a) for a in args)
        elif executor == "ray":
            results = _ray(args, address)
        else:
            results = _pool(args, workers or os.cpu_count() or 1)
        done = len(pts) - len(todo)
        if on_point:
            on_point(done, len(pts))
        for point_rows in results:
            append(out, cols, point_rows)
            rows += point_rows
            done += 1
            if on_point:
                on_point(done, len(pts))
        final = finish(out, cols, rows)
        # (also the copy this run left when it was interrupted: its replacement is now complete;
        # never a copy another run kept, nor a file of the user's of that name)
        release_kept(out, this_run)
        return final


__all__ = [
    "check_output",
    "columns",
    "complete_points",
    "finish",
    "read_rows",
    "replaced_copy",
    "run_sweep",
]
