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
    bundled_scenarios,
    load_catalog,
)
from simulator.check import check as run_check
from simulator.config.loading import load_scenario, resolve_dict
from simulator.workload.memory import memory_report
from simulator.workload.model import model_flops_per_token, param_count

SCENARIOS = bundled_scenarios()

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
    assert mem["capacity"] == rs.gpu.capacity_gb
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
    assert "capacity_gb" in cols
    assert len(values.split(",")) == len(cols)


def test_simulate_csv_has_the_same_columns_whatever_the_pipeline_depth() -> None:
    """Rows of different runs concatenate: per-stage detail is in the JSON only."""
    import csv
    import io

    from simulator.cli_common import COST_BREAKDOWN_COLUMNS, COST_COLUMNS

    heads = []
    runs = [
        ("llama3-8b-8xh100",),  # PP 1, its own scaling reference
        ("llama3-70b-64xh100",),  # PP 4, another layout as reference
        ("llama3-70b-64xh100", "--no-scaling"),
        ("llama3-70b-64xh100", "--set", "cluster.pricing.profile=own-dgx-h100"),
        ("llama3-70b-64xh100", "--set", "cluster.pricing=null"),
    ]
    for args in runs:
        res = run_cli("simulate", *args, "--format", "csv")
        assert res.returncode == 0, res.stderr
        rows = list(csv.reader(io.StringIO(res.stdout)))
        assert len(rows) == 2 and len(rows[0]) == len(rows[1])
        heads.append(rows[0])
    assert all(h == heads[0] for h in heads)
    assert "step_time_s" in heads[0] and not any(h.startswith("per_class") for h in heads[0])
    # The fixed cost columns hold every figure a cloud or an ownership price gives.
    for args in (runs[1], runs[3]):
        cost = json.loads(run_cli("simulate", *args, "--format", "json").stdout)["cost"]
        assert set(cost) - {"breakdown", "assumptions"} <= set(COST_COLUMNS), set(cost)
        assert set(cost["breakdown"]) <= set(COST_BREAKDOWN_COLUMNS)


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
    assert res.returncode == 1, res.stderr  # check's "does not fit"
    d = json.loads(res.stdout)
    assert d["fits"] is False
    assert d["memory_gb_per_gpu"]["total"] > d["memory_gb_per_gpu"]["capacity"]
    # 16 bytes per parameter under mixed-precision AdamW is ~1.1 TB: more than 8 × 80 GB, so no
    # change to the plan alone can make it fit.
    assert d["levers"] == []
    table = run_cli("check", str(f))
    assert table.returncode == 1
    assert "does not fit" in table.stdout
    assert "use more GPUs or a larger GPU" in table.stdout


def test_llama70b_with_adafactor_gets_levers(tmp_path: Path) -> None:
    # As the bundled llama3-70b-1xh100-node, before its sharding and recomputation.
    f = _nofit(
        tmp_path,
        "llama3-70b",
        micro_batch=1,
        optimizer={"kind": "adafactor", "master_weights_fp32": False},
        grad_reduce_dtype="bf16",
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
    assert "--set 'parallelism.sharding={kind: zero, stage: 2}'" in table


def test_levers_apply_as_printed_when_dp_is_explicit(tmp_path: Path) -> None:
    data = yaml.safe_load(_nofit(tmp_path, "llama3-8b").read_text())
    data["parallelism"]["dp"] = 8
    f = write_yaml(tmp_path / "explicit-dp.yaml", data)
    d = json.loads(run_cli("check", str(f), "--format", "json").stdout)
    assert d["fits"] is False and d["levers"]
    assert any(s.startswith("parallelism.tp=") for lv in d["levers"] for s in lv["set"])
    for lv in d["levers"]:
        args: list[str] = []
        for s in lv["set"]:
            args += ["--set", s]
        res = run_cli("check", str(f), "--format", "json", *args)
        assert res.returncode == 0, (lv["set"], res.stderr)
        assert json.loads(res.stdout)["fits"] is True, lv["set"]


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
    d = json.loads(res.stdout)
    assert res.returncode == (0 if d["fits"] else 1), res.stderr
    assert d["layout"]["tp"] == 2


def test_stack_switches_take_a_bare_true_or_false() -> None:
    # "any field can be overridden inline": a stack's sourced switch takes a bare bool.
    rs = load_scenario(
        REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        [
            "software=pytorch-fsdp",
            "software.fusion.rms_norm=true",
            "software.overlap.dp_grad=false",
        ],
    )
    assert rs.software.fusion.rms_norm is not None and rs.software.fusion.rms_norm.value is True
    assert rs.software.overlap.dp_grad.value is False


def test_a_2021_stack_has_no_flash_attention_unless_told() -> None:
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    old = load_scenario(base, ["software=megatron-lm-2021"])
    assert old.training.flash_attention is None and old.flash_attention is False
    assert load_scenario(base).flash_attention is True  # megatron-core: fused attention
    told = load_scenario(base, ["software=megatron-lm-2021", "training.flash_attention=true"])
    assert told.flash_attention is True


def test_schema_of_a_profile_kind_gives_value_ranges() -> None:
    res = run_cli("schema", "--profile", "gpu")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["title"] == "clustersim gpu profile" and "value range" in res.stdout
    assert run_cli("schema", "--profile", "gpux").returncode == 2


def test_the_bundled_schema_files_are_what_schema_prints() -> None:
    """The editor schemas the bundled scenarios and sweeps name are never stale."""
    for path, args in (
        (REPO / "scenarios" / "scenario.schema.json", ("schema",)),
        (REPO / "scenarios" / "sweeps" / "sweep.schema.json", ("schema", "--sweep")),
    ):
        res = run_cli(*args)
        assert res.returncode == 0
        assert json.loads(path.read_text()) == json.loads(res.stdout), (
            f"{path.name} is stale: regenerate it with clustersim {' '.join(args)} > {path}"
        )
