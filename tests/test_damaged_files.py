"""Damaged probe files and calibration records, and outputs a failed run must not touch.

Every case goes through the command line as a user would run it: exit 2 with the file and the
field's path, never a traceback, and nothing written (or replaced) by a run that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import h100_probe_two_ranks, run_cli, run_cli_process
from test_errors import assert_user_error


def _probe(tmp_path: Path, edit=None, name: str = "p.json") -> Path:  # type: ignore[no-untyped-def]
    data = h100_probe_two_ranks()
    if edit is not None:
        edit(data)
    f = tmp_path / name
    f.write_text(json.dumps(data))
    return f


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda d: d.update(matmul="x"), "matmul"),
        (lambda d: d.update(train="x"), "train"),
        (lambda d: d["train"].update(model="x"), "train.model"),
        (lambda d: d["train"]["model"].update(hidden="big"), "train.model.hidden"),
        (lambda d: d["collectives"].append("x"), "collectives[8]"),
        (lambda d: d["collectives"][0].pop("group"), "collectives[0].group"),
        (lambda d: d["collectives"][0].update(group_size="two"), "collectives[0].group_size"),
        (lambda d: d["collectives"][0].update(bytes=True), "collectives[0].bytes"),
        (lambda d: d["matmul"][0].pop("tflops"), "matmul[0].tflops"),
        (lambda d: d.update(world_size=0), "world_size"),
        (lambda d: d.update(speed_variation="x"), "speed_variation"),
        (lambda d: d.update(job_ops={"gelu": "x"}), "job_ops.gelu"),
        (lambda d: d.update(storage={"read_gbps": -1.0, "write_gbps": 1.0,
                                     "first_byte_s": 1e-4, "bytes": 1 << 20}),
         "storage.read_gbps"),
        (lambda d: d["train"].update(step_time_median_s=0.0), "train.step_time_median_s"),
        (lambda d: d["collectives"][0].update(group_size=1), "collectives[0].group_size"),
        (lambda d: d["collectives"][0].update(bytes=-1024), "collectives[0].bytes"),
        (lambda d: d["collectives"][0].update(bytes=1e300), "collectives[0].bytes"),
        (lambda d: d["memory"][0].update(bytes_moved=1e300), "memory[0].bytes_moved"),
        (lambda d: d["matmul"][0].update(dtype="int3"), "matmul[0].dtype"),
        (lambda d: d.update(devices=None), "devices"),
        (lambda d: d.update(devices=[5]), "devices[0]"),
        (lambda d: d.update(devices=[None]), "devices[0]"),
        (lambda d: d["op_overhead"].update(time_s=-1), "op_overhead.time_s"),
        (lambda d: d["matmul"][0].update(time_s=0), "matmul[0].time_s"),
        (lambda d: d.update(job_ops={"gelu": {"time_s": -1e-3}}), "job_ops.gelu.time_s"),
        (lambda d: d.update(speed_variation={"reps": 4, "block_times_s": [[], []]}),
         "speed_variation.block_times_s[0]"),
        (lambda d: d.update(train_speed_check={"reps": 4, "block_times_s": [[0.1, -0.1]]}),
         "train_speed_check.block_times_s[0][1]"),
        (lambda d: d["train"].update(compute_step_times_s="x"), "train.compute_step_times_s"),
        (lambda d: d["train"].update(compute_step_times_s=[[0.1, -0.1]]),
         "train.compute_step_times_s[0][1]"),
        (lambda d: d["train"].update(alone_compute_step_median_s="0.1"),
         "train.alone_compute_step_median_s"),
        (lambda d: d["collectives"][0].update(op="all_reduce_coalesced"), "collectives[0].op"),
        (lambda d: d["collectives"][0].update(group_size=3), "collectives[0].group_size"),
        (lambda d: d["memory"][0].update(kind="scale"), "memory[0].kind"),
        (lambda d: d.update(cpu_count="two"), "cpu_count"),
        (lambda d: d.update(memory_bytes="25GB"), "memory_bytes"),
        (lambda d: d.update(procs_per_node=3), "procs_per_node"),
        (lambda d: d.update(train_sync_cost={"median_s": float("nan"), "differences_s": [1e-3]}),
         "train_sync_cost.median_s"),
        (lambda d: d.update(train_sync_cost={"median_s": 1e6, "differences_s": [1e6]}),
         "train_sync_cost.median_s"),
        (lambda d: d.update(train_sync_cost={"median_s": 1e-3, "differences_s": ["x"]}),
         "train_sync_cost.differences_s[0]"),
    ],
)  # fmt: skip
def test_a_damaged_probe_file_names_the_field(tmp_path: Path, edit, path: str) -> None:  # type: ignore[no-untyped-def]
    f = _probe(tmp_path, edit)
    res = run_cli("calibrate", str(f), "--name", "dmg", "--out-dir", str(tmp_path / "out"))
    assert_user_error(res, file=f, path=path, hint=("re-run `clustersim probe`",))
    assert not (tmp_path / "out").exists()


def test_a_probe_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_bytes(b'{"format": "clustersim-probe", "host": "\xff\xfe"}')
    res = run_cli("calibrate", str(f), "--name", "dmg", "--out-dir", str(tmp_path / "out"))
    assert_user_error(res, file=f, path=None, says=("not UTF-8",))


def test_a_probe_file_nested_too_deep_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text('{"a":' * 100_000)
    res = run_cli("calibrate", str(f), "--name", "dmg", "--out-dir", str(tmp_path / "out"))
    assert_user_error(res, file=f, path=None, says=("not valid JSON",))


@pytest.mark.parametrize("command", ["calibrate", "sweep"])
def test_a_pipe_or_device_is_refused_without_reading_it(tmp_path: Path, command: str) -> None:
    """A FIFO would block for ever and /dev/zero never ends: neither is opened."""
    import os

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    more = ["--name", "x", "--out-dir", str(tmp_path / "o")] if command == "calibrate" else []
    if command == "sweep":
        more = ["--out", str(tmp_path / "x.csv")]
    for f in (fifo, Path("/dev/zero")):
        res = run_cli(command, str(f), *more)
        assert_user_error(res, file=f, path=None, says=("not a regular file",))


def test_a_pipe_among_local_profiles_leaves_the_others_usable(tmp_path: Path) -> None:
    import os

    (tmp_path / "hardware_profiles").mkdir()
    os.mkfifo(tmp_path / "hardware_profiles" / "x.yaml")
    res = run_cli("simulate", "llama3-8b-8xh100", "--format", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_a_calibration_that_would_not_load_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(out))
    good = _probe(tmp_path, name="good.json")
    assert run_cli("calibrate", str(good), "--name", "cal", "--out-dir", str(out)).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def slow_first_byte(d: dict) -> None:
        d["storage"]["first_byte_s"] = 1e9  # 1e12 ms: past any profile's range

    bad = _probe(tmp_path, slow_first_byte, name="bad.json")
    res = run_cli("calibrate", str(bad), "--name", "cal", "--out-dir", str(out))
    assert_user_error(res, file=bad, path=None, says=("nothing was written", "latency_ms"))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_very_slow_disk_still_gives_a_profile_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow_disk(d: dict) -> None:
        d["storage"]["read_gbps"] = 5e-4  # 0.5 MB/s, below a profile's 1 MB/s floor

    f = _probe(tmp_path, slow_disk)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(out))
    assert run_cli("calibrate", str(f), "--name", "slow", "--out-dir", str(out)).returncode == 0
    st = yaml.safe_load((out / "slow-storage.yaml").read_text())
    assert st["read_gbps_per_client"]["value"] == 1e-3
    assert "measured 0.0005 GB/s" in st["read_gbps_per_client"]["source"]


@pytest.fixture
def calibrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "cal"
    out.mkdir()
    # set first: calibrate then needs no search-path change of its own (it would outlive the
    # test in this process)
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(out))
    res = run_cli("calibrate", str(_probe(tmp_path)), "--name", "vcal", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    return out / "vcal.calibration.json"


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda d: d.update(fits="x"), "fits"),
        (lambda d: d.update(train="x"), "train"),
        (lambda d: d.update(train=None), "train"),
        (lambda d: d.pop("train"), "train"),
        (lambda d: d["train"]["model"].update(layers=-1), "train.model.layers"),
        (lambda d: d.update(threads_per_process=0), "threads_per_process"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["compute_fit"].update(rms_rel_err="x"), "compute_fit.rms_rel_err"),
        (lambda d: d["fits"][0].update(rms_rel_err="x"), "fits[0].rms_rel_err"),
        (
            lambda d: d["train"].update(compute_step_times_s=[["a", "b"]]),
            "train.compute_step_times_s[0][0]",
        ),
    ],
)
def test_a_damaged_calibration_record_stops_validate_before_any_run(
    calibrated: Path,
    edit,  # type: ignore[no-untyped-def]
    path: str,
) -> None:
    side = json.loads(calibrated.read_text())
    edit(side)
    calibrated.write_text(json.dumps(side))
    res = run_cli("validate", "--profile", "vcal", "--nproc", "1")
    assert_user_error(res, file=calibrated, path=path, hint=("clustersim calibrate",))


@pytest.mark.parametrize(("content", "says"), [("", "is empty"), ('{"format": "clu', "damaged")])
def test_a_truncated_calibration_record_is_called_damaged(
    calibrated: Path, content: str, says: str
) -> None:
    calibrated.write_text(content)
    res = run_cli("validate", "--profile", "vcal", "--nproc", "1")
    assert_user_error(res, file=calibrated, path=None, says=(says,), hint=("--name vcal",))


def test_calibrate_never_replaces_a_record_it_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "w.calibration.json").write_text('{"mine": true}')
    res = run_cli("calibrate", str(_probe(tmp_path)), "--name", "w", "--out-dir", str(out))
    assert_user_error(res, file=None, path="--name", says=("not a calibration record",))
    assert (out / "w.calibration.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in out.iterdir()) == ["w.calibration.json"]


def test_recalibrating_a_name_says_it_replaced_the_earlier_files(calibrated: Path) -> None:
    probe = calibrated.parent.parent / "p.json"
    res = run_cli("calibrate", str(probe), "--name", "vcal", "--out-dir", str(calibrated.parent))
    assert res.returncode == 0, res.stderr
    assert "replaced" in res.stdout and "wrote" not in res.stdout


def test_a_probe_never_replaces_a_file_that_is_not_a_probe(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    res = run_cli("probe", "--nproc", "1", "--time-budget", "5", "--out", str(notes))
    assert_user_error(res, file=None, path="--out", says=("not a probe file",))
    assert notes.read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    res = run_cli("probe", "--nproc", "1", "--out", "")
    assert_user_error(res, file=None, path="--out", says=("empty path",))


def test_validate_refuses_when_no_layout_can_run(calibrated: Path) -> None:
    side = json.loads(calibrated.read_text())
    side["threads_per_process"] = 64  # more than this machine's cores for one process
    calibrated.write_text(json.dumps(side))
    res = run_cli("validate", "--profile", "vcal", "--nproc", "1")
    assert_user_error(res, file=None, path="--nproc/--nodes", says=("no layout can run",))


@pytest.mark.parametrize(
    "args, path",
    [
        (("--nproc", ""), "--nproc"),
        (("--nproc", ","), "--nproc"),
        (("--timeout", "-1"), "--timeout"),
        (("--timeout", "nan"), "--timeout"),
        (("--timeout", "1e308"), "--timeout"),
        (("--workloads", ","), "--workloads"),
        (("--nproc", "0"), "--nproc"),
        (("--nproc", "1,,2"), "--nproc"),
        (("--nodes", "0"), "--nodes"),
        (("--steps", "0"), "--steps"),
        (("--repeats", "0"), "--repeats"),
        (("--nproc", "1000"), "--nproc"),
    ],
)
def test_validate_options_are_checked_first(args: tuple[str, ...], path: str) -> None:
    res = run_cli("validate", "--profile", "h100-sxm-80gb", *args)
    assert_user_error(res, file=None, path=path)


@pytest.mark.parametrize(
    "args, path",
    [
        (("--timeout", "-1"), "--timeout"),
        (("--timeout", "1e10"), "--timeout"),
        (("--threads", "-3"), "--threads"),
        (("--max-bytes", "0"), "--max-bytes"),
        (("--nproc", "0"), "--nproc"),
        (("--nproc", "1000"), "--nproc"),
        (("--time-budget", "inf"), "--time-budget"),
        (("--storage-path", "/nonexistent/scratch"), "--storage-path"),
    ],
)
def test_probe_options_are_checked_before_launching(
    tmp_path: Path, args: tuple[str, ...], path: str
) -> None:
    res = run_cli("probe", "--out", str(tmp_path / "p.json"), *args)
    assert_user_error(res, file=None, path=path)
    assert not list(tmp_path.iterdir())


def test_a_probe_figure_out_of_every_profiles_range_names_the_probe_file(tmp_path: Path) -> None:
    """A GEMM rate of 1e300 TFLOP/s builds a GPU profile that cannot load: the probe file is
    named, not a scenario field of a scenario the user never wrote."""

    def huge(d: dict) -> None:  # type: ignore[type-arg]
        for row in d["matmul"]:
            row["tflops"] = 1e300

    f = _probe(tmp_path, huge)
    res = run_cli("calibrate", str(f), "--name", "dmg", "--out-dir", str(tmp_path / "out"))
    assert_user_error(res, file=f, path=None, says=("probe file's figures",))
    assert not (tmp_path / "out").exists()


def test_a_probe_measured_on_a_busy_machine_is_warned_about(tmp_path: Path) -> None:
    """Processes 2.2x slower together than alone (another job sharing the cores): the
    profiles are written (they are what was measured) but the user is told not to trust them."""
    from simulator.report.calibration import contention_warning

    busy = {"compute_fit": {"in_step_factor": 2.17, "in_step_factor_alone": 0.976},
            "speed_variation": {"cv": 0.227}}  # fmt: skip
    said = contention_warning(busy)
    assert said is not None and "2.22x slower together" in said and "23%" in said
    quiet = {"compute_fit": {"in_step_factor": 0.908, "in_step_factor_alone": 0.95}}
    assert contention_warning(quiet) is None
    # together/alone under the bar (1.47), but block times flipping between 0.1 and 0.2 s: a
    # speed_cv of 45% would book 20% of a 2-GPU step to stragglers
    flipping = {"compute_fit": {"in_step_factor": 1.474, "in_step_factor_alone": 1.0},
                "speed_variation": {"cv": 0.4536}}  # fmt: skip
    said = contention_warning(flipping)
    assert said is not None and "45%" in said and "speed_cv" in said and "slower" not in said
    steady = {**quiet, "speed_variation": {"cv": 0.03}}
    assert contention_warning(steady) is None
    res = run_cli(
        "calibrate", str(_probe(tmp_path)), "--name", "q", "--out-dir", str(tmp_path / "q")
    )
    # the bundled H100 probe: not busy, but its blocks step from 89 to 66 ms mid-probe (19%)
    assert res.returncode == 0 and "busy machine" not in res.stderr
    assert "varied by 19%" in res.stderr and "run.stragglers: off" in res.stderr


def test_validate_refuses_a_missing_calibrated_profile_before_any_live_run(
    calibrated: Path,
) -> None:
    """A calibration whose fabric profile was deleted ran 33 s of live jobs before failing on
    'unknown fabric profile'; every prediction is now made first."""
    side = json.loads(calibrated.read_text())
    side["threads_per_process"] = 1  # (the H100 probe's 16 would fit no layout on this host)
    calibrated.write_text(json.dumps(side))
    (calibrated.parent / "vcal-fabric.yaml").unlink()
    # a fresh process (this one has the catalogue with the fabric file cached)
    env = {"CLUSTERSIM_PROFILE_PATH": str(calibrated.parent)}
    res = run_cli_process("validate", "--profile", "vcal", "--nproc", "1", env=env, timeout=120)
    assert_user_error(
        res, file=calibrated, path=None, says=("cannot be simulated",), hint=("calibrate",)
    )
    assert "live run" not in res.stderr
