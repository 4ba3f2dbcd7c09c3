"""What a sweep does with an ``--out`` file it cannot fully reuse: rows it cannot stand on (a
column deleted, an edited count, a spreadsheet's byte-order mark) are evaluated again when
their point is in the run, and count among the rows a run would drop (refused without
``--replace``) when it is not; a file whose header is not a sweep's is never replaced."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.sweep.run import run_sweep
from simulator.sweep.spec import load_spec, points

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _spec(tmp: Path, name: str, values: list[int]) -> Path:
    p = tmp / f"{name}.yaml"
    axes = [{"cluster.gpu.power_limit_w": values}]
    p.write_text(yaml.safe_dump({"name": name, "base": str(BASE), "axes": axes}))
    return p


def _run(spec_path: Path, out: Path, **kw: Any) -> list[dict[str, Any]]:
    spec, base, _ = load_spec(spec_path)
    return run_sweep(spec, base, points(spec), out, executor="serial", **kw)


def _edit(out: Path, edit: Any) -> None:
    """Rewrite the CSV ``out`` with ``edit`` applied to its header and rows."""
    rows = list(csv.reader(io.StringIO(out.read_text())))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(edit(rows))
    out.write_text(buf.getvalue())


def _drop_column(name: str) -> Any:
    def edit(rows: list[list[str]]) -> list[list[str]]:
        i = rows[0].index(name)
        return [r[:i] + r[i + 1 :] for r in rows]

    return edit


def test_rows_missing_a_column_are_not_dropped_silently_by_another_run(tmp_path: Path) -> None:
    out = tmp_path / "a.csv"
    _run(_spec(tmp_path, "pw", [400, 500, 600, 700]), out)
    _edit(out, _drop_column("goodput"))
    res = run_cli("sweep", str(_spec(tmp_path, "pw2", [400, 450])), "--out", str(out))
    assert res.returncode == 2, res.stdout + res.stderr
    msg = " ".join((res.stdout + res.stderr).split())
    assert "4 of the 4 row(s)" in msg and "--replace" in msg
    assert len(list(csv.DictReader(io.StringIO(out.read_text())))) == 4  # untouched


def test_a_row_missing_a_column_of_its_own_point_is_evaluated_again(tmp_path: Path) -> None:
    out = tmp_path / "b.csv"
    spec = _spec(tmp_path, "pw", [400, 500])
    first = _run(spec, out)
    for name in ("gpu", "sweep", "tier", "time_to_train_days"):
        _edit(out, _drop_column(name))
        rows = _run(spec, out)
        assert [r["gpu"] for r in rows] == [r["gpu"] for r in first], name
        assert [r["step_time_s"] for r in rows] == [r["step_time_s"] for r in first]
        back = list(csv.DictReader(io.StringIO(out.read_text())))
        assert all(r[name] == str(f[name] or "") for r, f in zip(back, first, strict=True))
    # the report reads every name it prints
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_spreadsheets_byte_order_mark_keeps_the_first_column(tmp_path: Path) -> None:
    out = tmp_path / "c.csv"
    spec = _spec(tmp_path, "pw", [400, 500])
    _run(spec, out)
    out.write_text(out.read_text(), encoding="utf-8-sig")
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert {r["sweep"] for r in csv.DictReader(io.StringIO(out.read_text()))} == {"pw"}


def test_an_edited_count_or_time_is_not_reused(tmp_path: Path) -> None:
    out = tmp_path / "e.csv"
    spec = _spec(tmp_path, "pw", [400])
    (first,) = _run(spec, out)
    for column, value in (("tp", "1.5"), ("step_time_s", "0"), ("nodes", "1000")):
        rows = list(csv.DictReader(io.StringIO(out.read_text())))
        rows[0][column] = value
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        out.write_text(buf.getvalue())
        (again,) = _run(spec, out)
        assert again["step_time_s"] == first["step_time_s"] and again["tp"] == first["tp"]
        assert again["nodes"] == first["nodes"], column


def test_a_file_with_a_point_key_column_alone_is_not_a_sweep_output(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "pw", [400])
    for name, body in (
        ("notes.csv", "point_key,my_notes\nabc,important data\n"),
        ("notes.jsonl", '{"point_key": "abc", "note": "my data"}\n'),
    ):
        f = tmp_path / name
        f.write_text(body)
        res = run_cli("sweep", str(spec), "--out", str(f))
        assert res.returncode == 2, res.stdout + res.stderr
        assert "is not a clustersim sweep output" in " ".join(res.stderr.split())
        assert f.read_text() == body
    # a file with a sweep's leading columns whose rows stand for no point of the run: refused
    f = tmp_path / "mine.csv"
    f.write_text("sweep,point,point_key,point_rows,status\nmine,0,abc,1,ok\n")
    res = run_cli("sweep", str(spec), "--out", str(f))
    assert res.returncode == 2, res.stderr
    assert "match no point of this run" in " ".join(res.stderr.split())
    assert f.read_text().startswith("sweep,point,point_key,point_rows,status\nmine,0,abc")


def test_a_whole_parquet_file_of_other_data_is_not_called_damaged(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    f = tmp_path / "mine.parquet"
    pq.write_table(pa.Table.from_pylist([{"point_key": "abc", "a": 1}]), f)
    res = run_cli("sweep", str(_spec(tmp_path, "pw", [400])), "--out", str(f))
    assert res.returncode == 2
    msg = " ".join(res.stderr.split())
    assert "is not a clustersim sweep output" in msg and "damaged" not in msg


def test_a_full_disk_asks_for_room_not_another_path() -> None:
    import errno

    from simulator.report.files import _hint_for

    assert "free some space" in _hint_for(OSError(errno.ENOSPC, "No space left on device"))
    assert _hint_for(OSError(errno.EACCES, "Permission denied")) == "pick a writable path"


def test_a_damaged_json_line_counts_among_the_rows_a_run_would_drop(tmp_path: Path) -> None:
    out = tmp_path / "d.jsonl"
    _run(_spec(tmp_path, "pw", [400, 500]), out)
    lines = out.read_text().splitlines()
    lines[1] = lines[1][:-1] + ","  # the 500 W row, no longer JSON
    out.write_text("\n".join(lines) + "\n")
    res = run_cli("sweep", str(_spec(tmp_path, "pw", [400])), "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert "1 of the 2 row(s)" in " ".join(res.stderr.split())
    assert out.read_text().splitlines()[1] == lines[1]  # kept as it was


def test_a_link_into_a_folder_not_made_yet_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "lk").mkdir()
    link = tmp_path / "lk" / "l.csv"
    link.symlink_to(tmp_path / "nodir" / "o.csv")
    res = run_cli("sweep", str(_spec(tmp_path, "pw", [400])), "--out", str(link))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "nodir" / "o.csv").is_file() and link.is_symlink()


def test_a_parquet_output_through_a_link_writes_the_file_the_link_names(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "tgt").mkdir()
    (tmp_path / "lnk").mkdir()
    link = tmp_path / "lnk" / "o.parquet"
    link.symlink_to(tmp_path / "tgt" / "o.parquet")
    res = run_cli("sweep", str(_spec(tmp_path, "pw", [400, 500])), "--out", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and pq.read_table(tmp_path / "tgt" / "o.parquet").num_rows == 2


def test_an_output_name_leaving_no_room_for_the_sweeps_own_files_is_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / f"{'a' * 242}.csv"  # 246 bytes: OUT.partial.jsonl would be 260
    res = run_cli("sweep", str(_spec(tmp_path, "pw", [400])), "--out", str(out))
    assert res.returncode == 2 and "--out:" in res.stderr and "at most 241 bytes" in res.stderr
