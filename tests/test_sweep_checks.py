"""Sweeps that must not answer wrongly: specs whose axes contradict each other or the automatic
plans are refused, what decides a point's rows (profiles too) is in its key, and the answers
compare points on a per-token basis when there is no token budget. (Output files and resuming:
test_sweep_files.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.errors import UserError
from simulator.sweep.answers import best
from simulator.sweep.plans import evaluate_point
from simulator.sweep.run import run_sweep
from simulator.sweep.spec import load_spec, points

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _write(tmp: Path, name: str = "spec.yaml", **spec: Any) -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump({"name": "t", "base": str(BASE), **spec}))
    return p


def _run(spec_path: Path, out: Path) -> list[dict[str, Any]]:
    spec, base, _ = load_spec(spec_path)
    return run_sweep(spec, base, points(spec), out, executor="serial")


@pytest.mark.parametrize(
    ("axes", "parallelism", "says"),
    [
        ([{"training.global_batch": [64, 64, 32]}], {}, "repeats the value 64"),
        (
            [{"training.global_batch": [64, 32]}, {"b": [{"training.global_batch": 16}]}],
            {},
            "both set 'training.global_batch'",
        ),
        ([{"cluster": [{"cluster.nodes": 2}]}, {"cluster.nodes": [1, 4]}], {}, "both set"),
        ([{"parallelism.tp": [2, 8]}], {"tp": "auto"}, "parallelism.tp: auto chooses"),
        ([{"parallelism.dp": [1, 2]}], {"pp": "auto"}, "parallelism.pp: auto chooses"),
        (
            [{"offer": [{"cluster.pricing.profile": "aws-p5-h100", "tier": "spot"}]}],
            {},
            "sets 'tier'",
        ),
        ([{"offer": ["aws-p5-h100", "own-dgx-h100"]}], {}, "is not a scenario field"),
    ],
)
def test_contradictory_specs_are_refused(
    tmp_path: Path, axes: list[Any], parallelism: dict[str, Any], says: str
) -> None:
    spec = _write(tmp_path, axes=axes, parallelism=parallelism)
    with pytest.raises(UserError) as exc:
        load_spec(spec)
    assert says in exc.value.message and exc.value.file == str(spec)
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_a_field_axis_may_take_whole_mappings() -> None:
    """An option of a field-path axis that is a mapping is that field's value."""
    from simulator.sweep.spec import _options

    _, opts = _options({"model": [{"name": "m", "layers": 2, "hidden": 64, "heads": 2}]})
    assert opts == [{"model": {"name": "m", "layers": 2, "hidden": 64, "heads": 2}}]


def test_a_base_without_sequence_parallelism_keeps_it_off(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE.read_text())
    data["parallelism"] = {**(data.get("parallelism") or {}), "sequence_parallel": False}
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _write(
        tmp_path, base=str(base), axes=[{"cluster.nodes": [1]}], parallelism={"tp": "auto"}
    )
    rows = _run(spec, tmp_path / "o.csv")
    assert rows and all(r["sequence_parallel"] in (False, "False") for r in rows)


def test_a_value_that_is_not_a_whole_number_is_a_failed_point() -> None:
    spec_data = {"name": "t", "base": str(BASE), "axes": [{"cluster.nodes": [1, "two"]}]}
    from simulator.config.loading import read_yaml
    from simulator.sweep.spec import SweepSpec

    spec = SweepSpec.model_validate({**spec_data, "parallelism": {"tp": "auto"}})
    pts = points(spec)
    rows = evaluate_point("t", read_yaml(BASE), pts[1], spec.auto(), "fastest")
    assert rows[0]["status"].startswith("invalid:") and "whole numbers" in rows[0]["status"]


def test_without_a_token_budget_time_is_per_token() -> None:
    """A bigger batch has a longer step but more tokens per second: it is the faster plan."""
    small = {"point": 0, "status": "ok", "step_time_s": 1.0, "tokens_per_s": 1000.0, "gpus": 8}
    big = {"point": 1, "status": "ok", "step_time_s": 1.9, "tokens_per_s": 1100.0, "gpus": 8}
    chosen, _ = best([small, big], "time")
    assert chosen is big


def test_unpriced_rows_are_neither_rented_nor_owned() -> None:
    row = {"point": 0, "status": "ok", "step_time_s": 1.0, "tokens_per_s": 1.0, "gpus": 8}
    for own in ("rent", "own"):
        chosen, removed = best([{**row, "tier": ""}], "time", ownership=own)  # type: ignore[arg-type]
        assert chosen is None and removed["ownership"] == 1


def test_constraints_need_best_and_cost_needs_prices(tmp_path: Path) -> None:
    spec = _write(tmp_path, axes=[{"training.global_batch": [32]}])
    out = str(tmp_path / "o.csv")
    res = run_cli("sweep", str(spec), "--out", out, "--deadline-days", "3")
    assert res.returncode == 2 and "--best" in res.stderr
    res = run_cli("sweep", str(spec), "--out", out, "--best", "time", "--deadline-days", "0")
    assert res.returncode == 2 and "positive" in res.stderr
    data = yaml.safe_load(BASE.read_text())
    data["cluster"].pop("pricing", None)
    base = tmp_path / "unpriced.yaml"
    base.write_text(yaml.safe_dump(data))
    unpriced = _write(tmp_path, "u.yaml", base=str(base), axes=[{"training.global_batch": [32]}])
    res = run_cli("sweep", str(unpriced), "--out", str(tmp_path / "u.csv"), "--best", "cost")
    assert res.returncode == 2 and "needs prices" in res.stderr
    assert not (tmp_path / "u.csv").exists()  # refused before the run


def test_unmet_constraints_show_what_the_sweep_can_do(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE.read_text())
    data["run"] = {"tokens": 1e9}
    base = tmp_path / "b.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _write(tmp_path, base=str(base), axes=[{"training.global_batch": [32, 64]}])
    out = str(tmp_path / "o.csv")
    res = run_cli("sweep", str(spec), "--out", out, "--best", "time", "--deadline-days", "1e-6")
    assert res.returncode == 1, res.stderr  # nothing met them: a script can gate on it
    assert "no layout meets the constraints" in res.stdout
    assert "fastest without them" in res.stdout and "cheapest without them" in res.stdout
    # A deadline with no token budget cannot be judged: said so, exit 2.
    data.pop("run")
    base2 = tmp_path / "b2.yaml"
    base2.write_text(yaml.safe_dump(data))
    spec2 = _write(tmp_path, "s2.yaml", base=str(base2), axes=[{"training.global_batch": [32]}])
    res = run_cli("sweep", str(spec2), "--out", out, "--best", "time", "--deadline-days", "3")
    assert res.returncode == 2 and "run.tokens" in res.stderr


def test_priced_and_unpriced_points_compare_in_the_same_units(tmp_path: Path) -> None:
    """Time to train comes from the run (GPU failures need no price), so an unpriced point
    is not 'faster' for being measured in seconds per million tokens against days."""
    spec = _write(
        tmp_path,
        axes=[{"offer": [{"cluster.pricing": None}, {"cluster.pricing.tier": "spot"}]}],
    )
    rows = _run(spec, tmp_path / "o.csv")
    assert all(r["time_to_train_days"] not in (None, "") for r in rows)
    unpriced, spot = rows
    assert float(spot["goodput"]) < float(unpriced["goodput"]) <= 1.0
    chosen, _ = best(rows, "time")
    assert chosen is not None and chosen["point"] == unpriced["point"]


def test_a_base_tp_keeps_its_sequence_parallelism(tmp_path: Path) -> None:
    """With TP from the base and only recomputation enumerated, sequence parallelism stays as
    the base has it (unset: off), so a plan that needs it is not called fitting."""
    data = yaml.safe_load((REPO / "scenarios" / "llama3-70b-64xh100.yaml").read_text())
    data["parallelism"].pop("sequence_parallel")
    base = tmp_path / "b.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _write(
        tmp_path, base=str(base), axes=[{"cluster.nodes": [8]}], parallelism={"recompute": "auto"}
    )
    rows = _run(spec, tmp_path / "o.csv")
    assert all(r.get("sequence_parallel") in (None, "", False, "False") for r in rows)


def test_axes_the_plans_keep_are_allowed_and_equal_numbers_are_one_value(tmp_path: Path) -> None:
    load_spec(
        _write(
            tmp_path,
            axes=[{"parallelism.sequence_parallel": [True, False]}],
            parallelism={"tp": "auto"},
        )
    )
    with pytest.raises(UserError, match="repeats"):
        load_spec(_write(tmp_path, "d.yaml", axes=[{"run.tokens": [1.0e11, 100000000000]}]))


def test_a_bundled_sweep_runs_by_name(tmp_path: Path) -> None:
    from simulator.scenario_paths import find_sweep

    assert find_sweep("gpu-generations").name == "gpu-generations.yaml"
    assert find_sweep("gpu-generations.yaml").is_file()
    res = run_cli("sweep", "no-such-sweep", "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "no-such-sweep" in res.stderr


def test_a_spec_may_name_a_bundled_scenario_as_its_base(tmp_path: Path) -> None:
    """``base: llama3-8b-8xh100``, as simulate takes it (it was 'not found'); a file of that
    name beside the spec comes first."""
    spec, base, path = load_spec(_write(tmp_path, base="llama3-8b-8xh100"))
    assert path == BASE.resolve() and base == yaml.safe_load(BASE.read_text())
    assert load_spec(_write(tmp_path, base="llama3-8b-8xh100.yml"))[2] == BASE.resolve()
    (tmp_path / "llama3-8b-8xh100").write_text(yaml.safe_dump({"name": "mine"}))
    with pytest.raises(UserError) as err:  # the file beside it, read as the scenario it is not
        load_spec(_write(tmp_path, base="llama3-8b-8xh100"))
    assert str(tmp_path / "llama3-8b-8xh100") in str(err.value)


def test_an_unknown_axis_path_is_refused_before_any_output_is_touched(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    good = _write(tmp_path, "good.yaml", axes=[{"cluster.nodes": [1]}])
    assert run_cli("sweep", str(good), "--out", str(out)).returncode == 0
    before = out.read_bytes()
    bad = _write(tmp_path, "bad.yaml", axes=[{"cluster.nodez": [1, 2]}])
    res = run_cli("sweep", str(bad), "--out", str(out))
    assert res.returncode == 2 and "axes[0]" in res.stderr and "did you mean 'nodes'" in res.stderr
    assert out.read_bytes() == before


def test_points_of_other_token_budgets_compare_per_token() -> None:
    """A 10x smaller budget is not a 10x faster plan: rows whose budgets differ are compared
    per million tokens; an unpriced row never wins a tie on cost."""
    from simulator.sweep.answers import pareto, run_basis

    def row(point: int, tokens: float, tps: float, usd_m: float | None) -> dict[str, Any]:
        days = tokens / tps / 86400
        return {
            "point": point,
            "status": "ok",
            "gpus": 8,
            "tokens_per_s": tps,
            "goodput": 1.0,
            "time_to_train_days": days,
            "usd_total": None if usd_m is None else usd_m * tokens / 1e6,
            "usd_per_million_tokens": usd_m,
        }

    fast_big = row(0, 1e12, 2e6, 2.0)  # twice the throughput, on a 10x budget
    slow_small = row(1, 1e11, 1e6, 3.0)
    assert not run_basis([fast_big, slow_small])
    assert run_basis([fast_big, row(2, 1e12, 1e6, 3.0)])
    chosen, _ = best([fast_big, slow_small], "time")
    assert chosen is not None and chosen["point"] == 0
    assert pareto([fast_big, slow_small]) == [fast_big]
    unpriced = row(3, 1e12, 2e6, None)
    chosen, _ = best([unpriced, fast_big], "time")
    assert chosen is not None and chosen["point"] == 0


def test_a_price_objective_without_any_price_is_refused_before_the_run(tmp_path: Path) -> None:
    base = yaml.safe_load(BASE.read_text())
    base.get("cluster", {}).pop("pricing", None)
    b = tmp_path / "base.yaml"
    b.write_text(yaml.safe_dump(base))
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "t", "base": str(b)}))
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out), "--best", "cost")
    assert res.returncode == 2 and "needs prices" in res.stderr
    assert not out.exists()


def test_a_scenario_and_a_sweep_spec_are_told_apart() -> None:
    res = run_cli("sweep", str(BASE), "--out", "/tmp/never-written.csv")
    assert res.returncode == 2 and "not a sweep spec" in res.stderr
    spec = REPO / "scenarios" / "sweeps" / "gpu-generations.yaml"
    res = run_cli("compare", str(spec), str(BASE))
    assert res.returncode == 2 and "sweep spec" in res.stderr and "not a scenario" in res.stderr


def test_an_unpriced_sweep_says_why_it_has_no_front(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE.read_text())
    data["cluster"].pop("pricing", None)
    base = tmp_path / "unpriced.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _write(tmp_path, "u.yaml", base=str(base), axes=[{"training.global_batch": [32]}])
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "u.csv"))
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "no Pareto front: no point is priced" in text


def test_a_budget_met_by_the_runs_charge_but_not_by_its_commitment_says_so(
    tmp_path: Path,
) -> None:
    """--budget-usd compares what the run is charged; an owned cluster that meets it still
    commits its purchase price up front, and the answer says so."""
    data = yaml.safe_load(BASE.read_text())
    data["cluster"]["pricing"] = {"profile": "own-dgx-h100"}
    data["run"] = {"tokens": 1e9}
    base = tmp_path / "owned.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _write(tmp_path, "o.yaml", base=str(base), axes=[{"training.global_batch": [32]}])
    out = str(tmp_path / "o.csv")
    res = run_cli("sweep", str(spec), "--out", out, "--best", "time", "--budget-usd", "1000")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "commits $" in text and "above the budget" in text


@pytest.mark.parametrize("flag", ["--own", "--rent"])
def test_owned_or_rented_without_any_price_is_refused_before_the_run(
    tmp_path: Path, flag: str
) -> None:
    """Owned or rented is said by a price profile: with none, --own/--rent is bad input (2),
    not a constraint no layout met (1)."""
    base = yaml.safe_load(BASE.read_text())
    base["cluster"].pop("pricing", None)
    b = tmp_path / "base.yaml"
    b.write_text(yaml.safe_dump(base))
    spec = _write(tmp_path, base=str(b), axes=[{"training.global_batch": [32]}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out), "--best", "time", flag)
    assert res.returncode == 2 and f"{flag} needs prices" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize("values", [[-5, 600], ["500", 600], [600, 1e9]])
def test_a_figure_an_axis_sets_out_of_its_range_is_refused_before_the_run(
    tmp_path: Path, values: list[Any]
) -> None:
    spec = _write(tmp_path, axes=[{"cluster.gpu.power_limit_w": values}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert "axis 'cluster.gpu.power_limit_w'" in res.stderr and "fix or drop" in res.stderr
    assert not out.exists()
