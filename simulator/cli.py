"""Command-line interface (typer). Thin: parse, call, print.

Results go to stdout; errors a user can fix print one message to stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

from .errors import UserError
from .report.text import safe

app = typer.Typer(
    name="clustersim",
    help="Capacity planner for multi-GPU training clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="The hardware catalogue.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")

out = Console(soft_wrap=False)
err = Console(stderr=True, soft_wrap=True)


class Fmt(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _key_figures(p: Any) -> str:
    kind = p.kind
    if kind == "gpu":
        bf = p.peak_tflops.get("bf16") or p.peak_tflops.get("fp16")
        return f"{p.memory_gb.value:g} GB, {p.memory_bandwidth_gbps.value:g} GB/s, " + (
            f"{bf.value:g} TFLOP/s bf16" if bf else ""
        )
    if kind == "fabric":
        return f"{p.bandwidth_gbps.value:g} GB/s per GPU, {p.latency_us.value:g} us"
    if kind == "network":
        return f"{p.port_gbps.value:g} Gb/s per port, {p.latency_us.value:g} us"
    if kind == "storage":
        return f"read {p.read_gbps_per_client.value:g} GB/s per node"
    if kind == "cloud_price":
        return f"${p.on_demand_usd_per_gpu_hour.value:.2f}/GPU-h on demand ({p.as_of})"
    if kind == "ownership_price":
        return f"${p.capex_per_node_usd.value:,.0f} per node, {p.amortisation_years.value:g} y"
    if kind == "software":
        return f"{p.framework}; flash kernel {p.flash_kernel}"
    return ""


@profiles_app.command("list")
def profiles_list(
    kind: Annotated[str | None, typer.Option(help="only this kind (gpu, fabric, ...)")] = None,
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Every GPU, fabric, network, storage and price profile."""
    from .catalog import load_catalog
    from .report.tables import profiles_table

    cat = load_catalog()
    if cat.broken:  # listing the catalogue is the command that reports a broken profile file
        raise next(iter(cat.broken.values()))
    order = ["gpu", "fabric", "network", "storage", "cloud_price", "ownership_price", "software"]
    items = sorted(cat.profiles.values(), key=lambda p: (order.index(p.kind), p.name))  # type: ignore[attr-defined]
    if kind:
        items = [p for p in items if p.kind == kind]  # type: ignore[attr-defined]
        if not items:
            raise UserError(f"no profiles of kind '{kind}'", hint=f"kinds: {', '.join(order)}")
    if fmt == Fmt.json:
        _json(
            [
                {
                    "kind": p.kind,  # type: ignore[attr-defined]
                    "name": p.name,
                    "display_name": p.display_name,
                    "file": str(cat.files[p.name]),
                }
                for p in items
            ]
        )
        return
    rows = [(p.kind, p.name, p.display_name, _key_figures(p)) for p in items]  # type: ignore[attr-defined]
    out.print(profiles_table(rows))


@profiles_app.command("show")
def profiles_show(
    name: str,
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """One profile, every number with its source."""
    from .catalog import load_catalog
    from .report.tables import profile_table

    cat = load_catalog()
    prof = cat.get(name)
    if fmt == Fmt.json:
        _json(prof.model_dump(mode="json"))
        return
    out.print(profile_table(prof, str(cat.files[name])))


@app.command()
def check(
    scenario: Annotated[str, typer.Argument(help="scenario YAML (path or bundled name)")],
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
    set_: Annotated[list[str] | None, typer.Option("--set", help="PATH=VALUE override")] = None,
) -> None:
    """Validate a scenario: does it fit in memory? Prints the per-GPU memory table."""
    from .catalog import find_scenario
    from .check import check as run_check
    from .config.loading import load_scenario
    from .report.tables import print_check

    rs = load_scenario(find_scenario(scenario), set_ or [])
    rep = run_check(rs)
    if fmt == Fmt.json:
        _json(rep.as_dict())
    elif fmt == Fmt.csv:
        d = rep.as_dict()
        flat = {
            "scenario": d["scenario"],
            "gpus": d["gpus"],
            "params": d["params"],
            "flops_per_step": d["flops_per_step"],
            "memory_gb_per_gpu": d["memory_gb_per_gpu"]["total"],
            "fits": d["fits"],
            **{f"memory_{k}": v for k, v in d["memory_gb_per_gpu"]["breakdown"].items()},
        }
        _csv(flat)
    else:
        print_check(rep, out)


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
    from .catalog import find_scenario
    from .config.loading import load_scenario
    from .report.tables import print_simulation
    from .report.trace import write_trace
    from .simulate import simulate as run_sim

    rs = load_scenario(find_scenario(scenario), set_ or [])
    res = run_sim(rs, full=full, trace=trace is not None, scaling=scaling)
    d = res.as_dict()
    if trace is not None:
        write_trace(
            trace,
            res.engine.trace or [],
            {"scenario": rs.name, "mode": d["mode"], "step_time_s": d["step_time_s"]},
        )
        err.print(f"trace written to {safe(trace)} (open in ui.perfetto.dev)")
    if fmt == Fmt.json:
        _json(d)
    elif fmt == Fmt.csv:
        _csv(_flatten(d))
    else:
        print_simulation(d, out)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        elif isinstance(v, list):
            continue
        else:
            flat[key] = v
    return flat


def _csv(flat: dict[str, Any]) -> None:
    import csv

    w = csv.writer(sys.stdout)
    w.writerow(flat.keys())
    w.writerow(flat.values())


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
    from pathlib import Path

    from calibrate.launch import ProbeFailed, launch

    if nproc < 1:
        raise UserError("--nproc must be at least 1")
    args = ["--max-bytes", str(max_bytes), "--time-budget", str(time_budget)]
    if storage_path:
        args += ["--storage-path", storage_path]
    if threads:
        args += ["--threads", str(threads)]
    if fsdp:
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
    err.print(f"probe: {nproc} process(es), budget {time_budget:g} s, writing {safe(out_file)}")
    _kept[0] = f"the measurements finished so far are kept in {out_file} (complete: false)"
    try:
        res = launch(Path(out_file), nproc, 1, args, timeout=timeout)
    except ProbeFailed as exc:
        err.print(
            f"[red]probe failed:[/red] {safe(str(exc))}\n"
            f"  measurements completed before are kept in {safe(out_file)} "
            "(complete: false)",
            highlight=False,
        )
        sys.exit(3)  # (typer.Exit codes are swallowed by main()'s non-standalone mode)
    d = json.loads(Path(out_file).read_text())
    for note in d.get("notes", []):
        err.print(f"note: {safe(note)}", highlight=False)
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
    from rich.table import Table

    from calibrate.fit import calibrate as fit
    from calibrate.fit import check_name, in_sample, load_probe, write

    check_name(name)
    data = load_probe(probe_file)
    cal = fit(data, probe_file, name)
    files = write(cal, out_dir)
    check = in_sample(name, cal.sidecar)
    if fmt == Fmt.json:
        _json(
            {
                "profiles": [str(f) for f in files],
                "fits": [f.as_dict() for f in cal.fits],
                "compute_fit": cal.sidecar["compute_fit"],
                "in_sample": check,
            }
        )
        return
    t = Table(title=f"alpha-beta fits ({probe_file})")
    for col in ("collective", "group", "n", "α (µs)", "1/β (GB/s)", "R²", "rms rel err", "points"):
        t.add_column(col, justify="right" if col not in ("collective", "group") else "left")
    for f in cal.fits:
        t.add_row(
            f.op,
            f.group,
            str(f.n),
            f"{f.alpha_s * 1e6:.1f}",
            f"{f.bandwidth_gbps:.3g}",
            f"{f.r2:.3f}",
            f"{f.rms_rel_err:.0%}",
            str(f.points),
        )
    out.print(t)
    cf = cal.sidecar["compute_fit"]
    out.print(
        f"compute: peak {cf['peak_tflops'] * 1e3:.1f} GFLOP/s ({cf['dtype']}), "
        f"matmul_max {cf['matmul_max']:.2f}, matmul_half_flops "
        f"{cf['matmul_half_flops']:.3g} (R²={cf['r2']:.2f})"
        + (
            f"; in a training step the operations take {cf['in_step_factor']:.2f}× as long"
            if cf.get("in_step_factor")
            else ""
        )
    )
    if check:
        out.print(
            f"in-sample check (the probe's own training step, world size "
            f"{check['world_size']}): measured {check['measured_s'] * 1e3:.0f} ms, "
            f"predicted {check['predicted_s'] * 1e3:.0f} ms ({check['error_pct']:+.1f}%)"
        )
    for path in files:
        out.print(f"wrote {safe(str(path))}")


@app.command()
def validate(
    profile: Annotated[str, typer.Option(help="calibrated GPU profile name")],
    nproc: Annotated[str, typer.Option(help="processes per node, comma list")] = "1,2",
    nodes: Annotated[str, typer.Option(help="'nodes' (process groups on this host)")] = "1",
    steps: Annotated[int, typer.Option(help="timed training steps per run")] = 8,
    repeats: Annotated[
        int, typer.Option(help="runs per layout, interleaved across layouts (median of all)")
    ] = 3,
    timeout: Annotated[float, typer.Option(help="seconds before a stuck run is stopped")] = 120.0,
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Run the probe's training job live and compare its step time with the prediction."""
    from rich.table import Table

    from calibrate.validate import validate as run_validate

    def ints(text: str, opt: str) -> list[int]:
        try:
            return [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise UserError(
                f"{opt} '{text}' is not a comma list of integers", path=opt, hint=f"e.g. {opt} 1,2"
            ) from None

    rep = run_validate(
        profile,
        ints(nproc, "--nproc"),
        ints(nodes, "--nodes"),
        steps,
        timeout,
        log=lambda m: err.print(m, highlight=False),
        repeats=repeats,
    )
    if fmt == Fmt.json:
        _json(rep)
        return
    if fmt == Fmt.csv:
        keys = [
            "nodes",
            "nproc_per_node",
            "world_size",
            "measured_s",
            "predicted_s",
            "error_pct",
            "run_spread_pct",
            "measured_scaling",
            "predicted_scaling",
            "skipped",
        ]
        _csv_rows(keys, rep["rows"])
        return
    t = Table(
        title=f"validate {profile}: measured vs predicted step time "
        f"({rep['threads_per_process']} thread(s) per process)"
    )
    notes: list[str] = []
    for col in (
        "nodes",
        "procs/node",
        "world",
        "meas. ms",
        "pred. ms",
        "error",
        "run spread",
        "scal. meas.",
        "scal. pred.",
        "",
    ):
        t.add_column(col, justify="right")
    for r in rep["rows"]:
        if "skipped" in r:
            t.add_row(
                str(r["nodes"]),
                str(r["nproc_per_node"]),
                str(r["world_size"]),
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "skipped*",
            )
            notes.append(f"* {r['nodes']}×{r['nproc_per_node']} skipped: {r['skipped']}")
            continue
        t.add_row(
            str(r["nodes"]),
            str(r["nproc_per_node"]),
            str(r["world_size"]),
            f"{r['measured_s'] * 1e3:.1f}",
            f"{r['predicted_s'] * 1e3:.1f}",
            f"{r['error_pct']:+.1f}%",
            f"{r['run_spread_pct']:.0f}%" if len(r["run_medians_s"]) > 1 else "-",
            f"{r['measured_scaling']:.2f}",
            f"{r['predicted_scaling']:.2f}",
            "†" if r.get("note") else "",
        )
        if r.get("note"):
            notes.append(f"† {r['nodes']}×{r['nproc_per_node']}: {r['note']}")
    out.print(t)
    for n in notes:
        out.print(safe(n))
    if rep.get("drift_pct") is not None:
        out.print(
            safe(
                f"machine drift: the probe's reference work ({rep['drift_work']}) runs "
                f"{abs(rep['drift_pct']):.1f}% {'slower' if rep['drift_pct'] >= 0 else 'faster'} "
                f"now than during the probe (median of {len(rep['drift_checks_unit_s'])} "
                "checks): a shared machine's speed changes; re-probe if this is large"
            )
        )
    if rep["max_abs_error_pct"] is not None:
        out.print(
            f"largest |error|: {rep['max_abs_error_pct']:.1f}%; measured: median of "
            f"{rep['repeats']} interleaved run(s) × {rep['steps']} steps (run spread: max − min "
            f"of the runs' medians); scaling is {rep['scaling']}"
        )


def _csv_rows(keys: list[str], rows: list[dict[str, Any]]) -> None:
    import csv

    w = csv.writer(sys.stdout)
    w.writerow(keys)
    for r in rows:
        w.writerow([r.get(k, "") for k in keys])


@app.command()
def schema() -> None:
    """JSON Schema of the scenario file (for editor completion)."""
    from .config.scenario import Scenario

    s = Scenario.model_json_schema()
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "clustersim scenario"
    _json(s)


# What an interrupted command leaves behind, said in one line on Ctrl-C; commands that write as
# they go replace it.
_kept = ["nothing was written (every output file is written whole or not at all)"]


def main() -> None:
    """Console-script entry point: user errors exit 2 with one message, no traceback."""
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:
        err.print(f"[red]error:[/red] {safe(exc.render())}", highlight=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print(f"interrupted: {safe(_kept[0])}", highlight=False)
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # Recent typer vendors click (typer._click), so match ClickException by name, not by
        # `click.ClickException`, which is another class there.
        if any(c.__name__ == "ClickException" for c in type(exc).__mro__):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        raise


if __name__ == "__main__":
    main()
