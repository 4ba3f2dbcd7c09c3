"""Inputs that used to give a traceback, a silently wrong result or a lost file, each now
refused with one message (exit 2) or handled: a mistyped path that ran a bundled scenario of
the same name, colliding compare labels, odd sweep axis values and names, a sweep over a base
that is itself invalid, numbers too large for a float, the probe and calibration without torch,
plots over the user's files, and odd option values."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, h100_probe_two_ranks, run_cli, write_yaml
from test_errors import assert_user_error

BUNDLED = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _scenario(**changes: Any) -> dict[str, Any]:
    data = yaml.safe_load(BUNDLED.read_text())
    for path, value in changes.items():
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return data


def _refused(res: Any, *words: str) -> None:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


def test_a_mistyped_folder_is_not_replaced_by_the_bundled_scenario(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    write_yaml(mine / BUNDLED.name, _scenario(**{"training.global_batch": 128}))
    res = run_cli("check", "mien/llama3-8b-8xh100.yaml", cwd=tmp_path)
    _refused(res, "no such scenario file", "give just llama3-8b-8xh100")
    res = run_cli("sweep", "typo/gpu-generations.yaml", "--out", "o.csv", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    # The README's paths (the bundled layout) and bare names still find the bundled files
    # from any folder.
    assert run_cli("check", "scenarios/llama3-8b-8xh100.yaml", cwd=tmp_path).returncode == 0
    assert run_cli("check", "llama3-8b-8xh100", cwd=tmp_path).returncode == 0


def test_compare_labels_are_distinct_and_never_a_column_of_its_own(tmp_path: Path) -> None:
    from simulator.compare import _unique

    for names in (["x", "x", "x #2"], ["metric", "best"], ["a", "a", "a"], ["a", "b"]):
        labels = _unique(names)
        assert len(set(labels)) == len(labels), labels
        assert not {"metric", "best"} & set(labels)
    files = []
    for name, batch in (("x", 64), ("x", 128), ("x #2", 256)):
        f = tmp_path / f"{len(files)}.yaml"
        write_yaml(f, _scenario(name=name, **{"training.global_batch": batch}))
        files.append(str(f))
    res = run_cli("compare", *files, "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    header = rows[0]
    assert len(set(header)) == len(header), header
    # the three step times all survive, one per column
    step = next(r for r in rows if r[0] == "step_time_s")
    assert len({float(v) for v in step[1:4]}) == 3


@pytest.mark.parametrize(
    "axes, words",
    [
        ([{"cluster.nodes": ["2024-01-01"]}], ["axes[0]", "is a date"]),
        (
            [
                {"opt": [{"training.global_batch": 64}, {"training.global_batch": 128}]},
                {"opt": [{"run.tokens": 1.0e11}, {"run.tokens": 2.0e11}]},
            ],
            ["both named 'opt'"],
        ),
    ],
)
def test_sweep_axes_that_cannot_be_columns_are_refused(
    tmp_path: Path, axes: list[Any], words: list[str]
) -> None:
    text = yaml.safe_dump({"name": "t", "base": str(BUNDLED), "axes": axes})
    # a YAML date, not a quoted string
    (tmp_path / "s.yaml").write_text(text.replace("'2024-01-01'", "2024-01-01"))
    _refused(run_cli("sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o.csv")), *words)
    assert not (tmp_path / "o.csv").exists()


def test_a_named_axis_may_set_a_top_level_field() -> None:
    from simulator.sweep.spec import SweepSpec, points

    spec = SweepSpec.model_validate(
        {
            "name": "t",
            "base": str(BUNDLED),
            "axes": [
                {
                    "size": [
                        {"model": "llama3-8b", "training.global_batch": 64},
                        {"model": "llama3-70b", "training.global_batch": 128},
                    ]
                }
            ],
        }
    )
    sets = [p.sets for p in points(spec)]
    assert sets[1][0].startswith("model=") and "llama3-70b" in sets[1][0]


def test_an_auto_sweep_over_an_invalid_base_says_why(tmp_path: Path) -> None:
    write_yaml(tmp_path / "base.yaml", _scenario(**{"cluster.nodes": -1}))
    write_yaml(
        tmp_path / "s.yaml", {"name": "t", "base": "base.yaml", "parallelism": {"pp": "auto"}}
    )
    res = run_cli("sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o.csv"))
    _refused(res, "cluster.nodes")


def test_numbers_too_large_for_a_float_are_refused_not_crashed(tmp_path: Path) -> None:
    big = "1" + "0" * 400
    for field in ("memory_gb", "tdp_w"):
        res = run_cli("check", str(BUNDLED), "--set", f"cluster.gpu.{field}={big}")
        _refused(res, f"cluster.gpu.{field}", "too large")
        assert len(res.stderr) < 1000  # the --set it blames is shortened
    # A local profile file with such a number breaks only the scenarios that use it.
    gpus = tmp_path / "hardware_profiles" / "gpus"
    gpus.mkdir(parents=True)
    prof = yaml.safe_load((REPO / "hardware_profiles/gpus/h100-sxm-80gb.yaml").read_text())
    prof["name"] = "mygpu"
    prof["tdp_w"]["value"] = int(big)
    (gpus / "mygpu.yaml").write_text(yaml.safe_dump(prof))
    assert run_cli("check", "llama3-8b-8xh100", cwd=tmp_path).returncode == 0
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu=mygpu", cwd=tmp_path)
    _refused(res, "mygpu", "too large")


def test_calibration_needs_no_torch_and_the_probe_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    # calibrate adds its output folder to the search path for the rest of the process
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path / "o"))
    probe = tmp_path / "p2.json"
    probe.write_text(json.dumps(h100_probe_two_ranks()))
    res = run_cli("calibrate", str(probe), "--name", "x", "--out-dir", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "o" / "x.calibration.json").is_file()
    res = run_cli("probe", "--out", str(tmp_path / "new.json"))
    _refused(res, "needs torch", "clustersim[probe]")
    assert not (tmp_path / "new.json").exists()
    res = run_cli("validate", "--profile", "x")
    _refused(res, "needs torch")


def _small_sweep(tmp_path: Path) -> Path:
    return write_yaml(
        tmp_path / "s.yaml",
        {"name": "t", "base": str(BUNDLED), "axes": [{"cluster.nodes": [1, 2]}]},
    )


def test_plots_never_replace_a_file_of_the_users(tmp_path: Path) -> None:
    spec = _small_sweep(tmp_path)
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "t-idle.png").write_text("my notes")
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "a.csv"), "--plot", str(plots))
    _refused(res, "t-idle.png", "--plot")
    assert (plots / "t-idle.png").read_text() == "my notes"
    (plots / "t-idle.png").unlink()
    for out in ("b.csv", "c.csv"):  # a second run replaces the plots the first one wrote
        res = run_cli("sweep", str(spec), "--out", str(tmp_path / out), "--plot", str(plots))
        assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in plots.iterdir()) == [
        "t-cost-time.png",
        "t-idle.png",
        "t-scaling.png",
    ]
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "d.csv"), "--plot", "")
    _refused(res, "--plot", "empty path")


@pytest.mark.parametrize(
    "args, words",
    [
        (["check", str(BUNDLED), "--set", "parallelism..tp=4"], ["empty part"]),
        (["check", str(BUNDLED), "--set", "parallelism.stage_layers.0=5"], ["list item"]),
        (["schema", "--sweep", "--profile", "gpu"], ["--sweep and --profile"]),
        (["simulate", str(BUNDLED), "--trace", "-"], ["--trace"]),
        (
            ["check", "llama3-70b-64xh100", "--set", "cluster.network.port_gbps=100"],
            ["cluster.network.profile.port_gbps"],
        ),
    ],
)
def test_odd_option_values_get_one_message(args: list[str], words: list[str]) -> None:
    _refused(run_cli(*args), *words)


@pytest.mark.parametrize("opt", ["--budget-usd", "--deadline-days"])
def test_constraints_that_are_not_numbers_are_refused(tmp_path: Path, opt: str) -> None:
    spec = _small_sweep(tmp_path)
    res = run_cli(
        "sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--best", "cost", opt, "nan"
    )
    _refused(res, opt, "finite")


def test_a_bucket_below_a_tensor_holds_one_tensor_and_too_many_are_refused(
    tmp_path: Path,
) -> None:
    """A schema-valid 0.001 MB bucket: buckets hold whole tensors, so it is one collective per
    tensor (it once counted millions and ran out of memory), and it runs. Where even that is
    too many collectives to simulate (ZeRO-2 reduces every micro-batch, full mode every rank),
    it is refused up front, naming the field."""
    data = _scenario()
    data["parallelism"] = {
        "tp": 4,
        "sharding": {"kind": "zero", "stage": 1},
        "dp_bucket_mb": 0.001,
        "overlap": {"dp_grad": False},
    }
    path = write_yaml(tmp_path / "tiny.yaml", data)
    res = run_cli("simulate", str(path), "--format", "json", "--no-scaling")
    assert res.returncode == 0, res.stderr
    data["cluster"]["nodes"] = 32
    data["cluster"]["network"] = {"profile": "ib-ndr-400", "nics_per_node": 8}
    data["training"]["global_batch"] = 64 * 64
    data["parallelism"]["sharding"] = {"kind": "zero", "stage": 2}
    path = write_yaml(tmp_path / "many.yaml", data)
    _refused(run_cli("simulate", str(path), "--full"), "dp_bucket_mb", "collectives per rank")


@pytest.mark.parametrize(
    "schedule, global_batch, refused",
    [("gpipe", 1 << 21, True), ("1f1b", 1 << 21, False), ("gpipe", 1 << 12, False)],
)
def test_gpipe_has_its_own_pass_limit(
    tmp_path: Path, schedule: str, global_batch: int, refused: bool
) -> None:
    """GPipe is simulated pass by pass (no steady state to extrapolate), so it is refused at
    far fewer passes than 1F1B, whose cost does not grow with the micro-batch count."""
    data = {
        "name": "tiny",
        "cluster": {"gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nodes": 2,
                    "fabric": "nvlink4-nvswitch",
                    "network": {"profile": "ib-ndr-400", "nics_per_node": 8}},
        "model": {"layers": 2, "hidden": 64, "heads": 1, "vocab": 128},
        "training": {"seq_len": 1, "global_batch": global_batch, "micro_batch": 1},
        "parallelism": {"pp": 2, "pp_schedule": schedule},
    }  # fmt: skip
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    res = run_cli("check", str(f), "--format", "json")
    if refused:
        assert_user_error(res, file=f, path="training.global_batch", says=("GPipe",))
    else:
        assert res.returncode == 0, res.stderr


def test_own_and_rent_together_are_refused() -> None:
    res = run_cli("sweep", "gpu-generations", "--out", "x.csv", "--best", "cost", "--own", "--rent")
    assert res.returncode == 2 and "--own and --rent contradict" in res.stderr


def test_an_output_folder_the_file_system_refuses_is_named_before_any_work() -> None:
    """/proc passes a permission check but takes no new files: --out names the folder, not a
    file the probe would have made inside it."""
    res = run_cli("probe", "--out", "/proc/p.json")
    assert res.returncode == 2 and "--out" in res.stderr and ".hb" not in res.stderr


def test_simulate_csv_keeps_its_notes_on_stderr() -> None:
    """A CSV row has no column for notes, so a unit slip's warning goes to stderr (as check's
    notes do) rather than nowhere, and stdout stays one parseable CSV."""
    res = run_cli(
        "simulate",
        "llama3-8b-8xh100",
        "--no-scaling",
        "--format",
        "csv",
        "--set",
        "cluster.gpu.memory_bandwidth_gbps=4",
    )
    assert res.returncode == 0, res.stderr
    assert "note:" in res.stderr and "unit" in res.stderr.lower(), res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert len(rows) == 2 and "step_time_s" in rows[0]


@pytest.mark.parametrize("value", ["'yes'", "'on'", "1", "'true'"])
def test_a_switch_takes_true_or_false_only(value: str) -> None:
    """Counts refuse '8' and 8.0, so a switch refuses 'yes', 'on' and 1 alike rather than read
    them as true (an unquoted yes/no is YAML's own boolean and still reads as one)."""
    res = run_cli("check", "llama3-8b-8xh100", "--set", f"parallelism.sequence_parallel={value}")
    assert_user_error(res, file=None, path="parallelism.sequence_parallel", says=("boolean",))
    assert "write true or false" in res.stderr
    ok = run_cli("check", "llama3-8b-8xh100", "--set", "parallelism.sequence_parallel=yes")
    assert ok.returncode == 0, ok.stderr
