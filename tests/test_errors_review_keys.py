"""Bad inputs a second CLI review found: each is one message naming the field, and exit 2.

A key with a capital letter (CLUSTER, NODES, Model) is the user's own key, not a union member's
class name to hide from the path; a key that is a number or a boolean is named as a key, not as
a list index; a link of 0 GB/s and a power limit below any driver's are refused before the
engine divides by them; a ZeRO mapping (or a bare ``zero``) without its stage no longer means
stage 0; a sweep whose every point lacks a price for its GPU says how to pair them; a
damaged Parquet output, a NUL byte in a YAML file and an unknown bundled sweep are named as
such."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, run_cli

BASE = str(REPO / "scenarios" / "llama3-8b-8xh100.yaml")


def _refused(*args: str) -> str:
    res = run_cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return res.stderr


@pytest.mark.parametrize(
    ("item", "path", "near"),
    [
        ("CLUSTER.NODES=1", "CLUSTER", "cluster"),
        ("Cluster.nodes=1", "Cluster", "cluster"),
        ("cluster.NODES=1", "cluster.NODES", "nodes"),
        ("parallelism.TP=2", "parallelism.TP", "tp"),
        ("cluster.gpu.Memory_gb=1", "cluster.gpu.Memory_gb", "memory_gb"),
    ],
)
def test_a_capitalised_key_keeps_its_path_and_suggestion(item: str, path: str, near: str) -> None:
    err = _refused("check", BASE, "--set", item)
    leaf = path.rpartition(".")[2]
    assert f"{path}: unknown field '{leaf}'" in err, err
    assert f"did you mean '{near}'?" in err, err
    assert "--set" in err  # the override is named as the value's origin


def test_a_key_named_like_a_model_class_is_still_the_users_key(tmp_path: Path) -> None:
    text = Path(BASE).read_text().replace("training:\n", "training:\n  ModelSpec: 1\n", 1)
    f = tmp_path / "k.yaml"
    f.write_text(text)
    err = _refused("check", str(f))
    assert "training.ModelSpec: unknown field 'ModelSpec'" in err, err


@pytest.mark.parametrize(("key", "where"), [("1", ""), ("true", "cluster")])
def test_a_key_that_is_not_a_word_is_named_as_a_key(tmp_path: Path, key: str, where: str) -> None:
    text = Path(BASE).read_text()
    if where:
        text = text.replace("cluster:\n", f"cluster:\n  {key}: 1\n", 1)
    else:
        text = f"{key}: x\n" + text
    f = tmp_path / "k.yaml"
    f.write_text(text)
    err = _refused("check", str(f))
    assert "is not a field name" in err and "quote a key" in err, err
    assert "[1]" not in err  # not shown as a list index
    if where:
        assert f"{where}: the key" in err, err


@pytest.mark.parametrize("value", ["0", "1e10", "1e-9"])
def test_an_nvlink_rate_out_of_range_is_refused(value: str) -> None:
    for cmd in ("check", "simulate"):
        err = _refused(cmd, BASE, "--set", f"cluster.gpu.nvlink_gbps={value}")
        assert "cluster.gpu.nvlink_gbps" in err and "GB/s" in err, err


def test_an_efficiency_that_is_a_stray_exponent_is_refused() -> None:
    """matmul_max=1e-300 was in (0, 1], so it reached the engine and came back as a step of
    10^300 hours blamed on the global batch; the smallest fraction a probe fit gives still
    runs."""
    err = _refused("simulate", BASE, "--set", "cluster.gpu.efficiency.matmul_max=1e-300")
    assert "cluster.gpu.efficiency.matmul_max" in err and "1e-06" in err, err
    assert "global_batch" not in err, err
    ok = run_cli("check", BASE, "--set", "cluster.gpu.efficiency.attention_max=1e-4")
    assert ok.returncode == 0, ok.stderr


def test_a_power_limit_below_any_driver_minimum_is_refused() -> None:
    err = _refused("check", BASE, "--set", "cluster.gpu.power_limit_w=1")
    assert "cluster.gpu.power_limit_w" in err and "at least 175" in err, err
    # the lowest limit drivers accept still runs (H100 SXM: 200 W of 700)
    assert run_cli("check", BASE, "--set", "cluster.gpu.power_limit_w=200").returncode == 0


@pytest.mark.parametrize("value", ["zero", "{kind: zero}"])
def test_zero_without_a_stage_is_refused_not_read_as_stage_0(value: str) -> None:
    err = _refused("check", BASE, "--set", f"parallelism.sharding={value}")
    assert "parallelism.sharding.stage" in err and "{kind: zero, stage: 1}" in err, err


def test_a_scenario_without_sharding_is_still_plain_data_parallel() -> None:
    from simulator.config.loading import load_scenario
    from simulator.config.parallelism import ParallelismSpec

    rs = load_scenario(BASE, ["parallelism.sharding={kind: zero, stage: 2}"])
    assert rs.parallelism.zero_stage == 2
    assert ParallelismSpec().sharding.kind == "zero" and ParallelismSpec().zero_stage == 0


def test_a_sweep_whose_gpu_has_no_price_says_to_pair_them(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nbase: {BASE}\naxes:\n  - cluster.gpu: [h200-sxm-141gb]\n")
    err = _refused("sweep", str(spec), "--out", str(tmp_path / "s.csv"), "--executor", "serial")
    assert "cluster.pricing.profile" in err and "give both in one axis entry" in err, err


def test_a_damaged_parquet_output_is_named_as_damaged(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    out.write_bytes(b"PAR1" + b"\0" * 100)  # a Parquet file cut short
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nbase: {BASE}\naxes:\n  - training.micro_batch: [1]\n")
    err = _refused("sweep", str(spec), "--out", str(out), "--executor", "serial")
    assert "damaged Parquet file" in err and "--out" in err, err
    assert out.read_bytes().startswith(b"PAR1")  # left as it was


def test_a_nul_byte_is_placed_by_line(tmp_path: Path) -> None:
    lines = Path(BASE).read_text().splitlines(keepends=True)
    lines[4] = "\0" + lines[4]
    f = tmp_path / "nul.yaml"
    f.write_text("".join(lines))
    err = _refused("check", str(f))
    assert "at line 5, column 1" in err and "U+0000" in err, err


def test_an_unknown_bundled_sweep_lists_the_bundled_ones() -> None:
    err = _refused("sweep", "no-such-sweep-here")
    assert "no such sweep spec file" in err and "llama3-70b-buy-or-rent" in err, err


def _base_with(tmp_path: Path, old: str, new: str) -> str:
    text = Path(BASE).read_text()
    assert old in text
    f = tmp_path / "s.yaml"
    f.write_text(text.replace(old, new, 1))
    return str(f)


def test_a_set_inside_a_section_is_not_blamed_for_the_sections_own_error(tmp_path: Path) -> None:
    """The file's inline model is wrong (hidden not divisible by heads): a --set of another
    field of that model did not cause it."""
    f = _base_with(
        tmp_path, "model: llama3-8b", "model: {layers: 32, hidden: 4000, heads: 48, vocab: 1000}"
    )
    err = _refused("check", f, "--set", "model.layers=40")
    assert "divisible" in err and "--set model.layers" not in err, err


@pytest.mark.parametrize("item", ["cluster.nodes=2", "parallelism.tp=2"])
def test_a_layout_set_is_not_blamed_for_a_batch_out_of_range(tmp_path: Path, item: str) -> None:
    f = _base_with(tmp_path, "global_batch: ", "global_batch: 0 #")
    err = _refused("check", f, "--set", item)
    assert "training.global_batch" in err and f"--set {item}" not in err, err


def test_a_key_that_differs_only_in_case_suggests_that_field() -> None:
    err = _refused("check", BASE, "--set", "parallelism.Pp=2")
    assert "did you mean 'pp'?" in err, err


def test_a_boolean_key_is_shown_as_yaml_writes_it(tmp_path: Path) -> None:
    f = _base_with(tmp_path, "cluster:\n", "cluster:\n  true: 1\n")
    err = _refused("check", f)
    assert "the key true is not a field name" in err, err
