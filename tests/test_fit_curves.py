"""The fits behind the attention kernel's sequence-length curve and the memory cache tier
recover known parameters and refuse what the timings do not support; the engine times
operations on those curves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest


def test_attention_curve_recovered_from_timings_at_several_lengths() -> None:
    from calibrate.fits import fit_attention

    peak, m, half = 0.1, 0.7, 40.0  # TFLOP/s; fraction of the peak; tokens
    rows = [{"seq": s, "tflops": peak * m * s / (s + half)} for s in (64, 128, 256, 512)]
    fit = fit_attention(rows, peak)
    assert fit is not None
    assert fit["max"] == pytest.approx(m, rel=1e-3)
    assert fit["half_seq"] == pytest.approx(half, rel=1e-2)
    assert fit["r2"] > 0.999 and "4 sequence lengths" in fit["what"]
    # fewer than three lengths, or an efficiency that does not rise with length: no curve
    assert fit_attention(rows[:2], peak) is None
    flat = [dict(r, tflops=0.05) for r in rows]
    assert fit_attention(flat, peak) is None


def test_cache_tier_recovered_from_copies_of_growing_size() -> None:
    from calibrate.fits import fit_cache
    from simulator.engine.compute import tiered_seconds

    cache, fast, slow = 20e6, 90e9, 30e9  # bytes moved; bytes/s
    sizes = [2 ** (20 + k) for k in range(9)]  # 1 MiB .. 256 MiB moved
    rows = [{"bytes_moved": w, "time_s": tiered_seconds(w, slow, cache, fast)} for w in sizes]
    fit = fit_cache(rows)
    assert fit is not None
    assert fit["cache_gbps"] == pytest.approx(90, rel=0.02)
    assert fit["memory_gbps"] == pytest.approx(30, rel=0.02)
    assert fit["cache_mb"] == pytest.approx(20, rel=0.1)
    assert fit["rms_rel_err"] < 0.03
    # one bandwidth at every size: no tier
    flat = [{"bytes_moved": w, "time_s": w / slow} for w in sizes]
    assert fit_cache(flat) is None
    assert fit_cache(rows[:3]) is None


def test_memory_bound_time_follows_the_cache_tier() -> None:
    from simulator.engine.compute import tiered_seconds

    c, fast, slow = 10e6, 100e9, 25e9
    assert tiered_seconds(5e6, slow, c, fast) == pytest.approx(5e6 / fast)
    assert tiered_seconds(40e6, slow, c, fast) == pytest.approx(40e6 / slow)
    mid = tiered_seconds(15e6, slow, c, fast)
    assert 15e6 / fast < mid < 15e6 / slow
    # seconds per byte never fall as the operation grows; no cache: memory bandwidth
    per = [tiered_seconds(w, slow, c, fast) / w for w in (1e6, 10e6, 12e6, 18e6, 20e6, 1e9)]
    assert per == sorted(per)
    assert tiered_seconds(5e6, slow, 0.0, 0.0) == pytest.approx(5e6 / slow)


def test_a_multi_pass_operation_runs_in_cache_by_its_working_set() -> None:
    """Cross-entropy passes three times over two tensors: its working set, not the bytes it
    moves, decides whether it stays in a cache; a larger one falls out of it and each byte
    costs more."""
    from conftest import fig, inline_scenario

    from simulator.config.loading import resolve_dict
    from simulator.engine.compute import OpTimer
    from simulator.workload.ops import backward_op, head_ops

    data = inline_scenario()
    ce = next(op for op in head_ops(resolve_dict(data)) if op.name == "cross_entropy")
    assert 0 < ce.footprint < ce.bytes and backward_op(ce).footprint == ce.footprint
    # a cache just holding its two tensors, though it moves 1.67x as many bytes
    data["cluster"]["gpu"]["cache_mb"] = fig(ce.footprint * 1.01 / 1e6)
    data["cluster"]["gpu"]["cache_bandwidth_gbps"] = fig(10_000.0)
    t = OpTimer(resolve_dict(data).gpu, "bf16")
    assert (t.time(ce) - t.launch) / ce.bytes == pytest.approx(1 / t.cache_bw)
    big = replace(ce, bytes=ce.bytes * 4, footprint=ce.footprint * 4)
    assert (t.time(big) - t.launch) / big.bytes == pytest.approx(1 / t.mem_bw)
    # a cache slower than memory, or half the cache pair, is refused
    data["cluster"]["gpu"]["cache_bandwidth_gbps"] = fig(0.01)
    with pytest.raises(Exception, match="must be above memory_bandwidth_gbps"):
        resolve_dict(data)
    del data["cluster"]["gpu"]["cache_bandwidth_gbps"]
    with pytest.raises(Exception, match="give cache_bandwidth_gbps too"):
        resolve_dict(data)


def test_a_damaged_attention_curve_is_one_clear_error() -> None:
    from calibrate.probe_file import _check_timings
    from simulator.errors import UserError

    rows = [{"seq": 64, "time_s": 1e-3, "tflops": 0.05}, {"seq": 128, "time_s": 2e-3}]
    rows[1]["tflops"] = float("nan")
    with pytest.raises(UserError, match="tflops nan is not a positive number") as e:
        _check_timings({"attention_curve": rows}, "probe.json")
    assert "attention_curve[1].tflops" in str(e.value.path)


def test_attention_curve_refused_where_the_timings_do_not_support_it() -> None:
    from calibrate.fits import fit_attention

    def rows(effs: list[float]) -> list[dict[str, float]]:
        return [{"seq": s, "tflops": e} for s, e in zip((64, 128, 256, 512), effs, strict=True)]

    assert fit_attention(rows([0.1, 0.2, 0.4, 0.8]), 1.0) is None  # no sign of an asymptote
    # an asymptote beyond a causal kernel at the peak (12/7 of it in the full-s x s count)
    assert fit_attention(rows([0.5, 0.7, 0.85, 0.93]), 0.5) is None
    assert fit_attention(rows([0.5, 0.7, 0.85, 0.93]), 0.8) is not None  # 1.35 of it: a figure
    assert fit_attention(rows([0.2, 0.5, 0.5, 0.5]), 1.0) is None  # one low point, R² < 0.8
    assert fit_attention(rows([0.5, 0.6, 0.6, 0.6]), 0.0) is None  # no peak


def test_no_cache_tier_in_a_noisy_flat_copy_curve() -> None:
    from calibrate.fits import fit_cache

    rng = np.random.default_rng(3)
    sizes = [2 ** (20 + k) for k in range(9)]
    found = 0
    for _ in range(200):
        rows = [{"bytes_moved": w, "time_s": w / 30e9 * rng.lognormal(0, 0.1)} for w in sizes]
        found += fit_cache(rows) is not None
    assert found <= 4  # at most 2% false tiers at 10% scatter
    # the per-operation overhead is taken off before fitting
    c, fast, slow, ovh = 50e6, 8e12, 2.9e12, 11e-6
    from simulator.engine.compute import tiered_seconds

    gpu = [
        {"bytes_moved": w, "time_s": tiered_seconds(w, slow, c, fast) + ovh}
        for w in (2 ** (20 + k) for k in range(12))
    ]
    fit = fit_cache(gpu, ovh)
    assert fit is not None and fit["cache_gbps"] == pytest.approx(8000, rel=0.05)
