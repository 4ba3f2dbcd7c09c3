"""`clustersim sweep`: many layouts from one spec (`clustersim compare`, scenarios side by
side: :mod:`simulator.cli_compare`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from .cli_common import _kept, app, err, out
from .errors import UserError
from .report.text import safe


@app.command()
def sweep(
    spec_file: Annotated[
        str, typer.Argument(help="sweep spec YAML, or a bundled sweep's name (scenarios/sweeps/)")
    ],
    out_file: Annotated[str, typer.Option("--out", help=".csv, .jsonl or .parquet")] = (
        "results/sweep.csv"
    ),
    plot: Annotated[str | None, typer.Option(help="folder for PNG plots")] = None,
    best: Annotated[str | None, typer.Option(help="time | cost | usd-per-token")] = None,
    deadline_days: Annotated[float | None, typer.Option(help="at most this many days")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="at most this many US$")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="at most this many GPUs", min=1)] = None,
    own: Annotated[
        bool | None, typer.Option("--own/--rent", help="only owned, or only rented, clusters")
    ] = None,
    all_plans: Annotated[bool, typer.Option("--all", help="keep every valid plan")] = False,
    answer_file: Annotated[
        str | None,
        typer.Option(
            "--answer",
            help="also write the Pareto front and the --best pick as JSON here (.json)",
        ),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="drop rows of --out that match no point of this run (another spec or "
            "settings); without it such a file is refused",
        ),
    ] = False,
    executor: Annotated[str, typer.Option(help="local | serial | ray")] = "local",
    workers: Annotated[
        int | None, typer.Option(help="local processes (default: cores)", min=1)
    ] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (ray)")] = None,
) -> None:
    """Evaluate every point of a sweep spec; write one row per point (resumable), print the
    Pareto front of time against cost and, with --best, the best layout under constraints."""

    from .report.progress import progress_bar
    from .sweep.run import run_sweep
    from .sweep.spec import load_spec, points

    if executor not in ("local", "serial", "ray"):
        raise UserError(
            f"unknown executor '{executor}'", path="--executor", hint="local | serial | ray"
        )
    unused = [
        opt
        for opt, given, used_by in (
            ("--workers", workers is not None, ("local",)),
            ("--address", address is not None, ("ray",)),
        )
        if given and executor not in used_by
    ]
    if unused:
        raise UserError(
            f"{' and '.join(unused)} {'do' if len(unused) > 1 else 'does'} nothing with "
            f"--executor {executor}",
            path=unused[0],
            hint="drop it: --workers sets the processes of --executor local, --address the "
            "cluster of --executor ray",
        )
    import sys

    if {"--own", "--rent"} <= set(sys.argv):
        raise UserError(
            "--own and --rent contradict each other",
            path="--own/--rent",
            hint="give one: --own keeps owned clusters, --rent rented ones",
        )
    if best not in (None, "time", "cost", "usd-per-token"):
        raise UserError(
            f"unknown objective '{best}'", path="--best", hint="time | cost | usd-per-token"
        )
    constraints = {
        "--deadline-days": deadline_days,
        "--budget-usd": budget_usd,
        "--max-gpus": max_gpus,
        "--own/--rent": own,
    }
    given = [k for k, v in constraints.items() if v is not None]
    if given and not best:
        raise UserError(
            f"{', '.join(given)} pick(s) the best layout, so needs --best",
            path=given[0],
            hint="add --best time, --best cost or --best usd-per-token",
        )
    for flag, v, eg in (
        ("--deadline-days", deadline_days, "30"),
        ("--budget-usd", budget_usd, "500000"),
    ):
        if v is not None and not math.isfinite(v):
            raise UserError(
                f"{flag} must be a finite number (got {v:g})", path=flag, hint=f"e.g. {eg}"
            )
    if budget_usd is not None and budget_usd < 0:
        raise UserError(
            f"--budget-usd must be 0 or more (got {budget_usd:g})",
            path="--budget-usd",
            hint="the most the whole run may cost, in US$, e.g. 500000",
        )
    if deadline_days is not None and deadline_days <= 0:
        raise UserError(
            f"--deadline-days must be positive (got {deadline_days:g})",
            path="--deadline-days",
            hint="the days the run may take, e.g. 30",
        )
    from .report.files import NAME_MAX, output_path, refuse_foreign

    output_path(out_file, "--out")
    room = NAME_MAX - len(".partial.jsonl")  # the longest name the sweep writes beside it
    if len(Path(out_file).name.encode()) > room:
        raise UserError(
            f"the file name is {len(Path(out_file).name.encode())} bytes long, and the sweep "
            "writes files beside it named after it (OUT.partial.jsonl, OUT.replaced.run): "
            f"at most {room} bytes",
            path="--out",
            hint="give a shorter name",
        )
    if not Path(out_file).is_dir() and Path(out_file).suffix.lower() not in (
        ".csv",
        ".jsonl",
        ".parquet",
    ):
        raise UserError(
            f"cannot tell the format of '{out_file}'",
            path="--out",
            hint="end the file name in .csv, .jsonl or .parquet",
        )
    if answer_file is not None:
        if Path(answer_file).suffix.lower() != ".json":
            raise UserError(
                f"--answer writes JSON; '{answer_file}' does not end in .json",
                path="--answer",
                hint="give a file name ending in .json",
            )
        output_path(answer_file, "--answer")
        from .cli_sweep_answers import is_sweep_answer

        refuse_foreign(
            answer_file,
            is_sweep_answer,
            "--answer",
            "an answer file this tool wrote",
            "sweep's answer",
            "move the file away, or give another --answer file",
        )
    if plot is not None:
        if (
            Path(plot).suffix.lower() in (".png", ".pdf", ".svg", ".jpg")
            and not Path(plot).is_dir()
        ):
            raise UserError(
                f"--plot takes a folder for its three PNGs; '{plot}' reads as a file name",
                path="--plot",
                hint="give a folder, e.g. --plot plots/",
            )
        output_path(plot, "--plot", folder=True)
    from .scenario_paths import find_sweep

    spec_file = str(find_sweep(spec_file))
    spec, base, base_path = load_spec(spec_file)
    if plot is not None:
        from .report.plots import is_our_plot, plot_paths

        for png in plot_paths(Path(plot), spec.name):
            output_path(png, "--plot")  # a folder or a device of that name: refused now
            refuse_foreign(
                png,
                is_our_plot,
                "--plot",
                "a plot this tool wrote",
                "sweep's plot",
                "move the file away, or give another --plot folder",
            )
    if deadline_days is not None or budget_usd is not None:
        from .sweep.axis_checks import tokens_reachable

        if not tokens_reachable(spec, base):
            dropped = (base.get("run") or {}).get("tokens") is not None
            raise UserError(
                "--deadline-days and --budget-usd judge the whole run, and "
                + (
                    "every point's run section, replaced whole by an axis, gives no token budget"
                    if dropped
                    else "the base scenario gives no token budget"
                ),
                file=spec_file,
                path="--deadline-days" if deadline_days is not None else "--budget-usd",
                hint="set run.tokens in the base scenario (e.g. 1.0e12)"
                if not dropped
                else "give the axis field paths (run.stragglers, ...) so that run.tokens stays, "
                "or give tokens in its run values",
            )
    from .sweep.axis_checks import unknown_field
    from .sweep.spec import axis_paths

    for i, axis in enumerate(spec.axes):
        for field in axis_paths(i, axis):
            problem = unknown_field(field)
            if problem:
                raise UserError(
                    f"axis path '{field}': {problem}",
                    file=spec_file,
                    path=f"axes[{i}]",
                    hint="give a scenario field path (clustersim schema lists them)",
                )
    from .sweep.axis_checks import check_axis_values

    check_axis_values(spec, base, spec_file)
    from .catalog import load_catalog, replacement_notes
    from .sweep.axis_checks import dropped_by_axes

    for line in dropped_by_axes(spec, base):
        err.print(f"{safe(spec_file)}: {safe(line)}")
    for line in replacement_notes(sorted(load_catalog().replaced)):
        err.print(f"note: {safe(line)}")
    priced = bool((base.get("cluster") or {}).get("pricing")) or any(
        p == "cluster" or p.startswith("cluster.pricing")
        for i, a in enumerate(spec.axes)
        for p in axis_paths(i, a)
    )
    needs_price = (
        "--best " + best if best in ("cost", "usd-per-token") else None,
        "--budget-usd" if budget_usd is not None else None,
        # owned or rented is said by a price profile: without one no point is either
        None if own is None else ("--own" if own else "--rent"),
    )
    if str(spec.keep) == "cheapest" and not priced and not all_plans:
        err.print(
            f"note: {safe(spec_file)}: keep: cheapest needs prices and no point has one "
            "(cluster.pricing): each point keeps its fastest plan"
        )
    for opt in needs_price:
        if opt and not priced:
            raise UserError(
                f"{opt} needs prices, and neither the base scenario nor an axis sets "
                "cluster.pricing",
                file=spec_file,
                path=opt.split()[0],
                hint="give the base scenario a cluster.pricing (or an axis over it)"
                + (", or use --best time" if opt.startswith("--best") else ""),
            )
    if all_plans:
        spec = spec.model_copy(update={"keep": "all"})
    try:
        pts = points(spec)
    except UserError as exc:
        raise UserError(exc.message, file=spec_file, path=exc.path, hint=exc.hint) from None
    path = Path(out_file)
    from .sweep.run import check_output, replaced_copy

    check_output(path)
    from .sweep.rows import journal

    kept_in = journal(path)  # the file itself, or a Parquet file's journal
    _kept[0] = f"finished points are kept in {kept_in}; run the same command again to resume"
    with progress_bar(err, f"sweep {safe(spec.name)}", len(pts)) as update:
        rows = run_sweep(
            spec,
            base,
            pts,
            path,
            executor,
            workers,
            address,
            on_point=lambda done, total: update(done),
            replace=replace,
            on_stale=lambda n: err.print(
                f"{safe(out_file)}: {n} row(s) match no point of this run (another base "
                "scenario, other sweep settings or profiles, or points no longer in the spec) "
                "and are dropped; until this run finishes the file as it was is kept as "
                f"{safe(str(replaced_copy(Path(out_file))))}"
            ),
        )
    from .cli_sweep_answers import answer

    def base_fault(reason: str) -> tuple[str, str] | None:
        import re

        from .sweep.spec import set_by_points

        named = re.match(r"invalid: ([A-Za-z0-9_.\[\]]+): ", reason)
        if named is None or set_by_points(spec, named.group(1)):
            return None
        return str(base_path), named.group(1)

    front, chosen, removed = answer(
        rows,
        len(pts),
        out_file,
        spec_file,
        best,
        deadline_days,
        budget_usd,
        max_gpus,
        own,
        base_fault,
    )
    if answer_file is not None:
        import json

        from .report.files import write_atomic

        doc = {
            "sweep": spec_file,
            "out": out_file,
            "objective": best,
            "constraints": {
                "deadline_days": deadline_days,
                "budget_usd": budget_usd,
                "max_gpus": max_gpus,
                "ownership": None if own is None else ("own" if own else "rent"),
            },
            "best": chosen,
            "met": chosen is not None if best else None,
            "removed_by": removed,
            "pareto_front": front,
        }
        write_atomic(answer_file, json.dumps(doc, indent=1, default=str) + "\n")
        out.print(f"wrote {safe(answer_file)}")
    if plot is not None:
        from .report import plots

        d = Path(plot)
        d.mkdir(parents=True, exist_ok=True)
        scaling_png, cost_png, idle_png = plots.plot_paths(d, spec.name)
        made = [
            plots.scaling(rows, scaling_png, f"{spec.name}: scaling"),
            plots.cost_time(rows, cost_png, f"{spec.name}: cost vs time", chosen),
            plots.idle_breakdown(rows, idle_png, f"{spec.name}: where the step goes"),
        ]
        for p in made:
            out.print(f"wrote {safe(p)}")
    if best and chosen is None:
        # as `check` exits 1 for a plan that does not fit: a script can gate on the answer
        raise typer.Exit(code=1)
