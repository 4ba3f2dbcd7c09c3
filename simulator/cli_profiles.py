"""`clustersim profiles list` and `profiles show`: the catalogue of GPU, fabric, network,
storage, price and software-stack profiles, every figure with its source."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from .cli_common import Fmt, _csv_rows, _flatten, _json, out, profiles_app
from .errors import UserError


def _key_figures(p: Any) -> str:
    kind = p.kind
    if kind == "gpu":
        half = p.half_dtype
        usable = f" ({p.capacity_gb:g} usable)" if p.memory_usable_gb is not None else ""
        return f"{p.memory_gb.value:g} GB{usable}, {p.memory_bandwidth_gbps.value:g} GB/s, " + (
            f"{p.peak_tflops[half].value:g} TFLOP/s {half}" if half else ""
        )
    if kind == "fabric":
        return f"{p.bandwidth_gbps.value:g} GB/s per GPU, {p.latency_us.value:g} us"
    if kind == "network":
        return f"{p.port_gbps.value:g} Gb/s per port, {p.latency_us.value:g} us"
    if kind == "storage":
        return f"read {p.read_gbps_per_client.value:g} GB/s per host"
    if kind == "cloud_price":
        return f"${p.on_demand_usd_per_gpu_hour.value:.2f}/GPU-h on demand ({p.as_of})"
    if kind == "ownership_price":
        return f"${p.capex_per_node_usd.value:,.0f} per node, {p.amortisation_years.value:g} y"
    if kind == "software":
        return f"{p.framework}; flash kernel {p.flash_kernel.value}"
    return ""


@profiles_app.command("list")
def profiles_list(
    what: Annotated[
        str | None, typer.Argument(metavar="[KIND]", help="only this kind (gpu, fabric, ...)")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="only this kind (gpu, fabric, ...)")] = None,
    fmt: Annotated[Fmt, typer.Option("--format")] = Fmt.table,
) -> None:
    """Every GPU, fabric, network, storage, price and software-stack profile
    (`profiles list fabric` or `--kind fabric`: one kind)."""
    from .catalog import load_catalog
    from .report.tables import profiles_table

    order = ["gpu", "fabric", "network", "storage", "cloud_price", "ownership_price", "software"]
    if what and kind and what != kind:
        raise UserError(f"two kinds given: '{what}' and --kind '{kind}'", hint="give the kind once")
    kind = kind or what
    if kind:
        # the profile folders' names (gpus/, prices/, ...) and any case name the same kinds
        kind = kind.lower()
        kind = {"gpus": "gpu", "fabrics": "fabric", "networks": "network", "prices": "price"}.get(
            kind, kind
        )
    cat = load_catalog()
    items = sorted(cat.profiles.values(), key=lambda p: (order.index(p.kind), p.name))  # type: ignore[attr-defined]
    if kind:
        # "price" (the README's word for them): both kinds of price profile
        kinds = ("cloud_price", "ownership_price") if kind == "price" else (kind,)
        items = [p for p in items if p.kind in kinds]  # type: ignore[attr-defined]
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
        _bad_profiles(cat)
        return
    rows = [(p.kind, p.name, p.display_name, _key_figures(p)) for p in items]  # type: ignore[attr-defined]
    if fmt == Fmt.csv:
        _csv_rows(
            ["kind", "name", "display_name", "key_figures", "file"],
            [
                {
                    "kind": k,
                    "name": n,
                    "display_name": d,
                    "key_figures": f,
                    "file": str(cat.files[n]),
                }
                for k, n, d, f in rows
            ],
        )
        _bad_profiles(cat)
        return
    out.print(profiles_table(rows))
    _bad_profiles(cat)


def _bad_profiles(cat: Any) -> None:
    """After the list: a profile file that could not be loaded, or that reuses another kind's
    name, is an error (listing the catalogue is the command that reports them)."""
    bad = [*cat.broken.values(), *cat.clashes.values()]
    if bad:
        if len(bad) > 1:
            print(f"{len(bad)} profile files were left out:", file=sys.stderr)
            for err in bad[:-1]:
                print(f"error: {err.render()}", file=sys.stderr)
        raise bad[-1]


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
    if fmt == Fmt.csv:
        # One row per figure: a sourced figure's value and source side by side.
        flat = _flatten(prof.model_dump(mode="json"))
        fields: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            head, _, last = key.rpartition(".")
            if last in ("value", "source") and head:
                fields.setdefault(head, {"field": head})[last] = value
            else:
                fields.setdefault(key, {"field": key})["value"] = value
        _csv_rows(["field", "value", "source"], list(fields.values()))
        return
    out.print(profile_table(prof, str(cat.files[name])))
