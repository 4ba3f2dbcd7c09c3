"""The plans an automatic parallelism search tries for one cluster: every combination of the
scenario's 'auto' fields (TP over a node's GPUs, PP over the stage counts that divide the
cluster, CP, sharding, micro-batch, schedule, recomputation), unvalidated; :mod:`.plans`
resolves, sizes and simulates them."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from ..errors import UserError

SHARDINGS: list[dict[str, Any]] = [{"kind": "zero", "stage": s} for s in (0, 1, 2, 3)]
MICRO_BATCHES = (1, 2, 4, 8)
RECOMPUTE = ("none", "selective", "full")


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def plan_variants(data: dict[str, Any], auto: list[str]) -> list[dict[str, Any]]:
    """The scenario ``data`` under every combination of the 'auto' fields (unvalidated)."""
    if not auto:
        return [data]
    cl = data.get("cluster") or {}
    gpn, nodes = cl.get("gpus_per_node") or 8, cl.get("nodes") or 1
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (gpn, nodes)):
        raise UserError(
            f"cluster.gpus_per_node and cluster.nodes must be whole numbers (got {gpn!r} and "
            f"{nodes!r})",
            path="cluster",
        )
    gpus = gpn * nodes
    par = dict(data.get("parallelism") or {})
    sp_given = par.get("sequence_parallel")
    choices: dict[str, list[Any]] = {}
    if "tp" in auto:
        choices["tp"] = _divisors(gpn, 64)
    if "pp" in auto:
        # Every stage count that divides the cluster (192 GPUs take PP 3, 6, 12 as well as
        # the powers of two); one whose stages do not split the layers is dropped as invalid.
        choices["pp"] = _divisors(gpus, 64)
    if "cp" in auto:
        choices["cp"] = [1, 2]
    if "sharding" in auto:
        choices["sharding"] = SHARDINGS
    if "micro_batch" in auto:
        choices["micro_batch"] = list(MICRO_BATCHES)
    if "schedule" in auto:
        # 1F1B, and interleaved with two virtual stages and with the base's own count.
        base_sched = par.get("pp_schedule") or {}
        vs = {2}
        if isinstance(base_sched, dict) and base_sched.get("kind") == "interleaved":
            vs.add(int(base_sched.get("virtual_stages") or 2))
        choices["schedule"] = ["1f1b", *(("interleaved", v) for v in sorted(vs))]
    if "recompute" in auto:
        choices["recompute"] = list(RECOMPUTE)
    out = []
    names = list(choices)
    for combo in itertools.product(*(choices[n] for n in names)):
        d = copy.deepcopy(data)
        p = dict(par)
        tr = dict(d.get("training") or {})
        for name, value in zip(names, combo, strict=True):
            if name == "micro_batch":
                tr["micro_batch"] = value
            elif name == "schedule":
                p["pp_schedule"] = (
                    {"kind": "interleaved", "virtual_stages": value[1]}
                    if isinstance(value, tuple)
                    else {"kind": value}
                )
            else:
                p[name] = value
        pp = p.get("pp", 1)
        kind = (p.get("pp_schedule") or {}).get("kind")
        if pp == 1 and kind == "interleaved":
            if "schedule" in choices:
                continue  # the same plan as 1f1b without a pipeline
            # The base scenario's interleaved schedule, with PP enumerated: a single stage has
            # no pipeline to interleave, so the PP=1 plan runs as plain 1F1B.
            p["pp_schedule"] = {"kind": "1f1b"}
        p["dp"] = "auto"
        if "tp" in choices:
            # Sequence parallelism with TP, as Megatron recommends, unless the base turns it
            # off; with TP from the base, the base's choice stands.
            p["sequence_parallel"] = int(p.get("tp", 1)) > 1 and sp_given is not False
        d["parallelism"] = p
        d["training"] = tr
        out.append(d)
    return out


__all__ = ["MICRO_BATCHES", "RECOMPUTE", "SHARDINGS", "plan_variants"]
