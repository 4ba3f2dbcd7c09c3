"""A Perfetto trace written by `simulate --trace` never replaces a file of the user's: not the
scenario, not another tool's trace or any other file; one too large to write is refused before
simulating. (Split from test_damaged_files.)"""

from __future__ import annotations

from pathlib import Path

from conftest import REPO, run_cli
from test_errors import assert_user_error


def test_a_trace_never_replaces_the_scenario(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_bytes((REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_bytes())
    before = sc.read_bytes()
    res = run_cli("simulate", str(sc), "--trace", str(sc))
    assert_user_error(res, file=None, path="--trace", says=("scenario file itself",))
    assert sc.read_bytes() == before


def test_a_trace_never_replaces_another_file_but_replaces_its_own_trace(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_bytes((REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_bytes())
    mine = tmp_path / "notes.yaml"
    mine.write_text("my notes\n")
    res = run_cli("simulate", str(sc), "--trace", str(mine))
    assert_user_error(res, file=None, path="--trace", says=("not a trace",), hint=("own file",))
    assert mine.read_text() == "my notes\n"
    # a trace another tool wrote (PyTorch's profiler, json.dump) is the user's too
    other = tmp_path / "profiler.json"
    for text in ('{"traceEvents": []}\n', '{"traceEvents":[{"ph":"X","ts":0,"dur":1}]}\n'):
        other.write_text(text)
        res = run_cli("simulate", str(sc), "--trace", str(other))
        assert_user_error(res, file=None, path="--trace", says=("not a trace",))
        assert other.read_text() == text
    trace = tmp_path / "t.json"
    for _ in range(2):  # a trace of its own is replaced by the next run's
        res = run_cli("simulate", str(sc), "--trace", str(trace))
        assert res.returncode == 0, res.stderr
        assert trace.read_bytes().startswith(b'{"traceEvents":')


def test_a_trace_too_large_to_write_is_refused_before_simulating(tmp_path: Path) -> None:
    res = run_cli(
        "simulate",
        "llama3-8b-8xh100",
        "--set",
        "training.global_batch=16777216",
        "--set",
        "run.tokens=1e15",
        "--trace",
        str(tmp_path / "t.json"),
    )
    assert_user_error(res, file=None, path="--trace", says=("events",), hint=("micro-batches",))
    assert not (tmp_path / "t.json").exists()
