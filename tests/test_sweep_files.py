"""A sweep's output file is the user's: a resumed sweep renumbers its kept points as the spec now
has them and reuses a finished file, never replaces or truncates a file it did not write, keeps
its name a plain file name, resumes after a torn first row, and stops its workers at once on
SIGTERM with the rows written so far kept; its --answer file never replaces one it did not
write."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from test_sweep_checks import BASE, _run, _write

from simulator.sweep.run import run_sweep
from simulator.sweep.spec import load_spec, points


def test_a_resumed_sweep_numbers_its_points_as_the_spec_now_does(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    _run(_write(tmp_path, "a.yaml", axes=[{"training.global_batch": [32, 64]}]), out)
    spec_b = _write(tmp_path, "b.yaml", axes=[{"training.global_batch": [16, 32, 64]}])
    rows = _run(spec_b, out)
    assert [(r["point"], r["axis_training.global_batch"]) for r in rows] == [
        (0, "16"),
        (1, "32"),
        (2, "64"),
    ]
    fresh = tmp_path / "fresh.csv"
    _run(spec_b, fresh)
    assert out.read_text() == fresh.read_text()


def test_a_finished_parquet_sweep_is_reused(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    spec_path = _write(tmp_path, axes=[{"training.global_batch": [32, 64]}])
    spec, base, _ = load_spec(spec_path)
    out = tmp_path / "o.parquet"
    first = run_sweep(spec, base, points(spec), out, executor="serial")
    seen: list[int] = []
    again = run_sweep(
        spec, base, points(spec), out, executor="serial", on_point=lambda d, n: seen.append(d)
    )
    assert seen == [2]  # both points kept, none evaluated
    assert [r["step_time_s"] for r in again] == [r["step_time_s"] for r in first]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("notes.csv", b"hello world\n"),
        ("other.csv", b"a,b\n1,2\n"),
        ("other.jsonl", b'{"x": 1}\n'),
        ("junk.jsonl", b"not json\n"),
        ("latin1.csv", b"caf\xe9\n"),
        ("junk.parquet", b"PAR1junk"),
    ],
)
def test_a_sweep_never_replaces_a_file_it_did_not_write(
    tmp_path: Path, name: str, content: bytes
) -> None:
    out = tmp_path / name
    out.write_bytes(content)
    spec = _write(tmp_path, axes=[{"cluster.nodes": [1]}])
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 2 and "not a clustersim sweep output" in res.stderr
    assert "Traceback" not in res.stderr
    assert out.read_bytes() == content


def test_a_csv_with_a_binary_tail_after_its_rows_is_still_resumed(tmp_path: Path) -> None:
    """A crash or a disk fault left bytes that are not UTF-8 after the finished rows: the file
    was called not a sweep output, and moving it away, as the message said, lost the rows."""
    spec = _write(tmp_path, axes=[{"training.global_batch": [32, 64]}])
    out = tmp_path / "o.csv"
    _run(spec, out)
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:2]) + bytes(range(128, 256)) * 2)  # header, one row, junk
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 0, res.stderr
    fresh = tmp_path / "fresh.csv"
    _run(spec, fresh)
    assert out.read_text() == fresh.read_text()


def test_the_answer_file_never_replaces_a_json_file_it_did_not_write(tmp_path: Path) -> None:
    """--answer took any name ending in .json: a probe file (or the spec or base scenario, as
    JSON) was overwritten with exit 0 (found by review). A file it wrote it replaces."""
    spec = _write(tmp_path, axes=[{"cluster.nodes": [1]}])
    probe = tmp_path / "probe.json"
    probe.write_text('{"format": "clustersim-probe", "ranks": 2}\n')
    before = probe.read_bytes()
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--answer", str(probe))
    assert res.returncode == 2 and "not an answer file this tool wrote" in res.stderr
    assert probe.read_bytes() == before and "Traceback" not in res.stderr
    ours = tmp_path / "answer.json"
    for _ in range(2):  # written, then replaced by the rerun
        res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--answer", str(ours))
        assert res.returncode == 0, res.stderr
    assert '"pareto_front"' in ours.read_text()


@pytest.mark.parametrize("damage", [{"status": 5}, {"gpu": ["h100"]}, {"point_key": 7}])
def test_a_jsonl_row_with_a_damaged_text_field_is_evaluated_again(
    tmp_path: Path, damage: dict
) -> None:
    """It was carried into the final file as it was (review): the file a resumed sweep ends
    with is the one an uninterrupted run writes."""
    import json

    spec = _write(tmp_path, axes=[{"training.global_batch": [32, 64]}])
    out = tmp_path / "o.jsonl"
    _run(spec, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows[0].update(damage)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run(spec, out)
    fresh = tmp_path / "fresh.jsonl"
    _run(spec, fresh)
    assert out.read_text() == fresh.read_text()


@pytest.mark.parametrize("name", ["../../evil", "llama/70b", "", "-x"])
def test_a_sweep_name_is_a_plain_file_name(tmp_path: Path, name: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": name, "base": str(BASE)}))
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "name" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o.csv").exists()


def test_a_rerun_never_drops_another_sweeps_rows_unless_told(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    first = _write(tmp_path, "a.yaml", axes=[{"cluster.nodes": [1, 2]}])
    assert run_cli("sweep", str(first), "--out", str(out)).returncode == 0
    before = out.read_bytes()
    other = _write(tmp_path, "b.yaml", axes=[{"training.global_batch": [64]}])
    res = run_cli("sweep", str(other), "--out", str(out))
    assert res.returncode == 2 and "--replace" in res.stderr and "would drop" in res.stderr
    assert out.read_bytes() == before
    assert run_cli("sweep", str(other), "--out", str(out), "--replace").returncode == 0
    assert out.read_bytes() != before


def test_a_torn_first_row_of_a_jsonl_sweep_resumes(tmp_path: Path) -> None:
    spec = _write(tmp_path, axes=[{"cluster.nodes": [1, 2]}])
    full = tmp_path / "full.jsonl"
    assert run_cli("sweep", str(spec), "--out", str(full)).returncode == 0
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(full.read_bytes()[:200])  # an interruption inside the first row
    assert b"\n" not in torn.read_bytes()
    assert run_cli("sweep", str(spec), "--out", str(torn)).returncode == 0
    assert torn.read_bytes() == full.read_bytes()


def test_a_terminated_sweep_stops_its_workers_at_once_and_resumes(tmp_path: Path) -> None:
    """SIGTERM to a sweep on the local pool: the points not started are cancelled and the
    workers stopped (not the rest of the sweep computed first), the rows written so far stay,
    and the same command finishes the file."""
    import shutil
    import signal
    import subprocess
    import time

    exe = shutil.which("clustersim")
    assert exe
    out = tmp_path / "o.csv"
    cmd = [exe, "sweep", "llama3-70b-strong-scaling", "--out", str(out), "--workers", "2"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 2):
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    if p.returncode == 0:
        pytest.skip("the sweep finished before the signal arrived")
    assert p.returncode == 143 and "interrupted:" in err and "Traceback" not in err
    time.sleep(1.0)

    def cmdline(d: Path) -> bytes:
        try:
            return (d / "cmdline").read_bytes()
        except OSError:  # a process that ended meanwhile
            return b""

    assert not [
        d for d in Path("/proc").iterdir() if d.name.isdigit() and str(out).encode() in cmdline(d)
    ], "a worker outlived the sweep"
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
