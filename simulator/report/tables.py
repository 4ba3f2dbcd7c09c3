"""Rich tables for the terminal: profiles, the `check` report."""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console
from rich.table import Table

from ..check import CheckReport
from ..config.hardware import Sourced, _Profile
from ..workload.memory import TIGHT_SHARE
from .text import duration, safe, usd


def fmt_num(x: float) -> str:
    ax = abs(x)
    if ax >= 1e15:
        return f"{x:.3e}"
    if ax >= 1e4:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.3g}" if ax < 10 else f"{x:.2f}"
    return f"{x:.3g}"


def _rows(prefix: str, value: Any) -> list[tuple[str, str, str]]:
    if isinstance(value, Sourced):
        return [(prefix, fmt_num(value.value), value.source)]
    fields = getattr(type(value), "model_fields", {})
    if "value" in fields and "source" in fields:
        # a sourced yes/no, count or choice: one row, as a figure
        v = value.value
        shown = ", ".join(map(str, v)) if isinstance(v, list) else str(v).lower()
        return [(prefix, shown, value.source)]
    if isinstance(value, dict):
        out: list[tuple[str, str, str]] = []
        for k, v in value.items():
            out += _rows(f"{prefix}.{k}", v)
        return out
    if hasattr(type(value), "model_fields"):
        out = []
        for k in type(value).model_fields:
            out += _rows(f"{prefix}.{k}" if prefix else k, getattr(value, k))
        return out
    if value is None:
        return []
    return [(prefix, str(value), "")]


def profile_table(p: _Profile, path: str | None) -> Table:
    title = f"{safe(p.display_name)}  [dim]({safe(p.name)}, {getattr(p, 'kind', '')})[/dim]"
    t = Table(title=title, caption=safe(path) if path else None, show_lines=False)
    t.add_column("field", style="cyan", no_wrap=True)
    t.add_column("value", justify="right")
    t.add_column("source", overflow="fold")
    for field, value, source in _rows("", p):
        if field in ("name", "display_name", "kind"):
            continue
        t.add_row(field, safe(value), safe(source))
    return t


def profiles_table(rows: list[tuple[str, str, str, str]]) -> Table:
    t = Table(title="hardware profiles")
    for col in ("kind", "name", "description", "key figures"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*(safe(c) for c in r))
    return t


def print_check(rep: CheckReport, console: Console) -> None:
    rs = rep.rs
    d = rep.as_dict()
    lay = d["layout"]
    console.print(
        f"[bold]{safe(rs.name)}[/bold]: {safe(rs.model.name)} ({rep.params / 1e9:.2f} B params) "
        f"on {rs.gpus} × {safe(rs.gpu.display_name)} "
        f"({rs.nodes} node{'s' if rs.nodes > 1 else ''})"
    )
    console.print(
        f"layout DP={lay['dp']} TP={lay['tp']} PP={lay['pp']} CP={lay['cp']}, "
        f"{lay['micro_batches']} micro-batches of {rs.training.micro_batch}, "
        f"schedule {lay['schedule']}, ZeRO stage {_zero(lay)}, "
        f"recompute {_recompute(lay)}{_stages(lay)}"
    )
    for note in rs.plan_notes():
        console.print(f"[yellow]note:[/yellow] {safe(note)}")
    console.print(
        f"FLOPs per step: model {rep.model_flops_per_step:.3e}, hardware "
        f"{rep.hardware_flops_per_step:.3e} ({rs.training.tokens_per_step:,} tokens)"
    )
    t = Table(title="memory per GPU (GB)")
    t.add_column("")
    stages = rep.memory.stages
    # the first two and last two stages, and the one that needs the most wherever it sits
    ends = {0, 1, len(stages) - 2, len(stages) - 1, rep.memory.peak.stage}
    show = stages if len(stages) <= 4 else [s for s in stages if s.stage in ends]
    for s in show:
        t.add_column(f"stage {s.stage}" if rs.pp > 1 else "GPU", justify="right")
    rows = [
        ("weights_gb", "weights"),
        ("gradients_gb", "gradients"),
        ("grad_buckets_gb", "gradient buckets (DDP copy)"),
        ("optimizer_gb", "optimizer state"),
        ("gathered_params_gb", "gathered params (ZeRO-3)"),
        ("activations_gb", "activations"),
        ("reserve_gb", "framework reserve"),
    ]
    for key, label in rows:
        if key == "grad_buckets_gb" and not any(s.grad_buckets_gb for s in stages):
            continue  # only with parallelism.dp_bucket_copy
        t.add_row(label, *[f"{getattr(s, key):.2f}" for s in show])
    t.add_row("[bold]total[/bold]", *[f"[bold]{s.total_gb:.2f}[/bold]" for s in show])
    t.add_row("capacity", *[f"{rep.memory.capacity_gb:.2f}" for _ in show])
    t.add_row("micro-batches in flight", *[f"{s.inflight_microbatches:g}" for s in show])
    console.print(t)
    if rep.fits:
        peak = rep.memory.peak
        console.print(
            f"[green]fits[/green]: peak {peak.total_gb:.1f} GB of {rep.memory.capacity_gb:.2f} GB"
            f" (stage {peak.stage})"
        )
        if rep.tight:
            console.print(
                f"[yellow]tight[/yellow]: above {TIGHT_SHARE:.0%} of the GPU's memory; PyTorch's "
                "caching allocator reserves more than the live tensors counted here (torchtitan's "
                "logged peaks run 10-30% above this model's), so leave headroom: a smaller "
                "micro-batch, more recomputation or more sharding"
            )
    else:
        peak = rep.memory.peak
        console.print(
            f"[red bold]does not fit[/red bold]: stage {peak.stage} needs {peak.total_gb:.1f} GB "
            f"of {rep.memory.capacity_gb:.2f} GB"
        )
        if rep.levers:
            console.print(
                "changes that make it fit, in the order of what they usually cost (simulate "
                "them to compare):"
            )
            for lv in rep.levers:
                sets = " ".join(f"--set {shlex.quote(c)}" for c in lv.change)
                console.print(f"  {safe(sets)}   (peak {lv.peak_gb:.1f} GB)")
        else:
            console.print(
                "no single change to the plan, nor any pair of them, fits: use more GPUs or a "
                "larger GPU"
            )


def _recompute(lay: dict[str, Any]) -> str:
    """The recomputation mode, with the stack's selective policy where it is not Megatron's."""
    rc = lay["recompute"]
    if rc == "selective" and lay.get("selective_recompute") == "alternate_matmuls":
        return "selective (every second matmul)"
    return str(rc)


def _zero(lay: dict[str, Any]) -> str:
    """The ZeRO stage written, and the one the stack runs it as where they differ."""
    z, eff = lay["zero_stage"], lay.get("zero_stage_effective", lay["zero_stage"])
    return f"{z} (runs as {eff})" if eff != z else str(z)


def _stages(lay: dict[str, Any]) -> str:
    """An uneven pipeline's layers per stage, for the layout line."""
    sl = lay.get("stage_layers")
    return f", layers per stage {'/'.join(map(str, sl))}" if sl else ""


def print_simulation(d: dict[str, Any], console: Console) -> None:
    """The `simulate` report: headline figures, idle breakdown, cost."""
    lay = d["layout"]
    console.print(
        f"[bold]{safe(d['scenario'])}[/bold]: {d['gpus']} GPUs ({d['nodes']} "
        f"node{'s' if d['nodes'] != 1 else ''}), "
        f"DP={lay['dp']} TP={lay['tp']} PP={lay['pp']} CP={lay['cp']}, "
        f"{lay['micro_batches']} micro-batches, {lay['schedule']}, ZeRO {_zero(lay)}, "
        f"recompute {_recompute(lay)}{_stages(lay)}  [dim]({d['mode']} mode)[/dim]"
    )
    t = Table(title="performance", show_header=False)
    t.add_column("metric", style="cyan")
    t.add_column("value", justify="right")
    t.add_row("step time", f"{d['step_time_s']:.3f} s")
    t.add_row(
        "throughput", f"{d['tokens_per_s']:,.0f} tokens/s  ({d['samples_per_s']:.2f} samples/s)"
    )
    for key, label in (("model", "model"), ("hardware", "hardware")):
        v = d[f"{key}_tflops_per_gpu"]
        # (a CPU-calibrated cluster runs at hundredths of a TFLOP/s: three figures, not 0.0)
        t.add_row(f"{label} TFLOP/s per GPU", f"{v:.1f}" if v >= 10 else f"{v:.3g}")
    # MFU against the peak of the precision the GEMMs run in (fp8 against the fp8 peak, as
    # Composer and NeMo report it).
    peak = " (of the fp8 peak)" if lay.get("precision") == "fp8" else ""
    t.add_row("MFU", f"{100 * d['mfu']:.1f} %{peak}")
    if d.get("scaling_efficiency") is not None:
        ref = d.get("scaling_reference") or {}
        gb = ref.get("global_batch")
        own = round(d["samples_per_s"] * d["step_time_s"])  # this scenario's global batch
        weak = f" at global batch {gb}, not {own}" if gb is not None and gb != own else ""
        t.add_row(
            "scaling efficiency",
            f"{100 * d['scaling_efficiency']:.1f} % (vs {ref.get('gpus')} GPUs{weak})",
        )
    fit = "fits" if d["fits"] else "[red]does NOT fit[/red]"
    t.add_row("memory per GPU", f"{d['memory_gb_per_gpu']:.1f} GB ({fit})")
    if d.get("goodput", 1.0) < 1.0:
        t.add_row("wall time making progress", f"{100 * d['goodput']:.1f} % (interruptions)")
    if d.get("time_to_train_days") is not None:
        t.add_row("time to train", duration(d["time_to_train_days"]))
    console.print(t)
    for note in d.get("notes") or []:
        console.print(f"[yellow]note:[/yellow] {safe(note)}")
    b = Table(title="where the step goes (mean over rank classes)")
    b.add_column("category")
    b.add_column("seconds", justify="right")
    b.add_column("share", justify="right")
    step = d["step_time_s"]
    labels = {
        "compute": "compute (busy)",
        "optimizer": "optimizer (busy)",
        "host": "waiting for the host to issue kernels",
        "comm_tp": "exposed TP comm",
        "comm_cp": "exposed CP comm",
        "comm_dp": "exposed DP comm",
        "comm_pp": "exposed PP comm",
        "pp_bubble": "pipeline bubble",
        "data_stall": "data-loader stall",
        "imbalance": "waiting on other stages or ranks",
        "straggler": "waiting for the slowest GPU",
        "overlap": "slowed by overlapping DP comm",
        "offload": "waiting on activation offload",
    }
    for k, v in d["breakdown_s"].items():
        if v > 0 or k in ("compute",):
            b.add_row(labels.get(k, k), f"{v:.3f}", f"{100 * v / step:.1f} %")
    b.add_row("[bold]step[/bold]", f"[bold]{step:.3f}[/bold]", "100 %")
    console.print(b)
    c = d.get("cost")
    if c:
        ct = Table(title=f"cost ({safe(c['model'])})", show_header=False)
        ct.add_column("item", style="cyan")
        ct.add_column("value", justify="right")
        ct.add_row("$ per GPU-hour (of the GPUs used)", usd(c["usd_per_gpu_hour"]))
        ct.add_row("$ per step", usd(c["usd_per_step"]))
        ct.add_row("$ per million tokens", usd(c["usd_per_million_tokens"]))
        if c.get("usd_total") is not None:
            ct.add_row("$ for the token budget", usd(c["usd_total"]))
            ct.add_row("$ on idle or lost GPU time", usd(c["usd_idle"]))
        if c.get("usd_commitment") is not None:
            what = "purchase price" if c["model"] == "ownership" else "reserved term's rent"
            ct.add_row(f"$ committed ({what})", usd(c["usd_commitment"]))
        console.print(ct)
        for line in c.get("assumptions") or []:
            console.print(f"[dim]·[/dim] {safe(line)}")
