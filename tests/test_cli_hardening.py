"""Inputs a review threw at the command line beyond the scenario parser: a sweep output torn
inside a character, odd paths in a sweep spec and in the profile search path, a base scenario's
own faults, plot names taken, and probe and validate options without bounds. Each ends in one
message naming what to fix and exit 2 (or, for the torn output, a resumed sweep)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli, run_cli_process

from simulator.catalog import profile_files
from simulator.cli_common import os_error_text

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _spec(tmp: Path, base: Any = None, name: str = "t", **extra: Any) -> Path:
    p = tmp / "spec.yaml"
    data = {"name": name, "base": str(base or BASE), **extra}
    p.write_text(yaml.safe_dump(data, allow_unicode=True))
    return p


def test_a_csv_torn_inside_a_character_resumes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, axes=[{"name": ["ñame", "üx"]}])
    full = tmp_path / "full.csv"
    assert run_cli("sweep", str(spec), "--out", str(full)).returncode == 0
    data = full.read_bytes()
    cut = data.rindex("ü".encode()) + 1  # inside the two bytes of the last row's ü
    torn = tmp_path / "torn.csv"
    torn.write_bytes(data[:cut])
    res = run_cli("sweep", str(spec), "--out", str(torn))
    assert res.returncode == 0, res.stderr
    assert torn.read_bytes() == data


def test_a_nul_in_the_base_path_is_named(tmp_path: Path) -> None:
    spec = _spec(tmp_path, base="a\0b", axes=[{"cluster.nodes": [1]}])
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "base" in res.stderr and "NUL" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("change", "axis", "says"),
    [
        ({"gpu": "h100-nosuch"}, {"cluster.nodes": [1, 2]}, "cluster.gpu"),
        ({"nodes": 0}, {"training.micro_batch": [1, 2]}, "cluster.nodes"),
    ],
)
def test_the_base_scenarios_own_fault_is_named_in_the_base(
    tmp_path: Path, change: dict[str, Any], axis: dict[str, Any], says: str
) -> None:
    data = yaml.safe_load(BASE.read_text())
    data["cluster"].update(change)
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    out = str(tmp_path / "o.csv")
    res = run_cli("sweep", str(_spec(tmp_path, base=base, axes=[axis])), "--out", out)
    assert res.returncode == 2
    assert f"{base}: {says}" in res.stderr and "axes" not in res.stderr.split("what to do")[0]


def test_a_base_fault_an_axis_mends_is_not_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE.read_text())
    data["cluster"]["nodes"] = 0
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = _spec(tmp_path, base=base, axes=[{"cluster.nodes": [1]}])
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 0, res.stderr


def test_a_pipe_among_the_profiles_does_not_hang_a_sweep(tmp_path: Path) -> None:
    prof = tmp_path / "profiles" / "gpus"
    prof.mkdir(parents=True)
    os.mkfifo(prof / "h100-sxm-80gb.yaml")
    spec = _spec(tmp_path, axes=[{"cluster.nodes": [1]}])
    env = {"CLUSTERSIM_PROFILE_PATH": str(tmp_path / "profiles")}
    res = run_cli_process("sweep", str(spec), "--out", str(tmp_path / "o.csv"), env=env)
    assert res.returncode == 2 and "not a regular file" in res.stderr
    assert "cluster.gpu" in res.stderr and "Traceback" not in res.stderr


def test_profile_files_are_searched_two_folders_down_only(tmp_path: Path) -> None:
    for rel in ("a.yaml", "gpus/b.yml", "calibrated/x/c.yaml", "deep/er/still/d.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("name: x\n")
    assert [p.stem for p in profile_files(tmp_path)] == ["a", "c", "b"]


def test_a_profile_path_entry_the_system_cannot_look_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", "/x" * 3000)
    res = run_cli("profiles", "list")
    assert res.returncode == 2 and "CLUSTERSIM_PROFILE_PATH" in res.stderr
    assert "6000 characters" in res.stderr and "Traceback" not in res.stderr


def test_a_taken_plot_name_is_refused_before_the_sweep(tmp_path: Path) -> None:
    from simulator.report.plots import plot_paths

    plots = tmp_path / "plots"
    plot_paths(plots, "t")[0].mkdir(parents=True)  # a folder where a PNG goes
    out = tmp_path / "o.csv"
    spec = _spec(tmp_path, axes=[{"cluster.nodes": [1]}])
    res = run_cli("sweep", str(spec), "--out", str(out), "--plot", str(plots))
    assert res.returncode == 2 and "--plot" in res.stderr and "is a folder" in res.stderr
    assert not out.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_a_read_only_output_is_refused_before_the_sweep(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.write_text("")
    out.chmod(0o444)
    res = run_cli("sweep", str(_spec(tmp_path, axes=[{"cluster.nodes": [1]}])), "--out", str(out))
    assert res.returncode == 2 and "--out" in res.stderr and "read-only" in res.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["probe", "--threads", "100000", "--nproc", "2"], "--threads"),
        (["probe", "--max-bytes", "99999999999999999999"], "--max-bytes"),
        (["validate", "--profile", "x", "--steps", "99999"], "--steps"),
        (["validate", "--profile", "x", "--repeats", "1000"], "--repeats"),
        (["calibrate", "none.json", "--name", "a" * 300], "--name"),
    ],
)
def test_unbounded_options_are_bounded(tmp_path: Path, args: list[str], says: str) -> None:
    res = run_cli(*args, "--out", str(tmp_path / "p.json")) if args[0] == "probe" else None
    res = res or run_cli(*args)
    assert res.returncode == 2 and f"error: {says}:" in res.stderr, res.stderr
    assert not (tmp_path / "p.json").exists()


def test_file_system_errors_say_what_to_do() -> None:
    what, hint = os_error_text(OSError(errno.ENOSPC, "No space left on device"))
    assert "writing the output" in what and "space" in hint
    long = "/d" * 200
    what, hint = os_error_text(OSError(errno.ENAMETOOLONG, "File name too long", long))
    assert "400 characters" in what and len(what) < 250 and "shorter" in hint
    what, hint = os_error_text(OSError(errno.EACCES, "Permission denied", "/x/y.yaml"))
    assert "/x/y.yaml" in what and "permissions of /x/y.yaml" in hint


@pytest.mark.parametrize(
    ("args", "says", "hint"),
    [
        (["sweep", "llama3-70b-buy-orr-rent"], "no such sweep spec", "llama3-70b-buy-or-rent"),
        (
            ["simulate", str(REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml")],
            "this is a gpu profile",
            "cluster.gpu: NAME",
        ),
        (["profiles", "show", "llama3-8b"], "is a model preset", "model: llama3-8b"),
        (["schema", "--profile", "price"], "two kinds", "cloud_price"),
        # an unset shell variable is not the current folder
        (["simulate", ""], "no scenario file given", "llama3-8b-8xh100"),
        (["compare", " ", str(BASE)], "no scenario file given", "bundled one by name"),
        (["sweep", ""], "no sweep spec file given", "scale-up-vs-scale-out"),
    ],
)
def test_a_thing_of_another_kind_is_named(args: list[str], says: str, hint: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2 and says in res.stderr and hint in res.stderr, res.stderr


def test_calibrate_deeper_than_the_search_reaches_adds_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Profile folders are searched two levels down; a calibration written deeper under
    ./hardware_profiles is found through the search path for the rest of the command (and the
    note says how to find it later), where it failed after writing its files."""
    import json

    from conftest import h100_probe_two_ranks

    probe = tmp_path / "p.json"
    probe.write_text(json.dumps(h100_probe_two_ranks()))
    monkeypatch.delenv("CLUSTERSIM_PROFILE_PATH", raising=False)
    deep = "hardware_profiles/calibrated/siteA/2026"
    res = run_cli("calibrate", str(probe), "--name", "deep1", "--out-dir", deep, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / deep / "deep1.yaml").is_file()
    assert "CLUSTERSIM_PROFILE_PATH" in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("model.layers.99=4", "'99' is not a field name"),
        ("training.seq_len.3=4", "training.seq_len is not a list here"),
        ("parallelism.stage_layers.1=4", "a list item cannot be set on its own"),
    ],
)
def test_a_number_in_a_set_path_is_explained(path: str, says: str) -> None:
    res = run_cli("simulate", "llama3-8b-8xh100", "--set", path)
    assert res.returncode == 2 and says in res.stderr, res.stderr


def test_a_control_character_in_a_field_name_is_shown_escaped() -> None:
    res = run_cli("simulate", "llama3-8b-8xh100", "--set", "cluster.g\x01pu=x")
    assert res.returncode == 2 and "unknown field 'g\\x01pu'" in res.stderr, res.stderr


@pytest.mark.parametrize("odd", ["\x01", "\x85", "\u202e"])
def test_an_output_path_with_a_control_character_is_refused(tmp_path: Path, odd: str) -> None:
    """'trace written to ab.json' was printed for a file actually named a\\x01b.json."""
    res = run_cli(
        "simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", f"{tmp_path}/a{odd}b.json"
    )
    assert res.returncode == 2 and "control character" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []
    ok = run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", f"{tmp_path}/é.json")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("option", ["--trace", "--out"])
def test_an_output_name_too_long_for_a_file_system_names_the_option(
    tmp_path: Path, option: str
) -> None:
    """A 305-character file name gave 'File name too long' without the option's name."""
    long = f"{tmp_path}/{'a' * 300}.json"
    if option == "--trace":
        res = run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", long)
    else:
        res = run_cli("sweep", "gpu-generations", "--out", long[:-5] + ".csv")
    assert res.returncode == 2, res.stderr
    assert f"{option}:" in res.stderr and "more than a file system allows" in res.stderr
