"""Overrides (``--set``, a sweep option's fields) apply from the least specific path to the most
specific: naming a profile never undoes a field set beside it, in whichever order the two were
given; a field of the file that a section-replacing override drops is named in the notes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.config.loading import load_scenario, read_yaml
from simulator.config.reading import apply_sets, override_order, replaced_fields
from simulator.simulate import simulate

STARVED = REPO / "scenarios" / "storage-starved.yaml"
L70 = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


def test_a_section_goes_before_the_fields_inside_it() -> None:
    sets = [
        "cluster.pricing.profile.amortisation_years=3",
        "cluster.pricing.profile=own-dgx-h100",
        "parallelism.sharding.stage=1",
        "parallelism.sharding.kind=zero",
        "cluster.nodes=4",
        "cluster.nodes=8",
    ]
    order = override_order(sets)
    assert order.index("cluster.pricing.profile=own-dgx-h100") < order.index(
        "cluster.pricing.profile.amortisation_years=3"
    )
    assert order.index("parallelism.sharding.kind=zero") < order.index(
        "parallelism.sharding.stage=1"
    )
    assert order.index("cluster.nodes=4") < order.index("cluster.nodes=8")  # the last wins
    data = apply_sets(read_yaml(L70), sets, None)
    assert data["cluster"]["pricing"]["profile"] == {
        "profile": "own-dgx-h100",
        "amortisation_years": 3,
    }
    assert data["cluster"]["nodes"] == 8


def test_naming_a_profile_keeps_a_field_set_before_it() -> None:
    """The storage bandwidth the user set is the one simulated, in either order."""
    stalls = []
    for sets in (
        ["cluster.storage.aggregate_read_gbps=1", "cluster.storage=nfs"],
        ["cluster.storage=nfs", "cluster.storage.aggregate_read_gbps=1"],
    ):
        res = simulate(load_scenario(STARVED, sets), scaling=False)
        stalls.append(res.metrics.breakdown_s["data_stall"])
    assert stalls[0] == stalls[1]
    plain = simulate(load_scenario(STARVED, ["cluster.storage=nfs"]), scaling=False)
    assert stalls[0] > plain.metrics.breakdown_s["data_stall"]  # 1 GB/s is the bottleneck


def _limited(tmp: Path) -> Path:
    data = read_yaml(L70)
    data["cluster"]["gpu"] = {"profile": "h100-sxm-80gb", "power_limit_w": 500}
    p = tmp / "l70-500w.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_a_replaced_section_names_the_fields_it_dropped(tmp_path: Path) -> None:
    path = _limited(tmp_path)
    res = simulate(load_scenario(path, ["cluster.gpu=h100-sxm-80gb"]), scaling=False)
    dropped = [n for n in res.notes if "replaced the whole of cluster.gpu" in n]
    assert len(dropped) == 1 and "power_limit_w: 500" in dropped[0]
    assert not any("limited to 500 W" in n for n in res.notes)
    # set again beside the profile: kept, and nothing is said to be dropped
    kept = simulate(
        load_scenario(path, ["cluster.gpu=h100-sxm-80gb", "cluster.gpu.power_limit_w=500"]),
        scaling=False,
    )
    assert not any("replaced the whole" in n for n in kept.notes)
    assert any("limited to 500 W" in n for n in kept.notes)
    # a mapping that gives the field again drops nothing either
    base = read_yaml(path)
    assert (
        replaced_fields(base, ['cluster.gpu={"profile": "h200-sxm-141gb", "power_limit_w": 600}'])
        == []
    )
    assert replaced_fields(base, ["cluster.nodes=4"]) == []
    # a section removed on purpose drops what it held without advice to set it again (which
    # then failed: `cluster.pricing.tier=on_demand` alone has no price profile)
    priced = {
        **base,
        "cluster": {**base["cluster"], "pricing": {"profile": "aws-p5-h100", "tier": "spot"}},
    }
    assert replaced_fields(priced, ["cluster.pricing=null"]) == []
    assert replaced_fields(priced, ["cluster.pricing=~"]) == []


def test_a_sweep_says_which_fields_an_axis_drops(tmp_path: Path) -> None:
    path = _limited(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "pl", "base": str(path), "axes": [{"cluster.gpu": ["h100-sxm-80gb"]}]}
        )
    )
    out = tmp_path / "pl.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "axes[0]" in res.stderr and "power_limit_w: 500" in res.stderr


def test_a_sweep_option_prices_the_profile_it_names_with_its_own_fields(tmp_path: Path) -> None:
    """{years, profile} and {profile, years}: each row is charged over its own years, as
    ``simulate`` charges them."""
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    years = "cluster.pricing.profile.amortisation_years"
    offers = [
        {years: 3, "cluster.pricing.profile": "own-dgx-h100"},
        {"cluster.pricing.profile": "own-dgx-h100", years: 10},
    ]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "amort", "base": str(base), "axes": [{"offer": offers}]})
    )
    out = tmp_path / "a.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 0, res.stderr
    rows = {r["axis_offer"]: float(r["usd_per_gpu_hour"]) for r in csv.DictReader(out.open())}
    for n in (3, 10):
        one = json.loads(
            run_cli(
                "simulate", str(base), "--set", "cluster.pricing.profile=own-dgx-h100",
                "--set", f"{years}={n}", "--format", "json",
            ).stdout
        )  # fmt: skip
        (label,) = [k for k in rows if str(n) in k.split(", ")]
        assert rows[label] == pytest.approx(one["cost"]["usd_per_gpu_hour"], rel=1e-9)
    assert len(set(rows.values())) == 2


def test_a_larger_scaling_reference_is_said() -> None:
    res = simulate(load_scenario(L70, ["run.scaling_reference.nodes=16"]))
    assert any("larger than this cluster" in n for n in res.notes)
    assert not any("larger than this cluster" in n for n in simulate(load_scenario(L70)).notes)


def test_a_kind_given_by_its_word_takes_fields_set_inside_it() -> None:
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    rs = load_scenario(
        base,
        [
            "parallelism.pp_schedule.virtual_stages=4",
            "parallelism.pp_schedule=interleaved",
            "parallelism.pp=2",
            "parallelism.sharding=fsdp",
            "parallelism.sharding.strategy=hybrid_shard",
            "parallelism.sharding.shard_group=4",
        ],
    )
    assert rs.parallelism.pp_schedule.kind == "interleaved"
    assert rs.parallelism.virtual_stages == 4
    assert rs.parallelism.sharding.kind == "fsdp"
    assert rs.parallelism.sharding.strategy == "hybrid_shard"


def test_another_kind_drops_its_old_fields_without_a_note() -> None:
    """The interleaved schedule's virtual_stages have no place in GPipe: nothing to keep."""
    res = simulate(load_scenario(L70, ["parallelism.pp_schedule=gpipe"]), scaling=False)
    assert not any("replaced the whole" in n for n in res.notes)
    # ...and that GPipe plan holds every micro-batch's activations: said first of all
    assert not res.metrics.fits and "cannot run as given" in res.notes[0]
