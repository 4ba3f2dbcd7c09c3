"""Command-line interface (typer). Thin: parse, call, print.

Results go to stdout; errors a user can fix print one message to stderr and exit 2. The
probe/calibrate/validate commands live in :mod:`simulator.cli_calibrate`, `profiles` in
:mod:`simulator.cli_profiles`; the shared apps and consoles in :mod:`simulator.cli_common`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .cli_common import (
    Fmt,
    _csv,
    _json,
    _kept,
    app,
    err,
    os_error_text,
    out,
    simulate_csv_row,
)
from .errors import UserError
from .report.text import safe


@app.command()
def check(
    scenario: Annotated[str, typer.Argument(help="scenario YAML (path or bundled name)")],
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
    set_: Annotated[list[str] | None, typer.Option("--set", help="PATH=VALUE override")] = None,
) -> None:
    """Validate a scenario: does it fit in memory? Prints the per-GPU memory table; exits 1
    when the plan does not fit."""
    from .check import check as run_check
    from .config.loading import load_scenario
    from .scenario_paths import find_scenario

    rs = load_scenario(find_scenario(scenario), set_ or [])
    rep = run_check(rs)
    from .catalog import replacement_notes

    for note in [*rs.override_notes, *replacement_notes(rs.profile_names()), *rs.model_notes()]:
        err.print(f"note: {safe(note)}")
    if fmt == Fmt.json:
        _json(rep.as_dict())
    elif fmt == Fmt.csv:
        flat = rep.as_row()
        _csv(flat)
    else:
        from .report.tables import print_check

        print_check(rep, out)
    if not rep.fits:
        raise typer.Exit(1)  # as a gate in scripts: 0 fits, 1 does not, 2 bad input


@app.command()
def simulate(
    scenario: Annotated[str, typer.Argument(help="scenario YAML (path or bundled name)")],
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
    set_: Annotated[list[str] | None, typer.Option("--set", help="PATH=VALUE override")] = None,
    trace: Annotated[str | None, typer.Option(help="write a Chrome trace (Perfetto) here")] = None,
    full: Annotated[bool, typer.Option("--full", help="simulate every rank")] = False,
    scaling: Annotated[bool, typer.Option(help="also simulate the scaling reference")] = True,
) -> None:
    """Simulate one training step: time, throughput, MFU, idle breakdown, cost."""
    from .config.loading import load_scenario
    from .report.files import output_path
    from .report.trace import check_trace_target, write_trace
    from .scenario_paths import find_scenario
    from .simulate import simulate as run_sim

    source = find_scenario(scenario)
    rs = load_scenario(source, set_ or [])
    if trace is not None:  # checked once the scenario is known good, before simulating
        if Path(trace).resolve() == Path(source).resolve():
            raise UserError(
                "--trace names the scenario file itself; the trace would replace it",
                path="--trace",
                hint="give the trace its own file, e.g. --trace step.trace.json",
            )
        if trace.strip() == "-":
            raise UserError(
                "--trace - would write a file named '-'; the trace goes to a file",
                path="--trace",
                hint="give a file name, e.g. --trace step.trace.json",
            )
        output_path(trace, "--trace")
        check_trace_target(trace)
    if full:
        with err.status(f"simulating all {rs.gpus} ranks (full mode)…"):
            res = run_sim(rs, full=full, trace=trace is not None, scaling=scaling)
    else:
        res = run_sim(rs, full=full, trace=trace is not None, scaling=scaling)
    d = res.as_dict()
    if trace is not None:
        write_trace(
            trace,
            res.engine.trace or [],
            {"scenario": rs.name, "mode": d["mode"], "step_time_s": d["step_time_s"]},
        )
        size = os.path.getsize(trace)
        err.print(
            f"trace written to {safe(trace)} ({len(res.engine.trace or []):,} events, "
            + (f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB")
            + "; open in ui.perfetto.dev)"
        )
        if size > 500e6:
            err.print(
                "note: a JSON trace this large may not open in the browser UI (it holds the "
                "whole file in memory); drop --full (symmetric mode draws one rank per stage) "
                "or use fewer micro-batches"
            )
    if fmt == Fmt.json:
        _json(d)
    elif fmt == Fmt.csv:
        # a CSV row has no place for notes (a replaced profile, a unit slip): they go to
        # stderr, as check's do
        for note in d.get("notes") or []:
            err.print(f"note: {safe(note)}")
        _csv(simulate_csv_row(d))
    else:
        from .report.tables import print_simulation

        print_simulation(d, out)


# Registered here so that `--help` lists them after check and simulate.
from . import cli_calibrate, cli_compare, cli_profiles, cli_sweep  # noqa: E402, F401


@app.command()
def schema(
    sweep: Annotated[bool, typer.Option("--sweep", help="the sweep spec's schema instead")] = False,
    profile: Annotated[
        str | None,
        typer.Option(help="a profile kind's schema instead (gpu, fabric, network, storage, ...)"),
    ] = None,
) -> None:
    """JSON Schema of the scenario file, of a sweep spec, or of a hardware/software profile
    (every figure's description gives its value range)."""
    if sweep and profile is not None:
        raise UserError(
            "--sweep and --profile each ask for a different schema",
            path="--profile",
            hint="give one of them",
        )
    if profile is not None:
        from .config.profiles import PROFILE_KINDS

        if profile not in PROFILE_KINDS:
            raise UserError(
                f"no profile kind '{profile}'"
                + (": price profiles are of two kinds, each its schema" * (profile == "price")),
                path="--profile",
                hint=f"kinds: {', '.join(PROFILE_KINDS)}",
            )
        s = PROFILE_KINDS[profile].model_json_schema()
        s["title"] = f"clustersim {profile} profile"
    elif sweep:
        from .sweep.spec import SweepSpec

        s = SweepSpec.model_json_schema()
        s["title"] = "clustersim sweep spec"
    else:
        from .config.scenario import Scenario

        s = Scenario.model_json_schema()
        s["title"] = "clustersim scenario"
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    _json(s)


def threading_main() -> bool:
    """Whether this is the main thread (only it may set signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that cleanup runs (a probe's or a live run's
    rank processes are stopped, temporary folders removed) as it does for Ctrl-C."""


_terminated = [False]


def _on_sigterm(_signum: int, _frame: Any) -> None:
    _terminated[0] = True
    raise _Terminated


def _reader_closed(self: Any) -> None:
    """rich's answer to a closed pipe (`clustersim ... | head`), as success: the reader has
    what it wanted (rich's own exits 1, which fails `set -o pipefail` scripts)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(0)


def main() -> None:
    """Console-script entry point: user errors exit 2 with one message, no traceback."""
    import signal

    import rich.console

    rich.console.Console.on_broken_pipe = _reader_closed  # type: ignore[method-assign]

    if not threading_main():
        _main()
        return
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _main()
    finally:
        signal.signal(signal.SIGTERM, old)


INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE (sysexits.h)


def _main() -> None:
    try:
        from .catalog import check_profile_path

        for note in check_profile_path():
            err.print(f"note: {safe(note)}", highlight=False)
        rc = app(standalone_mode=False)
        if rc == 130:  # click turns Ctrl-C into this return value outside standalone mode
            raise _Terminated if _terminated[0] else KeyboardInterrupt
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:
        err.print(f"[red]error:[/red] {safe(exc.render())}", highlight=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        # typer's own broken-pipe handling (`clustersim ... | head`) exits 1 after wrapping
        # stdout: the reader has what it wanted, which is success, as below.
        if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(0)
        raise
    except (typer.Abort, KeyboardInterrupt) as exc:
        err.print(f"interrupted: {safe(_kept[0])}", highlight=False)
        sys.exit(143 if isinstance(exc, _Terminated) or _terminated[0] else 130)
    except BrokenPipeError:  # `clustersim ... | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except OSError as exc:  # the file system refused something a check did not foresee
        what, hint = os_error_text(exc)
        err.print(f"[red]error:[/red] {safe(what)}\n  what to do: {safe(hint)}", highlight=False)
        sys.exit(2)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # Recent typer vendors click (typer._click), so match ClickException by name, not by
        # `click.ClickException`, which is another class there.
        if any(c.__name__ == "ClickException" for c in type(exc).__mro__):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        # A bug, not an answer: its own exit code, so that a script gating on `check` (1: does
        # not fit) or `sweep --best` (1: nothing meets the constraints) cannot take it for one.
        import traceback

        traceback.print_exc()
        err.print(
            f"internal error: {safe(type(exc).__name__)} (a bug in clustersim; please report it "
            "with the command and the trace above)",
            highlight=False,
        )
        sys.exit(INTERNAL_ERROR_EXIT)


if __name__ == "__main__":
    main()
