"""Output paths a command cannot use (a folder, an empty path, a folder it cannot create, a
plot folder that is a file) and out-of-range numeric options: one message, exit 2, and nothing
run or written first."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, run_cli
from test_errors import assert_user_error

SCENARIO = str(REPO / "scenarios" / "llama3-8b-8xh100.yaml")
SWEEP = str(REPO / "scenarios" / "sweeps" / "gpu-generations.yaml")


def test_trace_into_a_folder_or_nowhere(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    res = run_cli("simulate", SCENARIO, "--trace", str(folder))
    assert_user_error(res, file=None, path="--trace", says=("is a folder",), hint=("file",))
    res = run_cli("simulate", SCENARIO, "--trace", "")
    assert_user_error(res, file=None, path="--trace", says=("empty path",))


@pytest.mark.parametrize(
    "extra, option, says",
    [
        (["--out", "{folder}"], "--out", "is a folder"),
        (["--out", "{file}/sub/r.csv"], "--out", "cannot create the folder"),
        (["--out", "{tmp}/r.csv", "--plot", "{file}"], "--plot", "not a folder"),
    ],
    ids=["out-is-a-folder", "out-under-a-file", "plot-is-a-file"],
)
def test_sweep_refuses_unusable_outputs_before_running(
    tmp_path: Path, extra: list[str], option: str, says: str
) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    file = tmp_path / "taken.txt"
    file.write_text("mine\n")
    args = [a.format(folder=folder, file=file, tmp=tmp_path) for a in extra]
    res = run_cli("sweep", SWEEP, *args)
    assert_user_error(res, file=None, path=option, says=(says,))
    assert file.read_text() == "mine\n"  # nothing the user had is touched
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize(
    "option, value",
    [("--workers", "-3"), ("--workers", "0"), ("--deadline-days", "-5"), ("--max-gpus", "0")],
)
def test_sweep_numeric_options_out_of_range(tmp_path: Path, option: str, value: str) -> None:
    res = run_cli("sweep", SWEEP, "--out", str(tmp_path / "r.csv"), option, value)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and option in res.stderr
    assert not (tmp_path / "r.csv").exists()


def test_ctrl_c_says_what_was_kept() -> None:
    """A real process interrupted by SIGINT (Ctrl-C) mid-simulation: exit 130 and one line."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    exe = shutil.which("clustersim")
    assert exe, "the clustersim console script is not installed"
    scenario = str(REPO / "scenarios" / "gpt3-175b-megatron-1024xa100.yaml")
    p = subprocess.Popen(
        [exe, "simulate", scenario, "--full"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    time.sleep(3.0)  # imports and set-up on a busy 2-core machine; the full run takes longer
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:
        pytest.skip("the simulation finished before the interrupt arrived")
    assert p.returncode == 130, (out, err)
    assert err.strip().startswith("interrupted:") and "Traceback" not in err, err


def test_sweep_output_needs_a_known_format(tmp_path: Path) -> None:
    res = run_cli("sweep", SWEEP, "--out", str(tmp_path / "r.txt"))
    assert_user_error(res, file=None, path="--out", says=("format",), hint=(".csv",))


def test_table_output_into_a_closed_pipe_exits_0() -> None:
    """`clustersim simulate ... | head -1`: the reader stops early; no error, exit 0."""
    import os
    import shutil
    import subprocess

    exe = shutil.which("clustersim")
    assert exe
    for args in (
        ["simulate", "llama3-70b-64xh100", "--format", "table"],
        ["simulate", "llama3-70b-64xh100", "--format", "json"],
        ["simulate", "gpt3-175b-megatron-1024xa100", "--format", "csv", "--no-scaling"],
        ["--help"],  # typer's help through rich, which exits 1 on a closed pipe by itself
        ["sweep", "--help"],
        ["profiles", "list", "--format", "csv"],
    ):
        fmt = " ".join(args)
        p = subprocess.Popen(
            [exe, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert p.stdout is not None and p.stderr is not None
        p.stdout.read(10)
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) == 0, (fmt, err)
        assert "Traceback" not in err


def test_trace_never_replaces_a_pipe_and_writes_through_a_link(tmp_path: Path) -> None:
    """An atomic write renames a new file over the target: over a FIFO or a device that would
    put a regular file in its place, so they are refused; a symbolic link keeps pointing at
    its file, which gets the trace."""
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    res = run_cli("simulate", SCENARIO, "--no-scaling", "--trace", str(fifo))
    assert res.returncode == 2 and "not a regular file" in res.stderr
    assert fifo.is_fifo()
    real = tmp_path / "real.json"
    # an earlier trace of this tool's (any other file is refused)
    real.write_text(
        '{"traceEvents":[],"displayTimeUnit":"ms","otherData":{"scenario":"x","mode":"symmetric",'
        '"step_time_s":1.0}}\n'
    )
    link = tmp_path / "link.json"
    link.symlink_to(real)
    res = run_cli("simulate", SCENARIO, "--no-scaling", "--trace", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and len(real.read_text()) > 20


def test_a_trace_named_gz_is_gzip_and_replaced_only_if_ours(tmp_path: Path) -> None:
    """It wrote plain JSON under a .gz name (found by review); Perfetto opens gzip traces."""
    import gzip
    import json

    trace = tmp_path / "step.json.gz"
    for _ in range(2):  # written, then replaced by the rerun
        res = run_cli("simulate", SCENARIO, "--trace", str(trace), "--no-scaling")
        assert res.returncode == 0, res.stderr
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    assert doc["traceEvents"] and doc["otherData"]["scenario"]
    mine = tmp_path / "notes.gz"
    mine.write_bytes(gzip.compress(b"my notes"))
    res = run_cli("simulate", SCENARIO, "--trace", str(mine), "--no-scaling")
    assert_user_error(res, file=None, path="--trace", says=("not a trace clustersim wrote",))
    assert gzip.decompress(mine.read_bytes()) == b"my notes"
