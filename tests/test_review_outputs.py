"""What an outputs review (2026-12-07: traces, machine-readable outputs, durability) and a
physics review found: a second sweep on the same --out is refused while the first runs;
`sweep --best` exits 1 when no layout meets the constraints, so a script can gate on it; a long
output file name is written (its temporary name is bounded); a read-only output is kept even
for root; the Python API's breakdown holds plain floats; a stack that runs the portable
attention kernel where the GPU has a much faster one says so, with the lever."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from test_errors import assert_user_error
from test_sweep import _spec

from simulator.config.loading import load_scenario
from simulator.engine.results import CATEGORIES, STREAMS
from simulator.simulate import simulate


def test_a_second_sweep_on_the_same_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    fd = os.open(tmp_path / ".o.csv.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the first sweep holds it
        res = run_cli("sweep", str(_spec(tmp_path)), "--out", str(out), "--executor", "serial")
        assert_user_error(
            res, file=None, path="--out", says=("another clustersim sweep",), hint=("another",)
        )
        assert not out.exists()
    finally:
        os.close(fd)
    res = run_cli("sweep", str(_spec(tmp_path)), "--out", str(out), "--executor", "serial")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / ".o.csv.lock").exists()  # a finished run leaves no lock behind


def test_a_link_to_an_output_being_written_is_refused_too(tmp_path: Path) -> None:
    out, link = tmp_path / "o.csv", tmp_path / "l.csv"
    out.write_text("")
    link.symlink_to(out)
    fd = os.open(tmp_path / ".o.csv.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a sweep writing o.csv holds it
        res = run_cli("sweep", str(_spec(tmp_path)), "--out", str(link), "--executor", "serial")
        assert_user_error(res, file=None, path="--out", says=("another clustersim sweep",))
    finally:
        os.close(fd)


def test_best_with_nothing_meeting_the_constraints_exits_1(tmp_path: Path) -> None:
    out = str(tmp_path / "o.csv")
    common = ["sweep", str(_spec(tmp_path)), "--out", out, "--executor", "serial"]
    res = run_cli(*common, "--best", "cost", "--deadline-days", "1e-9")
    assert res.returncode == 1, res.stderr
    assert "no layout meets the constraints" in res.stdout
    res = run_cli(*common, "--best", "cost")
    assert res.returncode == 0, res.stderr


def test_a_long_trace_file_name_is_written(tmp_path: Path) -> None:
    name = "a" * 245 + ".json"
    res = run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", str(tmp_path / name))
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / name).read_text())["traceEvents"]


def test_a_read_only_output_is_kept(tmp_path: Path) -> None:
    t = tmp_path / "t.json"
    assert (
        run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", str(t)).returncode == 0
    )
    before = t.read_bytes()
    t.chmod(0o444)
    res = run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", str(t))
    assert_user_error(res, file=None, path="--trace", says=("read-only",))
    assert t.read_bytes() == before


def test_the_breakdown_holds_plain_floats() -> None:
    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml")
    m = simulate(rs, scaling=False).metrics
    json.dumps(m.breakdown_s)
    json.dumps(m.per_class)
    assert all(type(v) is float for v in m.breakdown_s.values())


def test_the_portable_attention_kernel_is_named_where_the_gpu_has_a_faster_one() -> None:
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    rs = load_scenario(base, ["software=torchtitan", "cluster.pricing=null"])
    notes = simulate(rs, scaling=False).notes
    assert any("software.flash_kernel=flash3" in n for n in notes), notes
    # the lever does what the note says, and on a GPU with no faster kernel nothing is said
    fast = load_scenario(
        base, ["software=torchtitan", "software.flash_kernel=flash3", "cluster.pricing=null"]
    )
    assert (
        simulate(fast, scaling=False).metrics.step_time_s
        < simulate(rs, scaling=False).metrics.step_time_s
    )
    a100 = load_scenario(
        base, ["software=torchtitan", "cluster.gpu=a100-sxm4-80gb", "cluster.pricing=null"]
    )
    assert not any("flash_kernel" in n for n in simulate(a100, scaling=False).notes)


@pytest.mark.parametrize(
    ("sets", "full"),
    [
        (["parallelism.pp=4", "parallelism.tp=2", "training.global_batch=32"], False),
        (
            [
                "parallelism.pp=2",
                "parallelism.pp_schedule={kind: interleaved, virtual_stages: 2}",
                "parallelism.cp=2",
                "parallelism.tp=2",
                "training.global_batch=16",
            ],
            False,
        ),
        (["parallelism.pp=2", "parallelism.tp=4", "training.global_batch=16"], True),
        (["parallelism.sharding={kind: zero, stage: 3}", "training.global_batch=16"], True),
    ],
)
def test_the_trace_waits_and_outermost_compute_spans_tile_the_step(
    sets: list[str], full: bool
) -> None:
    """Every GPU thread group of a trace accounts for the whole step: the compute thread's
    outermost spans (passes, optimizer, anything run between passes) and the waits thread's
    labelled idle spans (bubble, exposed communication between passes, data stall) tile it."""
    rs = load_scenario(REPO / "scenarios" / "llama3-8b-8xh100.yaml", sets)
    res = simulate(rs, full=full, trace=True, scaling=False)
    step = res.metrics.step_time_s
    by: dict[tuple[int, int, str], list[dict]] = {}
    for e in res.engine.trace or []:
        if e.get("ph") == "X":
            group, stream = divmod(e["tid"] - 1, 10)
            by.setdefault((e["pid"], group, STREAMS[stream]), []).append(e)
    groups = {(pid, g) for pid, g, _ in by}
    assert groups
    labels = set()
    for pid, g in groups:
        end, busy = -1.0, 0.0
        for e in sorted(by.get((pid, g, "compute"), []), key=lambda e: (e["ts"], -e["dur"])):
            if e["ts"] >= end - 1e-3:  # an outermost span (µs; nested ones lie inside)
                busy += e["dur"]
                end = e["ts"] + e["dur"]
        waits = by.get((pid, g, "waits"), [])
        labels |= {e["args"]["category"] for e in waits}
        assert (busy + sum(e["dur"] for e in waits)) / 1e6 == pytest.approx(step, rel=1e-6)
    assert labels and labels <= set(CATEGORIES) - {"compute", "optimizer", "straggler"}


def test_check_csv_carries_what_the_table_shows() -> None:
    import csv
    import io

    res = run_cli("check", "llama3-70b-64xh100", "--set", "parallelism.tp=2", "--format", "csv")
    assert res.returncode == 1  # does not fit
    (row,) = list(csv.DictReader(io.StringIO(res.stdout)))
    assert row["fits"] == "false" and row["tight"] == "false"
    assert row["layout.tp"] == "2" and float(row["hardware_flops_per_step"]) > 0
    assert "--set parallelism.tp=8" in row["levers"]


def test_a_trace_stops_at_the_event_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is the count itself, not only the estimate made before the run."""
    import simulator.engine.tracing as tracing
    from simulator.errors import UserError

    monkeypatch.setattr(tracing, "TRACE_EVENT_LIMIT", 500)
    rs = load_scenario(REPO / "scenarios" / "llama3-8b-8xh100.yaml")
    with pytest.raises(UserError) as exc:
        simulate(rs, trace=True, scaling=False)
    assert "--trace" in str(exc.value) and "limit of 500 events" in str(exc.value)


def test_a_killed_writes_temporary_file_is_tidied_by_the_next_write(tmp_path: Path) -> None:
    import time

    from simulator.report.files import STALE_TEMPORARY_S, write_atomic

    target = tmp_path / "out.json"
    stale = tmp_path / ".out.json.abcd1234"  # as mkstemp names it; its writer was killed
    fresh = tmp_path / ".out.json.efgh5678"  # another writer's, still at work
    for f in (stale, fresh):
        f.write_text("partial")
    old = time.time() - 2 * STALE_TEMPORARY_S
    os.utime(stale, (old, old))
    write_atomic(target, "{}")
    assert target.read_text() == "{}"
    assert not stale.exists() and fresh.exists()


def test_sweep_answer_file_holds_the_front_and_the_pick(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    out = str(tmp_path / "o.csv")
    ans = tmp_path / "answer.json"
    common = ["sweep", str(spec), "--out", out, "--executor", "serial", "--answer", str(ans)]
    res = run_cli(*common, "--best", "cost")
    assert res.returncode == 0, res.stderr
    doc = json.loads(ans.read_text())
    assert doc["objective"] == "cost" and doc["met"] is True
    assert doc["best"]["point"] in {r["point"] for r in doc["pareto_front"]}
    res = run_cli(*common, "--best", "cost", "--deadline-days", "1e-9")
    assert res.returncode == 1
    doc = json.loads(ans.read_text())
    assert doc["best"] is None and doc["met"] is False and doc["removed_by"]
    res = run_cli(*common[:-1], str(tmp_path / "answer.txt"))
    assert_user_error(res, file=None, path="--answer", says=(".json",))


def test_probe_fsdp_without_a_gpu_is_refused_before_launch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: FSDP runs")
    res = run_cli("probe", "--out", str(tmp_path / "p.json"), "--fsdp")
    assert_user_error(res, file=None, path="--fsdp", says=("needs GPUs",))
    assert not (tmp_path / "p.json").exists()


def test_a_bug_exits_70_not_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash is not a negative answer: `check` exits 1 for a plan that does not fit, so an
    internal error has a code of its own, with its traceback and one line saying what it is."""
    import simulator.check as check

    def broken(*_a: object, **_k: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(check, "check", broken)
    res = run_cli("check", "llama3-8b-8xh100")
    assert res.returncode == 70
    assert "Traceback" in res.stderr and "internal error: ZeroDivisionError" in res.stderr


def test_an_override_quoted_in_the_message_is_the_one_blamed() -> None:
    res = run_cli(
        "check",
        "llama3-70b-64xh100",
        "--set",
        "cluster.gpu=h100-pcie-80gb",
        "--set",
        "cluster.pricing=null",
    )
    assert res.returncode == 2
    assert "(with --set cluster.gpu=h100-pcie-80gb)" in res.stderr


def test_a_probe_run_without_the_launcher_leaves_no_heartbeat_folder(tmp_path: Path) -> None:
    """As under torchrun: nobody but the probe itself is there to remove it."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "calibrate.probe", "--out", str(out), "--max-bytes", "4096"]
    cmd += ["--time-budget", "3", "--phases", "memory"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["complete"] is True
    assert not (tmp_path / "p.json.hb").exists()


def test_a_refused_run_leaves_no_output_folder_behind(tmp_path: Path) -> None:
    trace = tmp_path / "new" / "deeper" / "t.json"
    res = run_cli(
        "simulate", "llama3-8b-8xh100", "--set", "parallelism.tp=3", "--trace", str(trace)
    )
    assert res.returncode == 2
    assert not (tmp_path / "new").exists()
    res = run_cli("simulate", "llama3-8b-8xh100", "--no-scaling", "--trace", str(trace))
    assert res.returncode == 0, res.stderr
    assert trace.is_file()
