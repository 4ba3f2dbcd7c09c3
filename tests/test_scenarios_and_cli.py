"""Bundled scenarios, the hardware catalogue and the command line, end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    CATALOG_SCENARIO,
    REPO,
    inline_scenario,
    run_cli,
    run_cli_process,
    write_yaml,
)

from simulator.catalog import (
    bundled_profiles_dir,
    bundled_scenarios,
    load_catalog,
    load_profile_file,
)
from simulator.check import check as run_check
from simulator.config.hardware import Sourced
from simulator.config.loading import load_scenario, resolve_dict
from simulator.config.profiles import PROFILE_KINDS
from simulator.workload.memory import memory_report
from simulator.workload.model import model_flops_per_token, param_count

SCENARIOS = bundled_scenarios()

EXPECTED_PROFILES = {
    "gpu": [
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm-80gb",
        "h100-pcie-80gb",
        "h200-sxm-141gb",
        "b200",
        "l40s",
        "mi300x",
    ],
    "fabric": [
        "nvlink3-nvswitch",
        "nvlink4-nvswitch",
        "nvlink5-nvswitch",
        "pcie4-host",
        "pcie4-switch",
        "pcie5-host",
        "pcie5-switch",
        "infinity-fabric-mi300x",
    ],
    "network": [
        "ib-hdr-200",
        "ib-ndr-400",
        "ib-xdr-800",
        "roce-100",
        "roce-200",
        "roce-400",
        "tcp-25gbe",
        "tcp-100gbe",
    ],
    "storage": ["local-nvme", "lustre", "nfs", "object-store"],
    "price": ["aws-p5-h100", "aws-p4de-a100-80gb", "own-dgx-h100"],
}

FOLDER_KINDS = {
    "gpus": {"gpu"},
    "fabrics": {"fabric"},
    "networks": {"network"},
    "storage": {"storage"},
    "prices": {"cloud_price", "ownership_price"},
    "software": {"software"},
    "calibrated": set(PROFILE_KINDS),
}


def _profile_files() -> list[Path]:
    """The shipped catalogue: not the (git-ignored) output of `clustersim calibrate` under
    calibrated/, except its tracked examples."""
    return sorted(
        p
        for p in bundled_profiles_dir().rglob("*.yaml")
        if p.parent.name != "calibrated" or p.name.startswith("example-")
    )


def _sourced(value: Any, prefix: str = "") -> list[tuple[str, Sourced]]:
    """Every sourced figure in a profile, with its field path."""
    if isinstance(value, Sourced):
        return [(prefix, value)]
    if isinstance(value, dict):
        out: list[tuple[str, Sourced]] = []
        for k, v in value.items():
            out += _sourced(v, f"{prefix}.{k}")
        return out
    if hasattr(type(value), "model_fields"):
        out = []
        for k in type(value).model_fields:
            out += _sourced(getattr(value, k), f"{prefix}.{k}" if prefix else k)
        return out
    return []


# --------------------------------------------------------------------------------------------
# Bundled scenarios
# --------------------------------------------------------------------------------------------


def test_there_are_bundled_scenarios() -> None:
    assert len(SCENARIOS) >= 3
    names = {p.stem for p in SCENARIOS}
    assert {"llama3-8b-8xh100", "llama3-70b-64xh100", "gpt3-175b-megatron-1024xa100"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_check_table(path: Path) -> None:
    res = run_cli("check", str(path))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    out = res.stdout
    assert "memory per GPU (GB)" in out
    for row in (
        "weights",
        "gradients",
        "optimizer state",
        "activations",
        "framework reserve",
        "total",
        "capacity",
        "micro-batches in flight",
    ):
        assert row in out, row
    assert re.search(r"\bfits\b|does not fit", out)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_check_json(path: Path) -> None:
    res = run_cli("check", str(path), "--format", "json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert isinstance(d, dict)
    for key in ("params", "flops_per_step", "memory_gb_per_gpu", "fits", "layout"):
        assert key in d
    rs = load_scenario(path)
    assert d["params"] == param_count(rs.model, rs.training.seq_len)
    assert d["flops_per_step"] == pytest.approx(
        model_flops_per_token(rs.model, rs.training.seq_len) * rs.training.tokens_per_step
    )
    assert d["hardware_flops_per_step"] >= d["flops_per_step"]
    mem = d["memory_gb_per_gpu"]
    breakdown = mem["breakdown"]
    assert {"weights_gb", "gradients_gb", "optimizer_gb", "activations_gb", "reserve_gb"} <= set(
        breakdown
    )
    assert sum(breakdown.values()) == pytest.approx(mem["total"])
    assert mem["capacity"] == rs.gpu.memory_gb.value
    assert len(mem["stages"]) == rs.pp
    assert d["fits"] is (mem["total"] <= mem["capacity"])
    assert (
        d["layout"]["dp"] * d["layout"]["tp"] * d["layout"]["pp"] * d["layout"]["cp"] == (d["gpus"])
    )
    # The bundled scenarios are meant to run: they fit.
    assert d["fits"] is True


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenarios_are_valid_and_documented(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    assert raw.get("question"), "a bundled scenario says what it answers"
    rs = load_scenario(path)
    assert rs.name == raw.get("name", path.stem)
    assert rs.gpus == rs.dp * rs.tp * rs.pp * rs.cp
    rep = run_check(rs)
    assert rep.params > 0 and rep.model_flops_per_step > 0


def test_check_by_bundled_name_in_a_real_process() -> None:
    res = run_cli_process("check", "llama3-8b-8xh100", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["scenario"] == "llama3-8b-8xh100"


def test_check_csv() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--format", "csv")
    assert res.returncode == 0, res.stderr
    header, values = res.stdout.strip().splitlines()
    cols = header.split(",")
    assert {"scenario", "params", "flops_per_step", "memory_gb_per_gpu", "fits"} <= set(cols)
    assert len(values.split(",")) == len(cols)


def test_profiles_list_and_show_csv() -> None:
    import csv
    import io

    res = run_cli("profiles", "list", "--kind", "gpu", "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {r["name"] for r in rows} >= {"h100-sxm-80gb", "a100-sxm4-80gb"}
    assert all(r["kind"] == "gpu" and r["file"].endswith(".yaml") for r in rows)
    res = run_cli("profiles", "show", "h100-sxm-80gb", "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    peak = {r["field"]: r for r in rows}["peak_tflops.bf16"]
    assert float(peak["value"]) > 900 and peak["source"]


def test_gpt3_scenario_reproduces_sc21_layout() -> None:
    rs = load_scenario(REPO / "scenarios" / "gpt3-175b-megatron-1024xa100.yaml")
    assert (rs.dp, rs.tp, rs.pp) == (16, 8, 8)
    assert rs.micro_batches == 96


# --------------------------------------------------------------------------------------------
# --set and levers
# --------------------------------------------------------------------------------------------


def test_set_changes_the_layout() -> None:
    base = run_cli("check", "llama3-8b-8xh100", "--format", "json")
    changed = run_cli("check", "llama3-8b-8xh100", "--format", "json", "--set", "parallelism.tp=4")
    assert base.returncode == changed.returncode == 0, changed.stderr
    b, c = json.loads(base.stdout)["layout"], json.loads(changed.stdout)["layout"]
    assert b["tp"] == 1 and b["dp"] == 8
    assert c["tp"] == 4 and c["dp"] == 2
    mem_b = json.loads(base.stdout)["memory_gb_per_gpu"]["total"]
    mem_c = json.loads(changed.stdout)["memory_gb_per_gpu"]["total"]
    assert mem_b != mem_c


def test_set_several_and_structured_values() -> None:
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--format",
        "json",
        "--set",
        "parallelism.sharding={kind: zero, stage: 2}",
        "--set",
        "parallelism.pp=2",
        "--set",
        "training.micro_batch=1",
    )
    assert res.returncode == 0, res.stderr
    lay = json.loads(res.stdout)["layout"]
    assert (lay["zero_stage"], lay["pp"], lay["dp"]) == (2, 2, 4)


def test_set_overrides_a_profile_field() -> None:
    rs = resolve_dict(CATALOG_SCENARIO, ["cluster.gpu.memory_gb=40"])
    assert rs.gpu.name == "h100-sxm-80gb"
    assert rs.gpu.memory_gb.value == 40
    assert "inline" in rs.gpu.memory_gb.source
    # Untouched figures keep their catalogue source.
    assert rs.gpu.memory_bandwidth_gbps == load_catalog().get("h100-sxm-80gb").memory_bandwidth_gbps


def _nofit(tmp_path: Path, model: str, **training: Any) -> Path:
    data = {
        "cluster": {
            "gpu": "h100-sxm-80gb",
            "gpus_per_node": 8,
            "nodes": 1,
            "fabric": "nvlink4-nvswitch",
            "storage": "local-nvme",
        },
        "model": model,
        "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 2, **training},
        "parallelism": {"tp": 1},
    }
    return write_yaml(tmp_path / f"{model}-nofit.yaml", data)


def test_llama70b_on_one_node_without_sharding_does_not_fit(tmp_path: Path) -> None:
    f = _nofit(tmp_path, "llama3-70b")
    res = run_cli("check", str(f), "--format", "json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["fits"] is False
    assert d["memory_gb_per_gpu"]["total"] > d["memory_gb_per_gpu"]["capacity"]
    # 16 bytes per parameter under mixed-precision AdamW is ~1.1 TB: more than 8 × 80 GB, so no
    # change to the plan alone can make it fit.
    assert d["levers"] == []
    table = run_cli("check", str(f))
    assert table.returncode == 0
    assert "does not fit" in table.stdout
    assert "use more GPUs or a larger GPU" in table.stdout


def test_llama70b_with_adafactor_gets_levers(tmp_path: Path) -> None:
    # As the bundled llama3-70b-1xh100-node, before its sharding and recomputation.
    f = _nofit(
        tmp_path,
        "llama3-70b",
        micro_batch=1,
        optimizer={"kind": "adafactor", "master_weights_fp32": False},
    )
    d = json.loads(run_cli("check", str(f), "--format", "json").stdout)
    assert d["fits"] is False
    assert d["levers"]
    assert any("stage: 3" in s for lv in d["levers"] for s in lv["set"])


def test_levers_make_the_plan_fit(tmp_path: Path) -> None:
    f = _nofit(tmp_path, "llama3-8b")
    res = run_cli("check", str(f), "--format", "json")
    d = json.loads(res.stdout)
    assert d["fits"] is False
    levers = d["levers"]
    assert 1 <= len(levers) <= 5
    for lv in levers:
        assert lv["peak_gb"] <= d["memory_gb_per_gpu"]["capacity"]
        rs = load_scenario(f, lv["set"])
        assert memory_report(rs).fits
        assert memory_report(rs).peak.total_gb == pytest.approx(lv["peak_gb"])
    # ... and through the command line, as printed.
    args: list[str] = []
    for s in levers[0]["set"]:
        args += ["--set", s]
    again = json.loads(run_cli("check", str(f), "--format", "json", *args).stdout)
    assert again["fits"] is True
    # The table prints them as shell-ready --set flags.
    table = run_cli("check", str(f)).stdout
    assert "changes that make it fit" in table
    assert "--set 'parallelism.sharding={kind: zero, stage: 3}'" in table


# --------------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------------


def test_catalogue_has_the_expected_profiles() -> None:
    cat = load_catalog()
    for kind, names in EXPECTED_PROFILES.items():
        kinds = ("cloud_price", "ownership_price") if kind == "price" else (kind,)
        for name in names:
            assert name in cat.by_kind(*kinds), f"missing {kind} profile {name}"


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: p.stem)
def test_profile_file_validates(path: Path) -> None:
    prof = load_profile_file(path)
    assert prof.name == path.stem
    folder = path.parent.name
    assert folder in FOLDER_KINDS, f"unexpected folder {folder}"
    assert prof.kind in FOLDER_KINDS[folder]  # type: ignore[attr-defined]
    raw = yaml.safe_load(path.read_text())
    assert raw["kind"] in PROFILE_KINDS


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: p.stem)
def test_every_figure_has_a_real_source(path: Path) -> None:
    prof = load_profile_file(path)
    figures = _sourced(prof)
    assert figures
    for field, fig in figures:
        assert "todo" not in fig.source.lower(), f"{path.name}: {field} source is TODO"
        assert "tbd" not in fig.source.lower(), f"{path.name}: {field}"
        assert "inline override" not in fig.source, f"{path.name}: {field} has a bare number"
        assert len(fig.source.strip()) >= 10, f"{path.name}: {field}: '{fig.source}'"
    assert "TODO" not in path.read_text()


def test_prices_name_existing_gpus() -> None:
    cat = load_catalog()
    gpus = cat.by_kind("gpu")
    for name, prof in cat.by_kind("cloud_price", "ownership_price").items():
        assert prof.gpu in gpus, f"{name} prices unknown GPU {prof.gpu}"  # type: ignore[attr-defined]


def test_gpu_profiles_are_plausible() -> None:
    for name, g in load_catalog().by_kind("gpu").items():
        eff = g.efficiency  # type: ignore[attr-defined]
        assert 0 < eff.matmul_max.value <= 1, name
        assert 0 < eff.attention_max.value <= 1, name
        assert 0 < eff.memory_bandwidth.value <= 1, name
        peak = g.peak_tflops  # type: ignore[attr-defined]
        assert "bf16" in peak or "fp16" in peak, name
        if "fp8" in peak and "bf16" in peak:
            assert peak["fp8"].value >= peak["bf16"].value, name


def test_profiles_list_shows_every_profile() -> None:
    res = run_cli("profiles", "list")
    assert res.returncode == 0, res.stderr
    cat = load_catalog()
    for name in cat.profiles:
        assert name in res.stdout, name
    js = run_cli("profiles", "list", "--format", "json")
    listed = {p["name"] for p in json.loads(js.stdout)}
    assert listed == set(cat.profiles)
    assert {p.stem for p in _profile_files()} <= listed


def test_profiles_list_by_kind() -> None:
    res = run_cli("profiles", "list", "--kind", "network", "--format", "json")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    assert items and all(p["kind"] == "network" for p in items)


def test_profiles_show_prints_every_number_with_its_source() -> None:
    res = run_cli("profiles", "show", "h100-sxm-80gb")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    prof = load_catalog().get("h100-sxm-80gb")
    assert prof.display_name in out
    assert "source" in out
    assert "TODO" not in out
    for field, fig in _sourced(prof):
        line = next((ln for ln in out.splitlines() if f" {field} " in ln), None)
        assert line is not None, field
        # The value's row carries a source (first words of it, before any folding).
        assert fig.source.split()[0] in line, (field, line)
    js = json.loads(run_cli("profiles", "show", "h100-sxm-80gb", "--format", "json").stdout)
    assert js["name"] == "h100-sxm-80gb"
    assert js["memory_gb"]["value"] == prof.memory_gb.value  # type: ignore[attr-defined]
    assert js["memory_gb"]["source"]


# --------------------------------------------------------------------------------------------
# schema, help
# --------------------------------------------------------------------------------------------


def test_schema_is_json_with_cluster() -> None:
    res = run_cli("schema")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert "cluster" in s["properties"]
    assert {"cluster", "model", "training"} <= set(s["required"])
    assert s["$schema"].startswith("https://json-schema.org/")


def test_schema_accepts_bundled_scenarios_shape() -> None:
    s = json.loads(run_cli("schema").stdout)
    for path in SCENARIOS:
        raw = yaml.safe_load(path.read_text())
        assert set(raw) <= set(s["properties"]), path.name


def test_help_and_usage_errors() -> None:
    res = run_cli_process("--help")
    assert res.returncode == 0
    assert "check" in res.stdout and "profiles" in res.stdout
    bad = run_cli_process("check")  # missing argument: a click usage error, not a traceback
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    bad_fmt = run_cli_process("check", "llama3-8b-8xh100", "--format", "xml")
    assert bad_fmt.returncode == 2
    assert "Traceback" not in bad_fmt.stderr


def test_console_script_module_entry_point() -> None:
    text = (REPO / "simulator" / "cli.py").read_text()
    assert 'if __name__ == "__main__":' in text
    # The installed console script runs the same main().
    import shutil

    exe = shutil.which("clustersim")
    if exe is None:
        pytest.skip("console script not on PATH")
    import subprocess

    proc = subprocess.run([exe, "schema"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "properties" in json.loads(proc.stdout)


def test_inline_profiles_need_no_catalogue(tmp_path: Path) -> None:
    f = write_yaml(tmp_path / "inline.yaml", inline_scenario("llama3-8b", tp=2))
    res = run_cli("check", str(f), "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["layout"]["tp"] == 2
