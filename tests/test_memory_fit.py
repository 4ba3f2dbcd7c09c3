"""The memory tier fitted on the training job's own memory-bound kernels at several token
counts (:mod:`calibrate.memory_fit`): a tier is recovered where the timings hold one, none is
invented where time grows with the bytes, and calibrate uses the kernels' shape over the
copies'."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import h100_probe_two_ranks

from calibrate.memory_fit import fit_tier, job_tier_fit
from simulator.engine.compute import tiered_seconds
from simulator.errors import UserError

MB = 1e6
SIZES = [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128]  # MB of working set


def _points(cache_mb: float | None, ratio: float, speeds: dict[str, float]):
    """Timings of kinds of operation (each moving twice its working set) on a device whose
    memory runs at ``speeds[kind]`` bytes/s and whose cache is ``ratio`` times faster."""
    pts = []
    for kind, mem_bps in speeds.items():
        for w in SIZES:
            ops = [(2 * w * MB, w * MB)]
            if cache_mb is None:
                t = 2 * w * MB / mem_bps
            else:
                t = tiered_seconds(2 * w * MB, mem_bps, cache_mb * MB, ratio * mem_bps, w * MB)
            pts.append((kind, ops, t))
    return pts


def test_a_tier_in_the_timings_is_recovered_whatever_each_kinds_speed() -> None:
    fit = fit_tier(_points(8.0, 3.0, {"norm": 20e9, "softmax": 7e9}))
    assert fit is not None and fit["cache_mb"] is not None
    assert fit["cache_mb"] == pytest.approx(8.0, rel=0.1)
    assert fit["ratio"] == pytest.approx(3.0, rel=0.1)
    assert fit["rms_rel_err"] < 0.03


def test_no_tier_is_invented_where_time_grows_with_the_bytes() -> None:
    # two kinds at very different speeds, each linear in its bytes, with 3% scatter
    pts = _points(None, 1.0, {"add": 90e9, "gelu": 15e9})
    wobble = [1.03, 0.97, 1.0, 1.02, 0.98]
    pts = [(k, ops, t * wobble[i % 5]) for i, (k, ops, t) in enumerate(pts)]
    fit = fit_tier(pts)
    assert fit is not None
    assert fit["cache_mb"] is None and fit["ratio"] == 1.0


def test_too_few_sizes_give_no_fit() -> None:
    pts = _points(None, 1.0, {"add": 90e9})
    assert fit_tier(pts[:1]) is None
    assert fit_tier([]) is None


def test_a_kind_timed_at_one_size_is_left_out_not_the_fit() -> None:
    pts = _points(8.0, 3.0, {"norm": 20e9, "softmax": 7e9})
    lone = [("gelu", [(4 * MB, 2 * MB)], 1e-3)]
    fit = fit_tier(pts + lone)
    assert fit is not None and fit["kinds"] == ["norm", "softmax"]
    assert fit["cache_mb"] == pytest.approx(8.0, rel=0.1)


def test_kernels_that_are_all_fixed_cost_have_no_say() -> None:
    # a GPU's small kernels: ~150 µs whatever their bytes (launch and framework overhead)
    pts = [
        (k, ops, 150e-6 * (1 + 0.01 * i))
        for i, (k, ops, _) in enumerate(_points(None, 1, {"a": 1e9, "b": 2e9}))
    ]
    assert fit_tier(pts) is None


def test_no_say_where_no_tier_could_be_tested() -> None:
    # every working set within a factor of two: no size has timings wholly on both sides
    pts = [
        (kind, [(2 * w * MB, w * MB)], 2 * w * MB / bw)
        for kind, bw in (("norm", 20e9), ("softmax", 7e9))
        for w in (4.0, 5.0, 6.0, 7.0)
    ]
    assert fit_tier(pts) is None


def test_a_fit_this_scattered_is_noise_not_a_tier() -> None:
    pts = _points(None, 1.0, {"add": 90e9, "gelu": 15e9})
    wild = [2.0, 0.5, 1.0, 1.8, 0.6]
    assert fit_tier([(k, ops, t * wild[i % 5]) for i, (k, ops, t) in enumerate(pts)]) is None


def _probe_with_scaled_ops(cache_mb: float | None, ratio: float, op_s: float = 0.0) -> dict:
    """A probe whose job-op timings (at the job's tokens and the multiples the probe runs)
    follow the simulator's own byte counts on a tier of the given shape."""
    from calibrate.probe_job_ops import TOKEN_SCALES
    from calibrate.scenario import inline_job_scenario
    from calibrate.step_fits import FWD_BWD, JOB_OP_OF
    from simulator.config.loading import resolve_dict
    from simulator.workload.ops import backward_op, head_ops, layer_ops

    model = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}
    rs = resolve_dict(inline_job_scenario(model))
    mem = 10e9
    per_key = {}
    for op in layer_ops(rs) + head_ops(rs):
        key = JOB_OP_OF.get(op.name)
        if op.kind == "memory" and key and key not in per_key:
            per_key[key] = [op, backward_op(op)] if key in FWD_BWD else [op]

    def t(key: str, s: float) -> float:
        cache = (cache_mb or 0.0) * MB
        return sum(
            tiered_seconds(o.bytes * s, mem, cache, ratio * mem, (o.footprint or o.bytes) * s)
            for o in per_key[key]
        ) + op_s * len(per_key[key])

    ops = {k: {"op": k, "time_s": t(k, 1.0)} for k in per_key}
    scaled = [
        {"key": k, "op": k, "scale": s, "time_s": t(k, s)} for s in TOKEN_SCALES for k in per_key
    ]
    return {"job_ops": ops, "job_ops_scaled": scaled, "train": {"model": model}}


def test_the_job_kernels_tier_is_read_back_from_a_probe() -> None:
    flat = job_tier_fit(_probe_with_scaled_ops(None, 1.0), 0.0)
    assert flat is not None and flat["cache_mb"] is None
    assert "no cache tier fits better" in flat["what"]
    tiered = job_tier_fit(_probe_with_scaled_ops(4.0, 4.0), 0.0)
    assert tiered is not None and tiered["cache_mb"] == pytest.approx(4.0, rel=0.15)
    assert tiered["ratio"] == pytest.approx(4.0, rel=0.15)
    # a probe from before the multiples were timed: the copies' tier stands
    old = _probe_with_scaled_ops(None, 1.0)
    del old["job_ops_scaled"]
    assert job_tier_fit(old, 0.0) is None


def _bundled_probe() -> dict:
    return h100_probe_two_ranks()


def test_calibrate_takes_the_kernels_flat_tier_over_the_copies_cache() -> None:
    from calibrate.fit import calibrate

    probe = _bundled_probe()
    # copies that show a 40 MB cache three times as fast as a 2 TB/s memory (plus the
    # probe's per-operation overhead, which the fit takes off)
    op_s = probe["op_overhead"]["time_s"]
    probe["memory"] = [
        {"kind": "copy", "bytes": w / 2, "bytes_moved": w, "time_s": t, "gbps": w / t / 1e9}
        for w in (2**k * 1e6 for k in range(3, 13))
        for t in [tiered_seconds(w, 2e12, 40e6, 6e12) + op_s]
    ]
    before = calibrate(copy.deepcopy(probe), "p.json", "zz").gpu
    assert before["cache_mb"]["value"] == pytest.approx(40, rel=0.15)  # the copies' tier
    probe.update(_probe_with_scaled_ops(None, 1.0, op_s), train=probe["train"])
    after = calibrate(probe, "p.json", "zz").gpu
    assert "cache_mb" not in after
    assert "token counts" not in before["efficiency"]["memory_bandwidth"]["source"]
    assert "token counts" in after["efficiency"]["memory_bandwidth"]["source"]
    assert "cache tier" in after["memory_bandwidth_gbps"]["source"]  # the copies' bandwidth


def test_a_damaged_scaled_timing_is_a_user_error(tmp_path: Path) -> None:
    from calibrate.probe_file import load_probe

    probe = _bundled_probe()
    probe["job_ops_scaled"] = _probe_with_scaled_ops(None, 1.0)["job_ops_scaled"]
    probe["job_ops_scaled"][3]["time_s"] = -1.0
    f = tmp_path / "p.json"
    f.write_text(json.dumps(probe))
    with pytest.raises(UserError) as e:
        load_probe(str(f))
    assert "job_ops_scaled[3].time_s" in str(e.value.path)


def test_a_scaled_timing_without_its_scale_is_a_user_error(tmp_path: Path) -> None:
    from calibrate.probe_file import load_probe

    probe = _bundled_probe()
    probe["job_ops_scaled"] = _probe_with_scaled_ops(None, 1.0)["job_ops_scaled"]
    del probe["job_ops_scaled"][0]["scale"]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(probe))
    with pytest.raises(UserError) as e:
        load_probe(str(f))
    assert "job_ops_scaled[0].scale" in str(e.value.path)
