"""Sweeps: the Pareto front and constraints on hand-made rows, automatic plans that always pass
`check`, resume after an interruption, the same rows from every executor (a real local Ray),
plots, and `compare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.check import check
from simulator.config.loading import read_yaml, resolve_dict
from simulator.sweep.answers import best, pareto
from simulator.sweep.run import run_sweep
from simulator.sweep.spec import load_spec, points

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _spec(tmp: Path, **over: Any) -> Path:
    spec = {
        "name": "t",
        "base": str(BASE),
        "axes": [
            {"cluster.gpus_per_node": [4, 8]},
            {
                "offer": [
                    {"cluster.pricing.profile": "aws-p5-h100", "cluster.pricing.tier": "on_demand"},
                    {"cluster.pricing.profile": "aws-p5-h100", "cluster.pricing.tier": "spot"},
                ]
            },
        ],
        "parallelism": {"tp": "auto", "micro_batch": "auto"},
        **over,
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def _run(spec_path: Path, out: Path, executor: str = "serial") -> list[dict[str, Any]]:
    spec, base, _ = load_spec(spec_path)
    return run_sweep(spec, base, points(spec), out, executor=executor)


def _row(point: int, days: float, usd: float, **kw: Any) -> dict[str, Any]:
    return {
        "point": point,
        "status": "ok",
        "time_to_train_days": days,
        "usd_total": usd,
        "gpus": kw.get("gpus", 8),
        "tier": kw.get("tier", "on_demand"),
        "usd_per_million_tokens": usd / 1000,
        "step_time_s": days,
    }


def test_pareto_front_is_complete_and_non_dominated() -> None:
    rows = [
        _row(0, 10, 100),
        _row(1, 5, 200),
        _row(2, 20, 50),
        _row(3, 12, 120),  # dominated by 0
        _row(4, 5, 250),  # dominated by 1
        _row(5, 30, 50),  # dominated by 2 (same cost, slower)
        {"point": 6, "status": "no plan fits in memory"},
    ]
    front = pareto(rows)
    assert [r["point"] for r in front] == [1, 0, 2]
    for r in front:  # nothing beats a front row on both axes
        assert not any(
            o["time_to_train_days"] <= r["time_to_train_days"]
            and o["usd_total"] <= r["usd_total"]
            and (o["time_to_train_days"], o["usd_total"])
            != (r["time_to_train_days"], r["usd_total"])
            for o in rows
            if o.get("status") == "ok"
        )
    for r in rows:  # every row off the front is beaten by a front row
        if r.get("status") == "ok" and r not in front:
            assert any(
                f["time_to_train_days"] <= r["time_to_train_days"]
                and f["usd_total"] <= r["usd_total"]
                for f in front
            )


def test_pareto_front_of_owned_or_rented_clusters_only() -> None:
    rows = [_row(0, 10, 100), _row(1, 20, 50, tier="ownership"), _row(2, 30, 80, tier="spot")]
    assert [r["point"] for r in pareto(rows)] == [0, 1]
    assert [r["point"] for r in pareto(rows, "rent")] == [0, 2]
    assert [r["point"] for r in pareto(rows, "own")] == [1]


def test_best_respects_every_constraint() -> None:
    rows = [_row(0, 10, 100), _row(1, 5, 200, gpus=64), _row(2, 20, 50, tier="ownership")]
    assert best(rows, "time")[0]["point"] == 1
    assert best(rows, "cost")[0]["point"] == 2
    assert best(rows, "cost", ownership="rent")[0]["point"] == 0
    assert best(rows, "time", max_gpus=8)[0]["point"] == 0
    assert best(rows, "cost", deadline_days=12)[0]["point"] == 0
    chosen, removed = best(rows, "time", deadline_days=1)
    assert chosen is None and removed["deadline"] == 3


def test_auto_plans_always_pass_check(tmp_path: Path) -> None:
    rows = _run(_spec(tmp_path, keep="all"), tmp_path / "all.csv")
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) > 8
    base = read_yaml(BASE)
    for r in ok:
        data = dict(base)
        data["cluster"] = {**base["cluster"], "gpus_per_node": r["gpus_per_node"]}
        data["training"] = {**base["training"], "micro_batch": r["micro_batch"]}
        data["parallelism"] = {
            **base["parallelism"],
            "tp": r["tp"],
            "sequence_parallel": r["tp"] > 1,
        }
        assert check(resolve_dict(data)).fits
    # Plans that do not fit were dropped and counted, not silently lost.
    assert all(int(r["plans_dropped_memory"]) >= 0 for r in ok)


def test_interrupted_then_resumed_sweep_gives_the_same_file(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    whole = tmp_path / "whole.csv"
    _run(spec, whole)
    lines = whole.read_text().splitlines(keepends=True)
    assert len(lines) == 5  # header + 4 points
    part = tmp_path / "part.csv"
    part.write_text("".join(lines[:3]) + lines[3][:20])  # two points and a torn line
    _run(spec, part)
    assert part.read_text() == whole.read_text()


def test_a_damaged_row_is_evaluated_again_on_resume(tmp_path: Path) -> None:
    """Text in a number column, a negative or NaN figure, a blanked figure, a deleted column,
    a row that is no mapping: the point is simulated again and the final file is the
    undamaged one."""
    import csv

    spec = _spec(tmp_path)
    whole = tmp_path / "whole.csv"
    _run(spec, whole)
    rows = list(csv.DictReader(whole.open()))
    for col, bad in (("point_rows", "abc"), ("mfu", "abc"), ("time_to_train_days", "-3")) + (
        ("usd_total", "nan"),
        ("step_time_s", ""),
        ("usd_per_million_tokens", ""),
    ):
        hurt = tmp_path / f"{col}.csv"
        damaged = [dict(r) for r in rows]
        damaged[1][col] = bad
        with hurt.open("w") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(damaged)
        _run(spec, hurt)
        assert hurt.read_text() == whole.read_text(), col
    cut = tmp_path / "cut.csv"
    kept = [c for c in rows[0] if c != "mfu"]
    with cut.open("w") as fh:
        w = csv.DictWriter(fh, fieldnames=kept, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    _run(spec, cut)
    assert cut.read_text() == whole.read_text()
    lines = tmp_path / "rows.jsonl"
    _run(spec, lines)
    good = lines.read_text()
    lines.write_text(good + "5\n[1, 2]\n")
    _run(spec, lines)
    assert lines.read_text() == good


def _finished_then_another(tmp_path: Path) -> tuple[Path, str, Any, dict[str, Any]]:
    """A finished sweep's file, its text, and another sweep (spec, base) none of whose points
    its rows match."""
    out = tmp_path / "out.csv"
    _run(_spec(tmp_path), out)
    other = tmp_path / "other"
    other.mkdir()
    spec, base, _ = load_spec(_spec(other, keep="all"))
    return out, out.read_text(), spec, base


def test_replace_keeps_the_old_file_until_the_new_run_finishes(tmp_path: Path) -> None:
    from simulator.sweep.run import replaced_copy

    out, before, spec, base = _finished_then_another(tmp_path)

    def stop(done: int, total: int) -> None:
        if done >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, base, points(spec), out, executor="serial", replace=True, on_point=stop)
    assert replaced_copy(out).read_text() == before  # interrupted: nothing of it is lost
    run_sweep(spec, base, points(spec), out, executor="serial", replace=True)
    assert not replaced_copy(out).exists()
    assert out.read_text() != before


def test_replace_never_overwrites_or_strands_an_existing_replaced_copy(tmp_path: Path) -> None:
    """``OUT.replaced`` already there (a file of the user's, a folder, or the copy a second
    --replace run would leave stranded beside rows it drops): refused before anything runs,
    every file as it was."""
    from simulator.errors import UserError
    from simulator.sweep.run import replaced_copy

    out, before, spec, base = _finished_then_another(tmp_path)
    for make in (lambda p: p.write_text("user data\n"), lambda p: p.mkdir()):
        kept = replaced_copy(out)
        make(kept)
        with pytest.raises(UserError) as exc:
            run_sweep(spec, base, points(spec), out, executor="serial", replace=True)
        assert "already exists" in exc.value.message and exc.value.path == "--out"
        assert out.read_text() == before
        if kept.is_dir():
            kept.rmdir()
        else:
            assert kept.read_text() == "user data\n"
            kept.unlink()


def test_resume_reuses_no_row_of_another_base_or_settings(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(BASE.read_text())
    spec = _spec(tmp_path, base=str(base), axes=[{"cluster.gpus_per_node": [4, 8]}])
    out = tmp_path / "r.csv"
    first = _run(spec, out)
    # The base scenario changes: every point is evaluated again, nothing stale is kept.
    data = read_yaml(base)
    data["training"]["global_batch"] *= 2
    base.write_text(yaml.safe_dump(data))
    stale: list[int] = []
    s, b, _ = load_spec(spec)
    second = run_sweep(s, b, points(s), out, executor="serial", on_stale=stale.append)
    assert stale == [len(first)]
    assert {r["point_key"] for r in first}.isdisjoint(r["point_key"] for r in second)
    assert [r["step_time_s"] for r in second] != [r["step_time_s"] for r in first]
    fresh = tmp_path / "fresh.csv"
    _run(spec, fresh)
    assert out.read_text() == fresh.read_text()
    # Keeping every plan instead of the fastest is another setting too.
    stale.clear()
    s_all = s.model_copy(update={"keep": "all"})
    rows = run_sweep(s_all, b, points(s_all), out, executor="serial", on_stale=stale.append)
    assert stale and len(rows) > len(second)


@pytest.mark.parametrize("order", [["off", "expected"], ["expected", "off"]])
def test_points_that_differ_only_in_run_settings_are_simulated_apart(
    tmp_path: Path, order: list[str]
) -> None:
    """The per-process cache leaves out pricing and the token budget only: the stragglers
    setting changes the step, whichever point runs first."""
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    spec = _spec(tmp_path, axes=[{"run.stragglers": order}], parallelism={})
    rows = _run(spec, tmp_path / f"s-{order[0]}.csv")
    by = {r["axis_run.stragglers"]: r["step_time_s"] for r in rows}
    for mode in order:
        rs = load_scenario(BASE, [f"run.stragglers={mode}"])
        want = simulate(rs, scaling=False).metrics.step_time_s
        assert by[mode] == pytest.approx(want, rel=1e-9)
    assert by["expected"] > by["off"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_other_formats_hold_the_same_rows(tmp_path: Path, suffix: str) -> None:
    spec = _spec(tmp_path)
    rows_csv = _run(spec, tmp_path / "r.csv")
    out = tmp_path / f"r{suffix}"
    _run(spec, out)
    if suffix == ".jsonl":
        import json

        got = [json.loads(x) for x in out.read_text().splitlines()]
    else:
        import pyarrow.parquet as pq

        got = pq.read_table(out).to_pylist()
    assert [g["step_time_s"] for g in got] == [r["step_time_s"] for r in rows_csv]


def test_ray_and_local_pool_give_identical_rows(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray

    spec = _spec(tmp_path)
    _run(spec, tmp_path / "serial.csv", "serial")
    _run(spec, tmp_path / "pool.csv", "local")
    try:
        _run(spec, tmp_path / "ray.csv", "ray")
    finally:
        ray.shutdown()
    ref = (tmp_path / "serial.csv").read_text()
    assert (tmp_path / "pool.csv").read_text() == ref
    assert (tmp_path / "ray.csv").read_text() == ref


def test_sweep_command_writes_rows_plots_and_best(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    res = run_cli(
        "sweep",
        str(spec),
        "--out",
        str(tmp_path / "o.csv"),
        "--plot",
        str(tmp_path / "png"),
        "--best",
        "cost",
        "--executor",
        "serial",
    )
    assert res.returncode == 0, res.stderr
    assert "Pareto front" in res.stdout and "best (cost)" in res.stdout
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["t-cost-time.png", "t-idle.png", "t-scaling.png"]
    assert all((tmp_path / "png" / n).stat().st_size > 10_000 for n in pngs)


def test_bad_sweep_spec_is_a_user_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nbase: nowhere.yaml\n")
    res = run_cli("sweep", str(p), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "base scenario" in res.stderr
    p.write_text(f"name: x\nbase: {BASE}\naxes: [{{a.b: [1], c.d: [2]}}]\n")
    res = run_cli("sweep", str(p), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "exactly one key" in res.stderr
    # A typo in an axis path or an unknown profile leaves no valid point: one message, exit 2.
    for axis, why in (
        ("cluster.nodez: [1]", "unknown field 'nodez'"),
        ("cluster.gpu: [h900]", "h900"),
    ):
        p.write_text(f"name: x\nbase: {BASE}\naxes: [{{{axis}}}]\n")
        res = run_cli("sweep", str(p), "--out", str(tmp_path / "o.csv"))
        assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr


def test_bundled_sweeps_load() -> None:
    for f in sorted((REPO / "scenarios" / "sweeps").glob("*.yaml")):
        spec, _base, _ = load_spec(f)
        assert points(spec)


def test_a_sweep_never_answers_from_another_folders_profiles(tmp_path: Path) -> None:
    """Simulations are cached per resolved scenario, not per scenario as written: a sweep run
    beside a local H100 profile, then one without it in the same process, each use their own."""
    import csv

    data = yaml.safe_load((REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml").read_text())
    data["memory_bandwidth_gbps"]["value"] = 2000
    (tmp_path / "hardware_profiles").mkdir()
    (tmp_path / "hardware_profiles" / "h100-sxm-80gb.yaml").write_text(yaml.safe_dump(data))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "s", "base": str(BASE), "axes": [{"training.micro_batch": [1]}]})
    )
    steps = []
    for cwd, out in ((tmp_path, tmp_path / "local.csv"), (REPO, tmp_path / "bundled.csv")):
        assert run_cli("sweep", str(spec), "--out", str(out), cwd=cwd).returncode == 0
        steps.append(float(next(csv.DictReader(out.open()))["step_time_s"]))
    alone = json.loads(run_cli("simulate", str(BASE), "--format", "json").stdout)
    assert steps[0] > steps[1] == pytest.approx(alone["step_time_s"], rel=1e-12)
