"""A probe that stopped early or ran without a phase is calibrated saying so: a warning naming
why it stopped, figures it did not measure cited as estimates with their reasoning, and a host
memory size it could not read refused. (Split from test_damaged_files.)"""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import run_cli
from test_damaged_files import _probe
from test_errors import assert_user_error


def test_an_incomplete_probe_is_calibrated_with_a_warning(tmp_path: Path) -> None:
    """A probe that stopped after every section the fits need is still calibrated, but no
    longer silently: the warning says it stopped and why."""

    def stopped(d: dict) -> None:  # type: ignore[type-arg]
        d.update(complete=False, error={"message": "rank 1 died in phase storage"})

    f = _probe(tmp_path, stopped)
    res = run_cli("calibrate", str(f), "--name", "inc", "--out-dir", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert "did not complete (rank 1 died in phase storage)" in res.stderr


def test_a_probe_without_its_storage_phase_gives_estimates_that_say_so(tmp_path: Path) -> None:
    """The storage profile of a probe run without its storage phase cites its figures as
    estimates, with the reasoning (they were "not measured: placeholder")."""
    f = _probe(tmp_path, lambda d: d.pop("storage", None))
    out = tmp_path / "out"
    res = run_cli("calibrate", str(f), "--name", "nost", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    st = yaml.safe_load((out / "nost-storage.yaml").read_text())
    for key in ("read_gbps_per_client", "write_gbps_per_client", "latency_ms"):
        assert "estimate: not measured" in st[key]["source"], st[key]


def test_a_cpu_probe_without_its_host_memory_is_refused(tmp_path: Path) -> None:
    """With no host memory size (sysconf said nothing) the calibrated device got a 0.1 GB
    floor, so no scenario on it fit; it is refused, naming the field."""

    def cpu_without_memory(d: dict) -> None:  # type: ignore[type-arg]
        d.update(device_type="cpu", cpu_model="a CPU", memory_bytes=None)

    f = _probe(tmp_path, cpu_without_memory)
    res = run_cli("calibrate", str(f), "--name", "nomem", "--out-dir", str(tmp_path / "out"))
    assert_user_error(res, file=f, path="memory_bytes", says=("no host memory",))


def test_a_probe_without_its_attention_phase_says_the_figure_is_an_estimate(
    tmp_path: Path,
) -> None:
    def no_attention(d: dict) -> None:  # type: ignore[type-arg]
        d.pop("attention", None)
        d.pop("attention_curve", None)

    f = _probe(tmp_path, no_attention)
    out = tmp_path / "out"
    res = run_cli("calibrate", str(f), "--name", "noatt", "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    gpu = yaml.safe_load((out / "noatt.yaml").read_text())
    assert "estimate: not measured" in gpu["efficiency"]["attention_max"]["source"]


def test_a_storage_test_that_cannot_write_leaves_storage_unmeasured(tmp_path: Path) -> None:
    """A storage folder that refuses the test file (no room, here a folder in the file's way)
    is a note and no storage figures, not a dead rank that loses the probe's other phases."""
    import os
    import socket

    from calibrate.probe import Probe, parser

    folder = tmp_path / "store"
    folder.mkdir()
    (folder / f"clustersim-probe-{socket.gethostname()}-{os.getpid()}.bin").mkdir()
    args = parser().parse_args(["--out", str(tmp_path / "p.json"), "--storage-path", str(folder)])
    probe = Probe(args)
    probe.result = {"notes": []}
    probe.phase_storage()
    assert probe.result["storage"] == {}
    (note,) = probe.result["notes"]
    assert note.startswith("storage not measured") and str(folder) in note
