"""What a sweep tells its user (a review's findings, session 44): the path to a profile's
figure, a plan kept cheapest without prices, points left off the front, the front without a
shared token budget, curves that differ only in an axis value, and a price profile of the
wrong GPU swapped for one of the same kind."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import REPO, run_cli

from simulator.report.plots import series_names

BASE70 = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


def _write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_an_axis_over_a_profile_figure_is_told_its_path(tmp_path: Path) -> None:
    spec = _write(
        tmp_path / "s.yaml",
        {"name": "s", "base": str(BASE70), "axes": [{"cluster.network.port_gbps": [200]}]},
    )
    r = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert r.returncode == 2
    assert "cluster.network.profile.port_gbps" in r.stderr


def test_keep_cheapest_without_prices_says_it_keeps_the_fastest(tmp_path: Path) -> None:
    base = yaml.safe_load(BASE70.read_text())
    del base["cluster"]["pricing"]
    b = _write(tmp_path / "b.yaml", base)
    spec = _write(
        tmp_path / "s.yaml",
        {"name": "s", "base": str(b), "keep": "cheapest", "axes": [{"cluster.nodes": [8]}]},
    )
    r = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--executor", "serial")
    assert r.returncode == 0
    assert "keep: cheapest needs prices" in r.stderr and "fastest plan" in r.stderr


def test_the_front_without_a_token_budget_is_per_million_tokens_and_counts_the_unpriced(
    tmp_path: Path,
) -> None:
    base = yaml.safe_load(BASE70.read_text())
    del base["cluster"]["pricing"]
    del base["run"]["tokens"]
    b = _write(tmp_path / "b.yaml", base)
    rent = {"profile": "aws-p5-h100", "tier": "on_demand"}
    spec = _write(
        tmp_path / "s.yaml",
        {
            "name": "s",
            "base": str(b),
            "axes": [
                {
                    "offer": [
                        {"cluster.nodes": 8},
                        {"cluster.nodes": 16, "cluster.pricing": rent},
                    ]
                }
            ],
        },
    )
    r = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--executor", "serial")
    assert r.returncode == 0
    assert "seconds against $ per million tokens" in r.stdout and "s/M tokens" in r.stdout
    assert "1 point(s) without a price are not on the front" in r.stdout


def test_points_that_differ_only_in_an_axis_value_are_separate_curves() -> None:
    def row(gpus: int, nodes: int, port: int) -> dict[str, object]:
        return {
            "gpu": "h100",
            "network": "ib",
            "fabric": "nvl",
            "gpus": gpus,
            "axis_cluster.nodes": nodes,
            "axis_cluster.network.profile.port_gbps": port,
        }

    rows = [row(32, 4, 100), row(32, 4, 400), row(64, 8, 100), row(64, 8, 400)]
    names = series_names(rows)  # type: ignore[arg-type]
    assert names[0] == names[2] == "h100 / ib, port_gbps=100"
    assert names[1] == names[3] == "h100 / ib, port_gbps=400"
    # An axis that only sets the size does not split them.
    assert series_names([row(32, 4, 100), row(64, 8, 100)]) == ["h100 / ib"] * 2  # type: ignore[list-item]


def test_an_owned_price_profile_of_another_gpu_suggests_an_owned_one_first() -> None:
    r = run_cli("simulate", str(BASE70), "--set", "cluster.pricing.profile=own-dgx-a100")
    assert r.returncode == 2
    assert "price it with own-dgx-h100" in r.stderr


def test_a_sweep_says_where_a_point_runs_otherwise_than_written(tmp_path: Path) -> None:
    # a fabric above the GPU's own NVLink is capped at the GPU's figure: simulate says so,
    # and so does the sweep, for the points it concerns
    spec = _write(
        tmp_path / "s.yaml",
        {"name": "s", "base": str(BASE70), "axes": [{"cluster.fabric.bandwidth_gbps": [450, 900]}]},
    )
    r = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--executor", "serial")
    assert r.returncode == 0
    assert "note: (point 1) fabric 'nvlink4-nvswitch' gives each GPU 900 GB/s" in " ".join(
        r.stderr.split()
    )
    assert "(point 0)" not in r.stderr


def test_notes_holding_the_old_separator_stay_whole() -> None:
    import json

    from simulator.sweep.answers import point_notes

    note = 'storage "fast" | tier, line'
    rows = [
        {"point": 0, "status": "ok", "notes": json.dumps([note])},
        {"point": 1, "status": "ok", "notes": ""},
    ]
    assert point_notes(rows) == [f"(point 0) {note}"]
