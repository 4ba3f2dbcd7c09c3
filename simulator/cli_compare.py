"""`clustersim compare`: scenarios side by side, differences highlighted, one verdict per
metric."""

from __future__ import annotations

from typing import Annotated

import typer

from .cli_common import Fmt, _json, app, out
from .errors import UserError


@app.command()
def compare(
    scenarios: Annotated[list[str], typer.Argument(help="two or more scenario YAML files")],
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Scenarios side by side: differences highlighted, one verdict per metric."""
    from .cli_common import _csv_rows
    from .compare import compare_csv_rows, compare_results, print_compare
    from .config.loading import load_scenario
    from .scenario_paths import find_scenario
    from .simulate import simulate

    if len(scenarios) < 2:
        raise UserError(
            "compare needs at least two scenarios", hint="clustersim compare a.yaml b.yaml"
        )
    from .catalog import replacement_notes

    loaded = [load_scenario(find_scenario(s)) for s in scenarios]
    results = [simulate(rs).as_dict() for rs in loaded]
    rep = compare_results(results)
    # a local profile file that replaces a bundled one: said here too, once
    rep["notes"] = [
        *replacement_notes([n for rs in loaded for n in rs.profile_names()]),
        *rep["notes"],
    ]
    if fmt == Fmt.json:
        _json(rep)
    elif fmt == Fmt.csv:
        _csv_rows(*compare_csv_rows(rep))
    else:
        print_compare(rep, out)
