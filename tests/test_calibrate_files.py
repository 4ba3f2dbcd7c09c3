"""The calibration's files: a damaged timing is one clear error; a calibration never takes a
name another profile has; an unfinished probe never replaces a complete probe file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_fit import _probe_like

from calibrate.output import check_free
from calibrate.probe_file import load_probe
from simulator.errors import UserError

PROBE = _probe_like(
    collectives=[
        {
            "op": "all_reduce",
            "group": "intra",
            "group_size": 2,
            "bytes": b,
            "time_s": 1e-4 + b / 1e9,
        }
        for b in (1024, 1 << 20)
    ],
    matmul=[
        {"dtype": "fp32", "m": 64, "n": 64, "k": 64, "flops": 5.2e5, "time_s": 1e-5, "tflops": 0.05}
    ],
    memory=[
        {"kind": "copy", "bytes": 1 << 20, "bytes_moved": 2 << 20, "time_s": 1e-4, "gbps": 21.0}
    ],
    train={
        "model": {"layers": 2, "hidden": 64, "heads": 2, "vocab": 128, "seq": 32, "batch": 2},
        "step_time_median_s": 0.1,
    },
)


@pytest.mark.parametrize("bad", [None, 0, -1e-3, float("inf")])
def test_a_damaged_timing_is_a_user_error(tmp_path: Path, bad: object) -> None:
    data = json.loads(json.dumps(PROBE))
    data["collectives"][0]["time_s"] = bad
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    with pytest.raises(UserError) as exc:
        load_probe(f)
    assert exc.value.path == "collectives[0].time_s"


def test_a_calibration_never_takes_another_profiles_name(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        check_free("h100-sxm-80gb", tmp_path)  # a bundled GPU
    assert exc.value.path == "--name" and "gpu profile" in exc.value.message
    # ... even written into the bundled folder itself, next to a calibration record.
    from simulator.catalog import bundled_profiles_dir

    gpus = bundled_profiles_dir() / "gpus"
    with pytest.raises(UserError):
        check_free("h100-sxm-80gb", gpus)
    # In the output folder: a calibration 'mine' wrote mine-fabric.yaml (a fabric). Calibrating
    # 'mine' again replaces its own files; a calibration named 'mine-fabric' would overwrite
    # that fabric with a GPU profile.
    (tmp_path / "mine-fabric.yaml").write_text("kind: fabric\nname: mine-fabric\n")
    with pytest.raises(UserError):  # not known to be calibration 'mine''s own file
        check_free("mine", tmp_path)
    (tmp_path / "mine.calibration.json").write_text('{"format": "clustersim-calibration"}')
    check_free("mine", tmp_path)
    with pytest.raises(UserError) as exc:
        check_free("mine-fabric", tmp_path)
    assert "fabric profile named 'mine-fabric'" in exc.value.message


@pytest.mark.parametrize("where", ["gpus/c1.yaml", "c1.yml", "calibrated/old/c1-storage.yaml"])
def test_a_file_named_for_a_calibrated_profile_anywhere_in_the_folder_is_refused(
    tmp_path: Path, where: str
) -> None:
    """A profile folder holding two files for one name loads neither (catalog): a file named
    for one of the profiles the calibration writes, in a subfolder or as .yml, would leave the
    calibration unloadable. It was written all the same, with exit 0 (a review)."""
    f = tmp_path / where
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("my own file\n")
    (tmp_path / "c1.calibration.json").write_text('{"format": "clustersim-calibration"}')
    with pytest.raises(UserError) as exc:
        check_free("c1", tmp_path)
    assert exc.value.path == "--name" and str(f) in exc.value.message
    check_free("c2", tmp_path)  # other names are free


def test_an_unfinished_probe_never_replaces_a_complete_one(tmp_path: Path) -> None:
    from calibrate.launch import _mark_failed
    from calibrate.probe_base import partial_path

    out = tmp_path / "probe.json"
    out.write_text(json.dumps(PROBE))
    _mark_failed(out, "rank 1 died", 1, "storage", 2, 1)
    assert json.loads(out.read_text()) == PROBE  # the complete probe is untouched
    beside = json.loads(partial_path(out).read_text())
    assert beside["complete"] is False and beside["error"]["message"] == "rank 1 died"
    # Without a complete probe there, the fault is recorded in the file itself.
    other = tmp_path / "new.json"
    _mark_failed(other, "rank 0 died", 0, "compute", 2, 1)
    assert json.loads(other.read_text())["complete"] is False


@pytest.mark.parametrize("factor, noted", [(1.3, True), (1.05, False)])
def test_calibrate_says_when_the_drift_reference_moved(factor: float, noted: bool) -> None:
    """validate rescales its predictions by the probe's end-of-run drift reference; when that
    reference disagrees with the same work timed earlier in the probe, the machine was not
    steady and calibrate says so."""

    from conftest import h100_probe_two_ranks

    from calibrate.fit import calibrate

    probe = h100_probe_two_ranks()
    sv = probe["speed_variation"]
    probe["train_speed_check"] = {
        "block_times_s": [[t * factor for t in sv["block_times_s"][0]]],
        "reps": sv["reps"],
    }
    note = calibrate(probe, "p.json", "zz").sidecar["speed_variation"].get("note")
    assert (note is not None) is noted
    if noted:
        assert "+30%" in note


def test_validate_csv_keeps_the_intervals_and_the_note() -> None:
    from simulator.report.validation import validation_csv_rows

    rep = {
        "rows": [
            {
                "workload": "wide",
                "measured_s": 0.2,
                "measured_interval_s": [0.19, 0.21],
                "predicted_s": 0.22,
                "predicted_interval_s": [0.2, 0.24],
                "verdict": "pass",
                "note": "intervals overlap",
            },
            {"workload": "comm-heavy", "skipped": "needs 2 processes"},
        ]
    }
    keys, rows = validation_csv_rows(rep)
    assert {"measured_low_s", "measured_high_s", "predicted_low_s", "predicted_high_s"} <= set(keys)
    assert rows[0]["measured_low_s"] == 0.19 and rows[0]["predicted_high_s"] == 0.24
    assert rows[0]["note"] == "intervals overlap" and "note" in keys
    assert rows[1]["measured_low_s"] == "" and rows[1]["skipped"]


def test_a_gpu_probes_memory_is_the_devices_never_the_hosts() -> None:
    """A GPU's calibrated memory is what the probe read from the device (torch total_memory);
    a probe file that predates that field falls back on the size its device name states, and
    one with neither is refused: the host's RAM (here 135 GB) once made plans that do not fit
    on an 80 GB H100 look as if they fit."""
    from conftest import h100_probe_two_ranks

    from calibrate.fit import calibrate
    from simulator.errors import UserError

    probe = h100_probe_two_ranks()
    assert probe["memory_bytes"] > 100e9  # the host's
    probe["device_memory_bytes"] = 85_520_809_984
    assert calibrate(probe, "p.json", "zz").gpu["memory_gb"]["value"] == pytest.approx(85.5208)
    del probe["device_memory_bytes"]
    got = calibrate(probe, "p.json", "zz").gpu["memory_gb"]
    assert got["value"] == 80 and "device name" in got["source"]
    probe["devices"] = ["NVIDIA L40S"]
    with pytest.raises(UserError, match="no device memory"):
        calibrate(probe, "p.json", "zz")


def test_recalibrating_removes_the_earlier_network_profile(tmp_path: Path) -> None:
    """Re-calibrating under a name from a one-node probe, after a two-node probe wrote
    NAME-network, removes that network profile (it was kept, and a scenario or `validate`
    naming it timed the network by the earlier probe); the run says so."""
    from conftest import collective_rows, h100_probe_two_ranks, run_cli

    two = h100_probe_two_ranks()
    two.update(world_size=4, procs_per_node=2, nodes=2)
    two["collectives"] += collective_rows("all_reduce", "inter", lambda b: 2e-4 + b / 5e8)
    one = h100_probe_two_ranks()
    for name, data in (("two.json", two), ("one.json", one)):
        (tmp_path / name).write_text(json.dumps(data))
    out = tmp_path / "cal"
    res = run_cli("calibrate", str(tmp_path / "two.json"), "--name", "st2", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / "st2-network.yaml").is_file()
    res = run_cli("calibrate", str(tmp_path / "one.json"), "--name", "st2", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    assert not (out / "st2-network.yaml").exists()
    assert "removed" in res.stdout and "st2-network.yaml" in res.stdout
    assert {p.name for p in out.iterdir()} == {
        "st2.yaml",
        "st2-fabric.yaml",
        "st2-storage.yaml",
        "st2.calibration.json",
    }


@pytest.mark.parametrize("version", [True, "1", 2, 1.5])
def test_a_probe_version_is_the_whole_number_one(tmp_path: Path, version: object) -> None:
    """JSON true equals 1 in Python: it is refused as a version all the same."""
    data = json.loads(json.dumps(PROBE))
    data["version"] = version
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    with pytest.raises(UserError) as exc:
        load_probe(f)
    assert exc.value.path == "version"
