"""validate's statistics and workloads: bootstrap intervals, prediction intervals, verdicts,
the out-of-sample shapes, and what calibrate says about a GEMM curve it cannot trust."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrate.fits import efficiency_quality
from calibrate.intervals import bootstrap_median, prediction_sd, robust_rel_sd, verdict
from calibrate.prediction import drift_reference
from calibrate.step_fits import step_kernels
from calibrate.workloads import NAMES, select, workloads
from simulator.errors import UserError

BASE = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}


def test_bootstrap_interval_covers_the_median_about_as_often_as_it_says() -> None:
    rng = np.random.default_rng(1)
    hits = 0
    trials = 60
    for _ in range(trials):
        runs = [list(rng.normal(100.0, 5.0, 8)) for _ in range(3)]
        lo, hi = bootstrap_median(runs, resamples=300, seed=2)
        assert lo <= np.median(np.concatenate(runs)) <= hi
        hits += lo <= 100.0 <= hi
    assert hits / trials > 0.7  # nominal 90%; a small-sample bootstrap runs a little narrow


def test_bootstrap_interval_widens_when_runs_disagree() -> None:
    rng = np.random.default_rng(3)
    same = [list(rng.normal(100, 2, 8)) for _ in range(3)]
    apart = [list(rng.normal(m, 2, 8)) for m in (80, 100, 120)]
    w_same = np.diff(bootstrap_median(same, resamples=500))[0]
    w_apart = np.diff(bootstrap_median(apart, resamples=500))[0]
    assert w_apart > 3 * w_same


def test_prediction_sd_adds_independent_parts_in_quadrature() -> None:
    assert prediction_sd({"compute": 1.0}, {"compute": 0.1, "comm": 0.5}) == pytest.approx(0.1)
    sd = prediction_sd({"compute": 0.6, "comm": 0.4}, {"compute": 0.1, "comm": 0.2})
    assert sd == pytest.approx(np.hypot(0.06, 0.08))
    assert robust_rel_sd([1.0, 1.0, 1.0]) == 0.0


def test_verdict_within_tolerance_then_overlap_then_fail() -> None:
    assert verdict(0.05, (1.0, 2.0), (5.0, 6.0)) == "within 10%"
    assert verdict(-0.3, (1.0, 2.0), (1.5, 3.0)) == "intervals overlap"
    assert verdict(0.3, (1.0, 2.0), (2.1, 3.0)) == "fail"


def test_out_of_sample_workloads_differ_from_the_probe_job_and_are_valid() -> None:
    wls = workloads(BASE)
    assert [w.name for w in wls] == list(NAMES)
    assert [w.in_sample for w in wls] == [True] + [False] * 4
    by = {w.name: w.cfg for w in wls}
    assert by["probe-job"] == BASE
    assert by["wide"]["hidden"] == 2 * BASE["hidden"]
    assert by["long-seq"]["seq"] == 4 * BASE["seq"]
    assert by["narrow-deep"]["hidden"] < BASE["hidden"] < 4 * by["narrow-deep"]["layers"] * 64
    assert by["comm-heavy"]["batch"] < BASE["batch"]
    for w in wls:
        assert w.cfg["hidden"] % w.cfg["heads"] == 0
        if not w.in_sample:
            assert w.cfg != BASE
    # a larger probe job gives proportionate workloads
    big = {w.name: w.cfg for w in workloads(dict(BASE, hidden=1024, heads=8))}
    assert big["wide"]["hidden"] == 2048 and big["wide"]["hidden"] % big["wide"]["heads"] == 0
    assert [w.name for w in select(wls, ["wide", "probe-job"])] == ["probe-job", "wide"]
    with pytest.raises(UserError, match="unknown workload 'huge'"):
        select(wls, ["huge"])


def test_drift_reference_interpolates_between_alone_and_all_busy() -> None:
    speed = {"check_unit_s": 2.0, "check_alone_unit_s": 1.0, "procs": 3, "unit_s": 9.0}
    assert drift_reference(speed, 3) == 2.0
    assert drift_reference(speed, 1) == 1.0
    assert drift_reference(speed, 2) == pytest.approx(1.5)
    # an older calibration: the speed phase's figures, none for fewer busy processes
    assert drift_reference({"unit_s": 4.0, "procs": 2}, 2) == 4.0
    assert drift_reference({"unit_s": 4.0, "procs": 2}, 1) is None


def test_flat_gemm_throughput_is_explained_not_reported_as_a_bad_fit() -> None:
    F = np.geomspace(1e5, 1e9, 12)
    rng = np.random.default_rng(0)
    eff = 0.8 * (1 + rng.normal(0, 0.03, F.size))
    q = efficiency_quality(F, eff, 0.8, 1.0, r2=0.05)
    assert q["rms_rel_err"] < 0.06 and q["spread"] < 0.1
    assert "nearly flat" in q["note"]
    assert "note" not in efficiency_quality(F, 0.8 * F / (F + 1e6), 0.8, 1e6, r2=0.99)
    few = efficiency_quality(F[:4], eff[:4], 0.8, 1.0, r2=0.1)
    assert "too few" in few["note"]


def test_step_kernels_grows_with_layers() -> None:
    one = step_kernels(dict(BASE, layers=1))
    two = step_kernels(dict(BASE, layers=2))
    assert two > one > 0
    assert (two - one) * 3 == step_kernels(dict(BASE, layers=4)) - one


def test_a_poor_collective_fit_says_why_and_what_to_run() -> None:
    from calibrate.fits import AlphaBeta

    def fit(r2: float, points: int = 9, resolved: bool = True) -> AlphaBeta:
        return AlphaBeta("all_reduce", "intra", 2, 1e-4, 1e-9, r2, 0.4, points, [], resolved)

    assert fit(0.95).note is None
    assert "too few" in (fit(0.5, points=3).note or "")
    assert "--max-bytes" in (fit(0.5, resolved=False).note or "")
    assert "scatter 40%" in (fit(0.5).note or "")
    assert fit(0.5).as_dict()["note"] == fit(0.5).note
    # R² high (the largest sizes fit) but the timings 128% rms off it: flagged too
    wild = AlphaBeta("all_reduce", "intra", 2, 1e-4, 1e-9, 0.97, 1.28, 9, [], True)
    assert "scatter 128%" in (wild.note or "") and "busy" in (wild.note or "")
    few = AlphaBeta("all_reduce", "intra", 2, 1e-4, 1e-9, 0.97, 1.28, 3, [], False)
    assert "scatter 128%" in (few.note or "")  # not "too few" or "latency-dominated"


def test_a_time_budget_that_is_not_positive_is_refused(tmp_path: Path) -> None:
    from conftest import run_cli

    r = run_cli("probe", "--time-budget", "-5", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "--time-budget" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p.json").exists()


def test_scaling_uses_the_models_own_ratio_only_where_one_drift_factor_applies() -> None:
    """With the reference job's one drift factor the predicted scaling is the raw predictions'
    ratio (the reference row's own speed-check drift does not skew it); without it each row
    carries its own run's drift, as the measured ratio does, so the corrected ones compare."""
    from calibrate.validate import _scaling

    def rows(anchored: bool) -> list[dict]:
        one = {"workload": "w", "world_size": 1, "measured_s": 1.0, "predicted_s": 1.0}
        two = {"workload": "w", "world_size": 2, "measured_s": 1.25, "predicted_s": 1.2}
        one["corrected_predicted_s"], two["corrected_predicted_s"] = 0.8, 1.2 * 1.05
        if anchored:
            two["drift_reference"] = "probe-job at 1x1"
        return [one, two]

    a, b = rows(True), rows(False)
    _scaling(a)
    _scaling(b)
    assert a[1]["predicted_scaling"] == pytest.approx(1.0 / 1.2)
    assert b[1]["predicted_scaling"] == pytest.approx(0.8 / 1.26)
    assert a[1]["scaling_gap_points"] == pytest.approx(100 * (1 / 1.2 - 1 / 1.25))


def test_the_in_step_interval_widens_with_the_two_batch_differences() -> None:
    """Where the in-step factor comes from paired steps at two batch sizes, their scatter
    widens the compute part of the prediction's interval."""
    from calibrate.validate import _sigmas

    full = [[0.120, 0.121, 0.119, 0.122, 0.120, 0.121]]
    half = [[0.060, 0.068, 0.055, 0.066, 0.058, 0.064]]
    side = {"compute_fit": {"rms_rel_err": 0.01}, "train": {"compute_step_times_s": full}}
    plain, _ = _sigmas(side)
    side["train"]["compute_half_step_times_s"] = half
    side["compute_fit"]["gemm_weight_bandwidth"] = 0.2
    split, _ = _sigmas(side)
    assert split["compute"] > plain["compute"] > 0


def test_validate_warns_where_its_intervals_make_any_row_pass() -> None:
    """Prediction intervals of ±48% (a calibration whose collective timings scattered 128%)
    pass a -25% row by overlap: the summary says the pass means little."""
    import io

    from rich.console import Console

    from simulator.report.validation import print_validation

    def report(width_pct: float, note: str | None = None) -> str:
        row = {
            "workload": "comm-heavy", "in_sample": False, "nodes": 2, "nproc_per_node": 1,
            "measured_s": 0.10, "measured_interval_s": [0.095, 0.105], "predicted_s": 0.075,
            "error_pct": -25.0, "drift_pct": None, "corrected_predicted_s": 0.075,
            "predicted_interval_s": [0.075 * (1 - width_pct / 100), 0.075 * (1 + width_pct / 100)],
            "corrected_error_pct": -25.0, "measured_scaling": 1.0, "predicted_scaling": 1.0,
            "verdict": "intervals overlap",
        }  # fmt: skip
        rep = {
            "profile": "p", "threads_per_process": 1, "interval_level": 0.9, "rows": [row],
            "repeats": 3, "steps": 4, "drift_work": "w", "prediction_errors": "e",
            "scaling": "weak", "drift_reference_note": note,
            "out_of_sample": {"rows": 1, "passed": 1, "max_abs_corrected_error_pct": 25.0,
                              "max_scaling_gap_points": None,
                              "max_interval_half_width_pct": width_pct},
        }  # fmt: skip
        buf = io.StringIO()
        print_validation(Console(file=buf, width=200), rep)
        return buf.getvalue()

    assert "intervals reach ±48%" in report(48.0)
    assert "intervals reach" not in report(10.0)
    # calibrate's warning that the drift reference moved during the probe is repeated where
    # the corrections that rest on it are shown
    assert "warning: drift reference: it ran +71%" in report(10.0, "it ran +71%")
    assert "drift reference" not in report(10.0)
