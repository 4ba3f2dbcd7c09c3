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


# A kind of operation counts towards the tier only if its time grows at least this much over
# a 16× range of tokens (4× less per-call overhead than pure streaming would show): kernels whose
# time is mostly fixed cost (a GPU's small layer norms, 140-220 µs at any size on the H100 probe
# of 2026-11-23) say nothing about where bytes come from.
MIN_GROWTH = 4.0
# A fit whose relative rms is above this is noise, not a memory tier (the VM's kernels: 17-29%).
MAX_RMS = 0.35


def fit_tier(points: list[tuple[str, SubOps, float]]) -> dict[str, Any] | None:
    """The shape of the memory tier (a cache's size and how many times faster than memory it
    runs) from measured times of kinds of memory-bound operations at several sizes: each
    operation takes ``bytes`` at the cache's speed while its working set fits, at memory's
    from twice the cache, linear in between (:func:`simulator.engine.compute.tiered_seconds`).
    Each kind keeps its own speed (a layer norm and a cross-entropy do not stream bytes
    equally fast); the tier is shared, and seen only through kinds timed on both sides of it.
    Least squares on relative time over a grid of sizes and speed-ups. ``ratio`` 1 and
    ``cache_mb`` None where a tier could be tested (three timings wholly on either side, one
    kind on both) but none fits twice as closely as one speed per kind. None (no say: the
    copies' tier stands) where no kind grows with its bytes (:data:`MIN_GROWTH`) at two sizes
    or more, where no tier could be tested, or where the fit's rms exceeds :data:`MAX_RMS`."""
    pts = [(k, ops, t) for k, ops, t in points if t > 0 and ops and sum(b for b, _ in ops) > 0]
    growing = _growing_kinds(pts)
    pts = [p for p in pts if p[0] in growing]
    kinds = sorted({k for k, _, _ in pts})
    if not kinds:
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
    works = [w or b for _, ops, _ in pts for b, w in ops]
    best: tuple[float, float, float] | None = None
    for cache in np.geomspace(min(works) / 2, max(works), 48):
        hit_b = np.array([sum(b * _hit(w or b, cache) for b, w in ops) for _, ops, _ in pts])
        share = hit_b / nbytes
        inside, outside = share >= 0.99, share <= 0.01
        if inside.sum() < 3 or outside.sum() < 3:
            continue  # a tier needs timings wholly on either side of it ...
        if not any(inside[idx == j].any() and outside[idx == j].any() for j in range(len(kinds))):
            continue  # ... and a kind timed on both (each kind's speed is its own)
        for ratio in np.geomspace(1.25, 16.0, 40):
            sse = sse_for(hit_b / ratio + (nbytes - hit_b))
            if best is None or sse < best[0]:
                best = (sse, float(cache), float(ratio))
    if best is None:
        return None
    out: dict[str, Any] = {"cache_mb": None, "ratio": 1.0, "rms_rel_err": math.sqrt(flat_sse / n)}
    if best[0] <= 0.5 * flat_sse:
        sse, cache, ratio = best
        out = {"cache_mb": cache / 1e6, "ratio": ratio, "rms_rel_err": math.sqrt(sse / n)}
    out["kinds"] = kinds
    return None if out["rms_rel_err"] > MAX_RMS else out


def _growing_kinds(pts: list[tuple[str, SubOps, float]]) -> set[str]:
    """The kinds timed at two sizes or more whose time grows at least :data:`MIN_GROWTH`× over
    a 16× growth of their bytes (pro rata over the range they span)."""
    out = set()
    for kind in {k for k, _, _ in pts}:
        mine = sorted((sum(b for b, _ in ops), t) for k, ops, t in pts if k == kind)
        if len(mine) < 2:
            continue
        (b0, t0), (b1, t1) = mine[0], mine[-1]
        if b1 > b0 and math.log(t1 / t0) >= math.log(MIN_GROWTH) * math.log(b1 / b0) / math.log(16):
            out.add(kind)
    return out


def _hit(working: float, cache: float) -> float:
    return min(1.0, max(0.0, 2.0 - working / cache))


def job_tier_fit(probe: dict[str, Any], op_s: float) -> dict[str, Any] | None:
    """:func:`fit_tier` over the probe's timings of the job's memory-bound operations at its
    own token count and the multiples it also ran (``job_ops_scaled``), each less the probe's
    bare per-operation overhead ``op_s`` (a one-element add; :func:`calibrate.step_fits.
    job_memory_fit` takes off the same) for every operation it stands for. The
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
        f"operations ({', '.join(fit['kinds'])}) timed on {len(scales)} token counts "
        f"({scales[0]:g}-{scales[-1]:g}× the job's), {len(points)} timings, bytes and working "
        "sets as the simulator counts them, less per-op overhead, each kind at its own "
        "speed: "
    )
    if fit["cache_mb"] is None:
        what += "no cache tier fits better than one speed per kind of operation"
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
        if tier is None and jt["cache_mb"] is not None:
            # the copies showed no tier, so their best may be an in-cache size: memory's side
            # is the copies that move at least twice the kernels' cache
            past = [r["gbps"] for r in copies if r["bytes_moved"] >= 2e6 * jt["cache_mb"]]
            if past:
                bw = float(np.median(past))
                bw_what = (
                    f"median of the {len(past)} copies moving at least twice the "
                    f"{jt['cache_mb']:.3g} MB cache the job's kernels show, all processes "
                    "copying at once"
                )
        elif tier is not None:
            bw_what = "the memory side of " + bw_what
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
