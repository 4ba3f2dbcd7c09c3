"""Stragglers in expectation (`run.stragglers: expected`): the order statistic, the engine's
pace and accounting, and the error paths."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from conftest import GPU_80GB, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from test_engine import assert_accounting, scenario, sim

from simulator.config.loading import resolve_dict
from simulator.engine.stragglers import expected_max_normal, pace
from simulator.errors import UserError


def test_expected_max_of_normals_matches_closed_forms() -> None:
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    # E[max of 5] = 1.16296 (tabulated order statistics of the normal, e.g. Harter 1961)
    assert expected_max_normal(5) == pytest.approx(1.16296, abs=1e-5)


def test_expected_max_grows_with_n_and_follows_blom() -> None:
    ns = [2, 4, 8, 64, 1024, 16384, 100_000]
    vals = [expected_max_normal(n) for n in ns]
    assert vals == sorted(vals)
    for n, v in zip(ns[2:], vals[2:], strict=True):
        blom = float(stats.norm.ppf((n - 0.375) / (n + 0.25)))
        assert v == pytest.approx(blom, rel=0.02)


def with_stragglers(data: dict[str, Any], mode: str = "expected", cv: float | None = None):
    d = copy.deepcopy(data)
    d.setdefault("run", {})["stragglers"] = mode
    if cv is not None:
        d["cluster"]["gpu"] = {
            "profile": d["cluster"]["gpu"],
            "speed_cv": {"value": cv, "source": "test"},
        }
    return d


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize(
    "layout",
    [
        dict(nodes=1, gpn=8),
        dict(nodes=2, gpn=8, tp=4),
        dict(nodes=2, gpn=8, tp=2, pp=2, micro_batches=4),
    ],
    ids=["dp8", "tp4-dp4", "tp2-pp2-dp4"],
)
def test_expected_stragglers_stretch_compute_and_book_the_wait(layout: dict, full: bool) -> None:
    base = scenario(**layout)
    off = sim(base, full=full)
    on = sim(with_stragglers(base, cv=0.05), full=full)
    assert_accounting(on)
    gpus = on.metrics.gpus
    f = 1 + 0.05 * expected_max_normal(gpus)
    assert pace(resolve_dict(with_stragglers(base, cv=0.05))) == pytest.approx(f)
    m0, m1 = off.metrics, on.metrics
    # busy time is the mean GPU's: unchanged; the stretch is booked as straggler wait
    assert m1.busy_s == pytest.approx(m0.busy_s, rel=1e-9)
    assert m1.breakdown_s["straggler"] == pytest.approx((f - 1) * m0.busy_s, rel=1e-9)
    assert m0.breakdown_s["straggler"] == 0.0
    assert m1.step_time_s > m0.step_time_s
    # only compute stretches (and what waits on it, such as the pipeline bubble): never more
    # than the whole step at the slowest GPU's pace
    assert m1.step_time_s <= f * m0.step_time_s * (1 + 1e-9)


def test_symmetric_and_full_agree_with_stragglers() -> None:
    data = with_stragglers(scenario(nodes=2, gpn=8, tp=2, pp=2, micro_batches=4), cv=0.03)
    a, b = sim(data), sim(data, full=True)
    assert a.metrics.step_time_s == pytest.approx(b.metrics.step_time_s, rel=1e-9)
    assert a.metrics.breakdown_s["straggler"] == pytest.approx(
        b.metrics.breakdown_s["straggler"], rel=1e-9
    )


def test_one_gpu_never_waits_for_another() -> None:
    data = with_stragglers(scenario(nodes=1, gpn=1), cv=0.2)
    on, off = sim(data), sim(scenario(nodes=1, gpn=1))
    assert on.metrics.step_time_s == off.metrics.step_time_s
    assert on.metrics.breakdown_s["straggler"] == 0.0


@settings(max_examples=20, deadline=None)
@given(st.floats(0.0, 0.2), st.floats(0.0, 0.2))
def test_more_speed_variation_is_never_faster(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    base = scenario(nodes=1, gpn=8, tp=2)
    t_lo = sim(with_stragglers(base, cv=lo)).metrics.step_time_s
    t_hi = sim(with_stragglers(base, cv=hi)).metrics.step_time_s
    assert t_hi >= t_lo * (1 - 1e-12)


def test_auto_is_the_default_and_yaml_off_reads_as_off() -> None:
    """Unset, a scenario waits for the expected slowest GPU where its GPU profile states a
    speed variation (every catalogue GPU does) and runs at the profile's speed where it does
    not; a bare YAML ``off`` (read as false) turns it off."""
    base = scenario(nodes=1, gpn=8)
    del base["run"]
    rs = resolve_dict(base)
    assert rs.run.stragglers == "auto" and rs.gpu.speed_cv is not None
    assert pace(rs) == pace(resolve_dict(with_stragglers(base))) > 1.0
    bare = copy.deepcopy(base)
    bare["cluster"]["gpu"] = copy.deepcopy(GPU_80GB)  # no speed_cv
    assert resolve_dict(bare).gpu.speed_cv is None and pace(resolve_dict(bare)) == 1.0
    assert resolve_dict(with_stragglers(base, mode=False)).run.stragglers == "off"  # type: ignore[arg-type]
    assert pace(resolve_dict(with_stragglers(base, mode="off"))) == 1.0


def test_stragglers_need_a_speed_cv() -> None:
    data = scenario(nodes=1, gpn=8)
    data["cluster"]["gpu"] = copy.deepcopy(GPU_80GB)
    data["run"] = {"stragglers": "expected"}
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert exc.value.path == "run.stragglers"
    assert "speed_cv" in str(exc.value) and "run.stragglers" not in exc.value.message


def test_cli_stragglers_flag_and_bad_value(tmp_path) -> None:
    ok = run_cli("simulate", "scenarios/llama3-8b-8xh100.yaml", "--set", "run.stragglers=expected")
    assert ok.returncode == 0, ok.stderr
    assert "waiting for the slowest GPU" in ok.stdout
    bad = run_cli("simulate", "scenarios/llama3-8b-8xh100.yaml", "--set", "run.stragglers=maybe")
    assert bad.returncode == 2
    assert "run.stragglers" in bad.stderr and "Traceback" not in bad.stderr
    # YAML reads an unquoted `on` as true: the hint lists what to write instead
    on = run_cli("simulate", "scenarios/llama3-8b-8xh100.yaml", "--set", "run.stragglers=on")
    assert on.returncode == 2 and "write one of 'auto', 'off' or 'expected'" in on.stderr


def test_optimizer_bandwidth_sets_the_optimizer_step_time() -> None:
    """efficiency.optimizer_bandwidth (unset: memory_bandwidth) times the optimizer step:
    half the fraction, twice the time (less the one launch overhead)."""
    base = scenario(nodes=1, gpn=8)
    base["cluster"]["gpu"] = copy.deepcopy(GPU_80GB)
    t0 = sim(base).metrics.breakdown_s["optimizer"]
    launch = GPU_80GB["efficiency"]["kernel_launch_us"]["value"] * 1e-6
    half = copy.deepcopy(base)
    mem = GPU_80GB["efficiency"]["memory_bandwidth"]["value"]
    half["cluster"]["gpu"]["efficiency"]["optimizer_bandwidth"] = {
        "value": mem / 2,
        "source": "test",
    }
    t1 = sim(half).metrics.breakdown_s["optimizer"]
    assert t1 - launch == pytest.approx(2 * (t0 - launch), rel=1e-9)


def test_the_json_report_states_the_pace() -> None:
    """A reader of the JSON sees the compute multiplier the step ran at: the expected slowest
    of 8 GPUs at the profile's speed_cv by default, 1 with stragglers off."""
    import json

    on = run_cli("simulate", "llama3-8b-8xh100", "--format", "json")
    off = run_cli("simulate", "llama3-8b-8xh100", "--format", "json", "--set", "run.stragglers=off")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    cv = resolve_dict(scenario(nodes=1, gpn=8)).gpu.speed_cv
    assert cv is not None
    want = 1 + cv.value * expected_max_normal(8)
    assert json.loads(on.stdout)["straggler_pace"] == pytest.approx(want)
    assert json.loads(off.stdout)["straggler_pace"] == 1.0
