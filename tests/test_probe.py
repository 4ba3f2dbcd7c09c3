"""The probe with real gloo process groups (2 ranks): end to end through calibrate and
simulate, and a rank killed on purpose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

QUICK = ["--max-bytes", "1048576", "--time-budget", "6", "--timeout", "30"]


def clustersim(*args: str, cwd: Path, timeout: float = 170):
    """The installed console script. (`python -m simulator.cli` would put the working directory
    first on sys.path, where a local hardware_profiles/ folder shadows the bundled package.)"""
    import shutil
    import subprocess

    exe = shutil.which("clustersim")
    assert exe, "the clustersim console script is not installed"
    p = subprocess.run(
        [exe, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )
    return p


def test_probe_calibrate_simulate(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "probe.json"
    r = clustersim("probe", "--nproc", "2", "--out", str(out), *QUICK, cwd=tmp_path, timeout=170)
    assert r.returncode == 0, r.stderr
    # 6 s is below one short run of every timing: the probe says how long it took instead
    assert "against --time-budget 6 s" in r.stderr and "Traceback" not in r.stderr
    d = json.loads(out.read_text())
    assert d["format"] == "clustersim-probe" and d["version"] == 1 and d["complete"] is True
    assert d["world_size"] == 2 and d["backend"] == "gloo"
    # The ranks keep freed memory in their heap, as a GPU's caching allocator does.
    from calibrate.probe import HEAP_KEEPING_ENV

    assert d["malloc_env"] == {k: os.environ.get(k, v) for k, v in HEAP_KEEPING_ENV.items()}
    ops = {c["op"] for c in d["collectives"]}
    assert {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p"} <= ops
    for c in d["collectives"]:
        assert c["time_s"] > 0 and c["busbw_gbps"] >= 0
    assert d["matmul"] and d["memory"] and d["storage"]["write_gbps"] > 0
    # GEMMs timed one call at a time with the caches emptied first, the warm time beside
    mm = d["matmul"]
    assert all(r["timing"] == "cold" and r["warm_time_s"] > 0 for r in mm)
    # copies from cache-sized to memory-sized tensors (the cache tier)
    assert len([r for r in d["memory"] if r["kind"] == "copy"]) == 9
    # attention at the job's sequence and at half, twice and four times it
    seqs = sorted(r["seq"] for r in d["attention_curve"])
    assert len(seqs) == 4 and d["attention"]["seq"] in seqs and seqs[-1] == 4 * seqs[1]
    sv = d["speed_variation"]["block_times_s"]
    assert len(sv) == 2 and len(sv[0]) == len(sv[1]) >= 10 and min(map(min, sv)) > 0
    jo = d["job_ops"]
    assert {"layernorm", "gelu", "add", "cross_entropy", "optimizer"} <= set(jo)
    assert all(v["time_s"] > 0 for v in jo.values()) and jo["optimizer"]["params"] > 1e6
    # ... and the memory-bound ones on a quarter to four times the job's tokens
    js = d["job_ops_scaled"]
    assert {r["key"] for r in js} == {"layernorm", "gelu", "add", "cross_entropy"}
    scales = sorted({r["scale"] for r in js})
    # a 6 s budget may skip the larger multiples, and says so
    assert scales[:2] == [0.25, 0.5]
    assert scales == [0.25, 0.5, 2.0, 4.0] or any("token counts" in n for n in d["notes"])
    assert min(r["time_s"] for r in js) > 0
    tr = d["train"]
    assert tr["params"] > 1e6 and len(tr["step_times_s"]) >= 3 and tr["wrapper"] == "ddp"
    # the same step without gradient sync, per rank
    cs = tr["compute_step_times_s"]
    assert len(cs) == 2 and all(len(r) == len(tr["step_times_s"]) for r in cs)
    assert min(map(min, cs)) > 0 and tr["compute_step_median_s"] > 0
    # ... and by one process while the host's other waits
    assert len(tr["alone_compute_step_times_s"]) == len(tr["step_times_s"])
    # ... and at half the batch, alternating with the full-batch steps
    assert tr["half_batch"] == tr["batch_per_rank"] // 2
    hs = tr["compute_half_step_times_s"]
    assert len(hs) == 2 and [len(r) for r in hs] == [len(r) for r in cs] and min(map(min, hs)) > 0
    assert not list(tmp_path.glob("**/clustersim-probe-*.bin"))

    r = clustersim("calibrate", str(out), "--name", "t-cluster", "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["in_sample"]["predicted_s"] > 0
    cal = tmp_path / "hardware_profiles" / "calibrated"
    for n in ("t-cluster", "t-cluster-fabric", "t-cluster-storage"):
        assert (cal / f"{n}.yaml").is_file()
    assert "probe probe.json" in (cal / "t-cluster-fabric.yaml").read_text()
    assert "R²=" in (cal / "t-cluster-fabric.yaml").read_text()
    gpu_yaml = yaml.safe_load((cal / "t-cluster.yaml").read_text())
    assert 0 <= gpu_yaml["speed_cv"]["value"] < 1
    assert "block times" in gpu_yaml["speed_cv"]["source"]
    eff = gpu_yaml["efficiency"]
    assert "job's own memory-bound operations" in eff["memory_bandwidth"]["source"]
    assert 0 < eff["optimizer_bandwidth"]["value"] <= 1
    if "gemm_weight_bandwidth" in eff:  # where the step has a batch-independent part
        assert 0 < eff["gemm_weight_bandwidth"]["value"] <= 1
        assert "does not shrink with the batch" in eff["gemm_weight_bandwidth"]["source"]
    else:  # the single factor says why
        assert "no weight-streaming term" in eff["in_step_factor"]["source"]
    if "cache_mb" in gpu_yaml:  # where the copies showed a faster cache
        assert (
            gpu_yaml["cache_bandwidth_gbps"]["value"] > gpu_yaml["memory_bandwidth_gbps"]["value"]
        )
        assert "cache tier" in gpu_yaml["cache_mb"]["source"]
    if "attention_half_seq" in eff:  # a curve where efficiency rose with length
        assert eff["attention_half_seq"]["value"] > 0
        assert "sequence lengths" in eff["attention_half_seq"]["source"]
    assert 0.2 < eff["in_step_factor"]["value"] < 5
    assert "training steps without communication" in eff["in_step_factor"]["source"]
    side = json.loads((cal / "t-cluster.calibration.json").read_text())
    assert 0.2 < side["compute_fit"]["in_step_factor_alone"] < 5
    # A probe file from before the speed-variation and communication-free step measurements
    # still calibrates, without a speed_cv (so predictions for it leave stragglers off) and
    # without an in-step factor.
    old = tmp_path / "runs" / "old.json"
    old_d = {k: v for k, v in d.items() if k != "speed_variation"}
    old_d["train"] = {k: v for k, v in tr.items() if not k.startswith("compute_step")}
    old.write_text(json.dumps(old_d))
    r = clustersim("calibrate", str(old), "--name", "t-old", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    old_yaml = yaml.safe_load((cal / "t-old.yaml").read_text())
    assert "speed_cv" not in old_yaml and "in_step_factor" not in old_yaml["efficiency"]

    # --out-dir outside the folders clustersim searches: the in-sample check still finds the
    # new profiles, and the report says how to make later commands find them.
    elsewhere = tmp_path / "elsewhere" / "profiles"
    r = clustersim(
        "calibrate", str(out), "--name", "t-away", "--out-dir", str(elsewhere),
        "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["in_sample"]["predicted_s"] > 0
    assert f"CLUSTERSIM_PROFILE_PATH={elsewhere.resolve()}" in rep["profile_path_hint"]
    assert (elsewhere / "t-away.yaml").is_file()
    r = clustersim("calibrate", str(out), "--name", "t-here", cwd=tmp_path)
    assert r.returncode == 0 and "CLUSTERSIM_PROFILE_PATH" not in r.stdout

    # Scenarios find the calibrated profiles by name (relative to the working directory).
    from calibrate.model import ProbeTransformer
    from calibrate.scenario import job_scenario, model_spec
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate
    from simulator.workload.model import param_count

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        from simulator.catalog import _load

        _load.cache_clear()
        rs = resolve_dict(job_scenario("t-cluster", tr["model"], 2, stragglers=True))
        res = simulate(rs, scaling=False)
    finally:
        os.chdir(cwd)
        _load.cache_clear()
    assert rs.gpu.name == "t-cluster" and rs.fabric.name == "t-cluster-fabric"
    assert 0 < res.metrics.step_time_s < 100
    cv = gpu_yaml["speed_cv"]["value"]
    compute = res.metrics.breakdown_s["compute"] + res.metrics.breakdown_s["optimizer"]
    assert res.metrics.breakdown_s["straggler"] == pytest.approx(
        cv / np.sqrt(np.pi) * compute, rel=1e-6
    )
    # The simulated model is the trained one: same parameter count.
    m = tr["model"]
    net = ProbeTransformer(m["layers"], m["hidden"], m["heads"], m["vocab"], m["seq"])
    assert param_count(rs.model, m["seq"]) == sum(p.numel() for p in net.parameters())
    assert rs.model.model_dump(exclude_unset=True) == model_spec(m)


def test_killed_rank_stops_probe_with_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = clustersim(
        "probe",
        "--nproc",
        "2",
        "--out",
        str(out),
        *QUICK,
        "--fail-rank",
        "1",
        "--fail-phase",
        "compute",
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode != 0
    assert "rank 1" in r.stderr and "compute" in r.stderr
    # the cause as the rank wrote it (its error output goes to a file, not an unread pipe)
    assert "its last error: probe: rank 1 failing on purpose" in r.stderr
    d = json.loads(out.read_text())  # valid JSON
    assert d["complete"] is False
    assert d["error"]["rank"] == 1 and d["error"]["phase"] == "compute"
    assert d["collectives"], "measurements completed before the fault are kept"
    assert "compute" not in d["phases_done"]
    # calibrate refuses it with one clear message
    r = clustersim("calibrate", str(out), "--name", "x", cwd=tmp_path)
    assert r.returncode == 2 and "rank 1 died" in r.stderr


def test_hung_rank_is_named_within_timeout(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = clustersim(
        "probe",
        "--nproc",
        "2",
        "--out",
        str(out),
        "--max-bytes",
        "4096",
        "--time-budget",
        "3",
        "--timeout",
        "5",
        "--fail-rank",
        "0",
        "--fail-phase",
        "memory",
        "--fail-mode",
        "hang",
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode != 0
    assert "rank 0" in r.stderr and "memory" in r.stderr and "hung" in r.stderr
    d = json.loads(out.read_text())
    assert d["complete"] is False and d["matmul"]


def _ranks_writing(out: Path) -> list[int]:
    """Process ids whose command line names ``out`` (the probe's rank processes)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"calibrate.probe" in cmd and str(out).encode() in cmd:
            pids.append(int(d.name))
    return pids


def test_a_terminated_probe_stops_its_ranks(tmp_path: Path) -> None:
    """`kill -TERM` (a scheduler's cancel, a closed session) stops the rank processes too and
    keeps the measurements so far, as Ctrl-C does; before, the ranks ran on as orphans."""
    import shutil
    import signal
    import subprocess
    import time

    out = tmp_path / "p.json"
    exe = shutil.which("clustersim")
    assert exe
    p = subprocess.Popen(
        [exe, "probe", "--nproc", "2", "--out", str(out), "--time-budget", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while len(_ranks_writing(out)) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert len(_ranks_writing(out)) == 2, "the probe did not start its two ranks"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("interrupted:") and "Traceback" not in err
    # (generous: a rank's torch shutdown on a busy 2-core machine takes seconds)
    deadline = time.monotonic() + 60
    while _ranks_writing(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ranks_writing(out)


def test_a_killed_launcher_takes_its_ranks_with_it(tmp_path: Path) -> None:
    """`kill -9` of the launcher cannot run its handler: the ranks end by themselves (their
    parent-death signal) instead of measuring on at full load as orphans."""
    import shutil
    import signal
    import subprocess
    import time

    out = tmp_path / "p.json"
    exe = shutil.which("clustersim")
    assert exe
    p = subprocess.Popen(
        [
            exe,
            "probe",
            "--nproc",
            "2",
            "--out",
            str(out),
            "--time-budget",
            "300",
            "--timeout",
            "300",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while len(_ranks_writing(out)) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert len(_ranks_writing(out)) == 2, "the probe did not start its two ranks"
    time.sleep(3)  # past their start-up, whose writes to the launcher's pipes would fail
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    # orphans measured on until their own hang watchdog (--timeout) or the budget's end; with
    # the parent-death signal (SIGTERM, which they do not handle) they end at once. Without
    # it they ran on here for 25-30 s, until a write to the dead launcher's pipe failed.
    deadline = time.monotonic() + 10
    while _ranks_writing(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ranks_writing(out)


def test_a_timeout_shorter_than_start_up_says_so_not_hung(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = clustersim("probe", "--nproc", "1", "--out", str(out), "--timeout", "0.5", cwd=tmp_path)
    assert r.returncode == 3
    assert "had not started after --timeout 0.5 s" in r.stderr and "longer --timeout" in r.stderr
