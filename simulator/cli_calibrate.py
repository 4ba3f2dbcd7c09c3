"""`clustersim probe`, `calibrate` and `validate`: measuring this machine, fitting calibrated
profiles, and checking predictions against live runs."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli_common import Fmt, _csv_rows, _json, _kept, app, err, out
from .cli_probe_options import _check_procs, check_timeout, probe_args
from .errors import UserError
from .report.text import safe

# A probe that overruns its --time-budget by more than this says so.
BUDGET_SLACK = 1.1


def _need_torch(command: str) -> None:
    """Refuse, with what to install, a command that runs the probe where torch is missing
    (its ranks would each die importing it)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UserError(
            f"'clustersim {command}' needs torch, which is not installed (the probe's ranks "
            "run on torch.distributed)",
            hint='pip install "clustersim[probe]" (torch; a CPU build is enough for gloo)',
        )


@app.command()
def probe(
    out_file: Annotated[str, typer.Option("--out", help="probe JSON to write")] = "runs/probe.json",
    nproc: Annotated[int, typer.Option(help="processes to launch on this machine")] = 2,
    max_bytes: Annotated[int, typer.Option(help="largest collective message, bytes")] = 64 * 2**20,
    time_budget: Annotated[float, typer.Option(help="seconds for the measurements")] = 60.0,
    timeout: Annotated[
        float, typer.Option(help="seconds before a dead or hung rank stops the probe")
    ] = 60.0,
    storage_path: Annotated[str | None, typer.Option(help="folder for the storage test")] = None,
    threads: Annotated[int, typer.Option(help="threads per process (0: cores // nproc)")] = 0,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="train with FSDP instead of DDP")] = False,
    fail_rank: Annotated[int | None, typer.Option(hidden=True)] = None,
    fail_phase: Annotated[str | None, typer.Option(hidden=True)] = None,
    fail_mode: Annotated[str, typer.Option(hidden=True)] = "exit",
) -> None:
    """Measure this machine with torch.distributed: collectives, compute, memory, storage and a
    small training step. Writes one JSON file as it goes."""

    from calibrate.launch import ProbeFailed, launch

    _need_torch("probe")
    args = probe_args(
        nproc, max_bytes, time_budget, timeout, storage_path, threads, fsdp,
        fail_rank, fail_phase, fail_mode,
    )  # fmt: skip
    from calibrate.probe_base import is_complete_probe, is_probe_file, partial_path

    from .report.files import output_path, refuse_foreign

    output_path(out_file, "--out")
    # A complete probe already there stays until this one completes; meanwhile it goes beside.
    pending = partial_path(Path(out_file)) if is_complete_probe(Path(out_file)) else None
    for target in (Path(out_file), pending):
        if target is not None:
            refuse_foreign(
                target,
                is_probe_file,
                "--out",
                "a probe file",
                "probe",
                "give the probe its own file (e.g. --out runs/probe.json), or move that file away",
            )
    kept = str(pending) if pending else out_file
    if storage_path:
        if not Path(storage_path).is_dir():
            # a mistyped mount point would be created and the root disk measured in its place
            raise UserError(
                f"--storage-path {storage_path} is not an existing folder",
                path="--storage-path",
                hint="give a folder on the storage to measure (e.g. a scratch folder on the "
                "parallel file system), or leave it out for the output's folder",
            )
        output_path(Path(storage_path) / "probe-file", "--storage-path")
    err.print(f"probe: {nproc} process(es), budget {time_budget:g} s, writing {safe(out_file)}")
    _kept[0] = f"the measurements finished so far are kept in {kept} (complete: false)" + (
        f"; the complete probe in {out_file} is unchanged" if pending else ""
    )
    from calibrate.probe import PHASES

    from .report.progress import progress_bar

    try:
        with progress_bar(err, "probe", len(PHASES)) as update:

            def on_beats(beats: dict[int, dict]) -> None:
                if not beats:
                    return
                slowest = min(
                    beats.values(),
                    key=lambda b: PHASES.index(b["phase"]) if b.get("phase") in PHASES else 99,
                )
                phase = slowest.get("phase", "")
                done = PHASES.index(phase) if phase in PHASES else len(PHASES)
                update(done, safe(f"probe: {phase} {slowest.get('detail', '')}".strip()))

            res = launch(Path(out_file), nproc, 1, args, timeout=timeout, on_beats=on_beats)
    except ProbeFailed as exc:
        err.print(
            f"[red]probe failed:[/red] {safe(str(exc))}\n"
            f"  measurements completed before are kept in {safe(kept)} (complete: false)"
            + (f"; the complete probe in {safe(out_file)} is unchanged" if pending else ""),
            highlight=False,
        )
        sys.exit(3)  # (typer.Exit codes are swallowed by main()'s non-standalone mode)
    d = json.loads(Path(out_file).read_text())
    for note in d.get("notes", []):
        err.print(f"note: {safe(note)}", highlight=False)
    if res.seconds > BUDGET_SLACK * time_budget:
        err.print(
            f"note: the probe ran {res.seconds:.0f} s against --time-budget {time_budget:g} s: "
            "its phases shrink with the budget down to one short run of each timing, which "
            f"takes that long here; give --time-budget {math.ceil(res.seconds)} or more",
            highlight=False,
        )
    tr = d.get("train") or {}
    out.print(
        f"probe written to {safe(out_file)} in {res.seconds:.0f} s: "
        f"{len(d.get('collectives', []))} collective timings, "
        f"{len(d.get('matmul', []))} matmuls, training step "
        f"{tr.get('step_time_median_s', float('nan')) * 1e3:.0f} ms (median, "
        f"{tr.get('params', 0) / 1e6:.2f} M params, world size {d.get('world_size')})"
    )


@app.command()
def calibrate(
    probe_file: Annotated[str, typer.Argument(help="probe JSON from `clustersim probe`")],
    name: Annotated[str, typer.Option(help="name of the calibrated GPU profile")],
    out_dir: Annotated[str, typer.Option(help="where the profiles go")] = (
        "hardware_profiles/calibrated"
    ),
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Fit a probe file into calibrated hardware profiles (GPU, fabric, network, storage)."""

    from calibrate.fit import calibrate as fit
    from calibrate.fit import check_name, in_sample, load_probe, write
    from calibrate.output import check_free

    check_name(name)
    check_free(name, out_dir)
    data = load_probe(probe_file)
    if data.get("complete") is not True:
        # every section the fits need is there (load_probe), but the probe stopped before its
        # end: what it did not reach is fitted from less, or left out
        fault = data.get("error")
        stop = fault.get("message") if isinstance(fault, dict) else None
        err.print(
            "warning: the probe did not complete"
            + (f" ({safe(str(stop))})" if stop else "")
            + ": the profiles are fitted from the phases it finished; re-run `clustersim "
            "probe` to completion for the rest",
            highlight=False,
        )
    try:
        cal = fit(data, probe_file, name)
    except UserError as exc:
        if exc.file is not None:
            raise
        # The fits build profiles and a scenario from the probe's figures: one out of range
        # there is a figure of the probe file (hand-edited, or a machine no profile describes).
        raise UserError(
            f"the probe file's figures give a model that cannot be built ({exc.path}: "
            f"{exc.message})"
            if exc.path
            else f"the probe file's figures give a model that cannot be built ({exc.message})",
            file=probe_file,
            hint="re-run `clustersim probe`; a probe file is not meant to be edited",
        ) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        # load_probe checks the shape the fits read; a file that passes and still cannot be
        # fitted is inconsistent in a way it does not name (e.g. hand-edited figures).
        raise UserError(
            f"the probe file could not be fitted ({type(exc).__name__}: {exc}); it looks "
            "damaged or edited",
            file=probe_file,
            hint="re-run `clustersim probe`; if a fresh probe fails the same way, report it "
            "with the probe file",
        ) from None
    from .report.files import output_path

    output_path(out_dir, "--out-dir", folder=True)
    record = Path(out_dir) / f"{name}.calibration.json"
    replaced = record.is_file()  # an earlier calibration under this name (check_free allowed it)
    files = write(cal, out_dir, probe_file)
    hint = _searchable(out_dir)
    check, why = in_sample(name, cal.sidecar)
    if why:
        err.print(f"warning: the in-sample check could not run: {safe(why)}", highlight=False)
    from .report.calibration import contention_warning

    busy = contention_warning(cal.sidecar)
    if busy:
        err.print(f"warning: {safe(busy)}")
    if fmt == Fmt.json:
        _json(
            {
                "profiles": [str(f) for f in files],
                "removed": [str(f) for f in cal.removed],
                "fits": [f.as_dict() for f in cal.fits],
                "compute_fit": cal.sidecar["compute_fit"],
                "in_sample": check,
                "profile_path_hint": hint,
            }
        )
        return
    if fmt == Fmt.csv:
        keys = ["op", "group", "group_size", "alpha_us", "bandwidth_gbps", "r2", "rms_rel_err"]
        keys += ["points", "note"]
        _csv_rows(keys, [f.as_dict() for f in cal.fits])
        return
    from .report.calibration import print_calibration

    print_calibration(out, cal, probe_file, check, files, replaced, hint)


def _searchable(out_dir: str) -> str | None:
    """Profiles written outside the folders clustersim searches (the bundled profiles,
    ./hardware_profiles, $CLUSTERSIM_PROFILE_PATH) are found for the rest of this command (its
    in-sample check) by adding the folder to the search path; returns how to use them later."""

    from .catalog import profile_dirs

    target = Path(out_dir).resolve()

    def searched(d: Path) -> bool:  # (two levels down: catalog.profile_files)
        return target == d or (d in target.parents and len(target.relative_to(d).parts) <= 2)

    if any(searched(d) for d in profile_dirs()):
        return None
    old = os.environ.get("CLUSTERSIM_PROFILE_PATH", "")
    os.environ["CLUSTERSIM_PROFILE_PATH"] = os.pathsep.join(p for p in (str(target), old) if p)
    return (
        f"{target} is not a folder clustersim searches for profiles: set "
        f"CLUSTERSIM_PROFILE_PATH={target} (or write under ./hardware_profiles) before "
        "simulate or validate name these profiles"
    )


@app.command()
def validate(
    profile: Annotated[str, typer.Option(help="calibrated GPU profile name")],
    nproc: Annotated[str, typer.Option(help="processes per node, comma list")] = "1,2",
    nodes: Annotated[str, typer.Option(help="'nodes' (process groups on this host)")] = "1",
    steps: Annotated[int, typer.Option(help="timed training steps per run")] = 8,
    repeats: Annotated[
        int, typer.Option(help="runs per layout, interleaved across layouts (median of all)")
    ] = 3,
    workloads: Annotated[
        str,
        typer.Option(
            help="comma list of workloads (default: all): probe-job (in-sample), wide, "
            "long-seq, narrow-deep, comm-heavy"
        ),
    ] = "",
    timeout: Annotated[float, typer.Option(help="seconds before a stuck run is stopped")] = 120.0,
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Run the probe's job and workloads calibration never saw, live, and compare their step
    times with the drift-corrected predictions."""
    from calibrate.validate import validate as run_validate

    _need_torch("validate")

    def ints(text: str, opt: str) -> list[int]:
        try:
            out = [int(x) for x in text.split(",")]
        except ValueError:
            out = []
        if not out:
            raise UserError(
                f"{opt} '{text}' is not a comma list of integers", path=opt, hint=f"e.g. {opt} 1,2"
            )
        if min(out) < 1:
            raise UserError(
                f"{opt} {text}: every count must be at least 1", path=opt, hint=f"e.g. {opt} 1,2"
            )
        return out

    for opt, n, most in (("--steps", steps, 1000), ("--repeats", repeats, 100)):
        if not 1 <= n <= most:
            raise UserError(
                f"{opt} must be from 1 to {most} (got {n})", path=opt, hint=f"e.g. {opt} 3"
            )

    check_timeout(timeout, "e.g. --timeout 120")
    if workloads.strip() and not [w for w in workloads.split(",") if w.strip()]:
        raise UserError(
            f"--workloads '{workloads}' names no workload",
            path="--workloads",
            hint="a comma list such as --workloads wide,long-seq, or leave it out for all",
        )

    nprocs, node_counts = ints(nproc, "--nproc"), ints(nodes, "--nodes")
    _check_procs(
        max(nprocs) * max(node_counts), "--nodes" if max(node_counts) > max(nprocs) else "--nproc"
    )
    from .report.progress import progress_bar

    with progress_bar(err, "validate: live runs", 1) as update:
        rep = run_validate(
            profile,
            nprocs,
            node_counts,
            steps,
            timeout,
            log=lambda m: err.print(m, highlight=False),
            repeats=repeats,
            progress=lambda done, total: update(
                done, f"validate: run {done + 1} of {total}", total
            ),
            workload_names=[w.strip() for w in workloads.split(",") if w.strip()] or None,
        )
    if fmt == Fmt.json:
        _json(rep)
        return
    if fmt == Fmt.csv:
        from .report.validation import validation_csv_rows

        _csv_rows(*validation_csv_rows(rep))
        return
    from .report.validation import print_validation

    print_validation(out, rep)
