"""The memory tier the simulator's memory-bound operations follow, fitted on the training job's
own operations (layer norm, GELU, residual add, cross-entropy) timed on several token counts:
their bytes and working sets counted as the simulator counts them, their times measured. On a
shared machine plain copies swing by 2× with the host's state while these kernels move far
less, and the simulator times these kernels, not copies."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

# (bytes, working set) of each simulated operation one measurement times
SubOps = list[tuple[float, float]]


def fit_tier(points: list[tuple[str, SubOps, float]]) -> dict[str, Any] | None:
    """The shape of the memory tier (a cache's size and how many times faster than memory it
    runs) from measured times of kinds of memory-bound operations at several sizes: each
    operation takes ``bytes`` at the cache's speed while its working set fits, at memory's
    from twice the cache, linear in between (:func:`simulator.engine.compute.tiered_seconds`).
    Each kind keeps its own speed (a layer norm and a cross-entropy do not stream bytes
    equally fast); the tier is shared. Least squares on relative time over a grid of sizes and
    speed-ups. ``ratio`` 1 and ``cache_mb`` None where no tier has three timings wholly on
    either side of it and fits twice as closely as none; None with fewer than two sizes of
    some kind."""
    pts = [(k, ops, t) for k, ops, t in points if t > 0 and ops and sum(b for b, _ in ops) > 0]
    kinds = sorted({k for k, _, _ in pts})
    if not kinds or any(sum(1 for k, _, _ in pts if k == kind) < 2 for kind in kinds):
        return None
    idx = np.array([kinds.index(k) for k, _, _ in pts])
    t = np.array([p[2] for p in pts])
    nbytes = np.array([sum(b for b, _ in ops) for _, ops, _ in pts])

    def sse_for(g: np.ndarray) -> float:
        # each kind's own speed: the least-squares scale of g/t towards 1
        q = g / t
        num = np.bincount(idx, q, len(kinds))
        den = np.bincount(idx, q * q, len(kinds))
        c = num / np.maximum(den, 1e-300)
        return float(np.sum((c[idx] * q - 1.0) ** 2))

    flat_sse = sse_for(nbytes)
    n = len(pts)
    flat = {"cache_mb": None, "ratio": 1.0, "rms_rel_err": math.sqrt(flat_sse / n)}
    works = [w or b for _, ops, _ in pts for b, w in ops]
    best: tuple[float, float, float] | None = None
    for cache in np.geomspace(min(works) / 2, max(works), 48):
        hit_b = np.array([sum(b * _hit(w or b, cache) for b, w in ops) for _, ops, _ in pts])
        share = hit_b / nbytes
        if (share >= 0.99).sum() < 3 or (share <= 0.01).sum() < 3:
            continue  # a tier needs timings wholly on either side of it
        for ratio in np.geomspace(1.25, 16.0, 40):
            sse = sse_for(hit_b / ratio + (nbytes - hit_b))
            if best is None or sse < best[0]:
                best = (sse, float(cache), float(ratio))
    if best is None or best[0] > 0.5 * flat_sse:
        return flat
    sse, cache, ratio = best
    return {"cache_mb": cache / 1e6, "ratio": ratio, "rms_rel_err": math.sqrt(sse / n)}


def _hit(working: float, cache: float) -> float:
    return min(1.0, max(0.0, 2.0 - working / cache))


def job_tier_fit(probe: dict[str, Any], op_s: float) -> dict[str, Any] | None:
    """:func:`fit_tier` over the probe's timings of the job's memory-bound operations at its
    own token count and the multiples it also ran (``job_ops_scaled``), each less the
    simulator's per-operation overhead ``op_s`` for every operation it stands for. The
    simulator's bytes and working sets grow with the tokens (activations, logits), so the
    job's counts are scaled by each multiple. None where the probe did not time the
    multiples or the fit has too few points; else the fit and its source text."""
    jo, tr = probe.get("job_ops") or {}, probe.get("train")
    scaled = probe.get("job_ops_scaled")
    if not scaled or not tr:
        return None
    from simulator.config.loading import resolve_dict
    from simulator.workload.ops import backward_op, head_ops, layer_ops

    from .scenario import inline_job_scenario
    from .step_fits import FWD_BWD, JOB_OP_OF

    rs = resolve_dict(inline_job_scenario(tr["model"]))
    per_key: dict[str, SubOps] = {}
    for op in layer_ops(rs) + head_ops(rs):
        key = JOB_OP_OF.get(op.name)
        if op.kind != "memory" or key is None or key in per_key:
            continue
        ops = [op, backward_op(op)] if key in FWD_BWD else [op]
        per_key[key] = [(o.bytes, o.footprint or o.bytes) for o in ops]
    rows = [{"key": k, "scale": 1.0, **jo[k]} for k in per_key if k in jo]
    rows += [r for r in scaled if r.get("key") in per_key]
    points: list[tuple[str, SubOps, float]] = []
    for r in rows:
        sub = per_key[r["key"]]
        s = float(r["scale"])
        t = float(r["time_s"]) - len(sub) * op_s
        points.append((r["key"], [(b * s, w * s) for b, w in sub], t))
    fit = fit_tier(points)
    if fit is None:
        return None
    scales = sorted({float(r["scale"]) for r in rows})
    what = (
        f"fit of the simulator's memory tier to the training job's own memory-bound "
        f"operations ({', '.join(sorted(per_key))}) timed on {len(scales)} token counts "
        f"({scales[0]:g}-{scales[-1]:g}× the job's), {len(points)} timings, bytes and working "
        "sets as the simulator counts them, less per-op overhead, each kind at its own "
        "speed: "
    )
    if fit["cache_mb"] is None:
        what += "no cache tier shows (time grows with the bytes)"
    else:
        what += (
            f"{fit['ratio']:.3g}× memory's speed while the working set fits "
            f"{fit['cache_mb']:.3g} MB, memory's from twice that"
        )
    return {**fit, "what": what + f" (rms {fit['rms_rel_err']:.0%})"}


class MemoryFigures(NamedTuple):
    """What a calibrated GPU profile says about memory, each with its source text."""

    bandwidth_gbps: float
    bandwidth_what: str
    tier: dict[str, Any] | None  # cache_mb, cache_gbps (before the fraction)
    tier_what: str
    fraction: float
    fraction_what: str
    job: dict[str, Any] | None  # :func:`calibrate.step_fits.job_memory_fit`, with the optimizer


def memory_figures(probe: dict[str, Any], op_s: float) -> MemoryFigures:
    """Memory bandwidth from the probe's copies (a cache tier's memory side where they show
    one); the tier's shape from the job's own kernels where the probe timed them at several
    token counts (:func:`job_tier_fit`), else from the copies; the bandwidth fraction from
    the job's kernels at its own shapes (else GELU + copy over copy)."""
    from .fits import fit_cache
    from .step_fits import job_memory_fit

    mem = probe["memory"]
    copies = [r for r in mem if r["kind"] == "copy"]
    tier = fit_cache(copies, op_s)
    bw = tier["memory_gbps"] if tier else max(r["gbps"] for r in copies)
    bw_what = (
        tier["what"] + ", all processes copying at once"
        if tier
        else f"best large-tensor copy (read + write bytes) over {len(copies)} sizes, "
        "all processes copying at once"
    )
    tier_what = bw_what if tier else ""
    elem_bw = max((r["gbps"] for r in mem if r["kind"] != "copy"), default=bw)
    frac = min(1.0, elem_bw / bw)
    frac_what = f"elementwise (GELU + copy) {elem_bw:.3g} GB/s over copy {bw:.3g} GB/s"
    jt = job_tier_fit(probe, op_s)
    if jt is not None:
        # the tier's shape the job's own kernels show, on the copies' memory bandwidth
        tier = (
            None
            if jt["cache_mb"] is None
            else {"cache_mb": jt["cache_mb"], "cache_gbps": jt["ratio"] * bw}
        )
        tier_what = jt["what"] + f", on copy {bw:.3g} GB/s"
    job = job_memory_fit(probe, bw, op_s, tier)
    if job is not None:
        frac, frac_what = job["memory_fraction"], job["memory_what"]
        if jt is not None:
            frac_what += "; the tier: " + jt["what"]
    return MemoryFigures(bw, bw_what, tier, tier_what, frac, frac_what, job)
