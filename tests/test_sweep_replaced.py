"""A sweep's resume bookkeeping across runs: the ``OUT.replaced`` copy a ``--replace`` run keeps
belongs to that run alone (no other run, and never a file of the user's, is removed), and a
finished point stays reusable when the spec gains a point that names another profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from simulator.sweep.run import replaced_copy, run_sweep
from simulator.sweep.spec import load_spec, points

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
ON_DEMAND = {"cluster.pricing.profile": "aws-p5-h100", "cluster.pricing.tier": "on_demand"}


def _spec(folder: Path, axes: list[dict[str, Any]]) -> Path:
    folder.mkdir(exist_ok=True)
    p = folder / "spec.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "base": str(BASE), "axes": axes}))
    return p


def _run(spec_path: Path, out: Path, **kw: Any) -> list[dict[str, Any]]:
    spec, base, _ = load_spec(spec_path)
    return run_sweep(spec, base, points(spec), out, executor="serial", **kw)


def test_a_finished_sweep_never_removes_a_replaced_file_it_did_not_keep(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    spec = _spec(tmp_path / "a", [{"cluster.gpus_per_node": [4, 8]}])
    _run(spec, out)
    mine = replaced_copy(out)
    mine.write_text("my notes\n")
    _run(spec, out)  # resumes, nothing stale, finishes
    assert mine.read_text() == "my notes\n"


def test_an_interrupted_replacement_is_kept_until_that_run_resumes_and_finishes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.csv"
    _run(_spec(tmp_path / "a", [{"cluster.gpus_per_node": [4, 8]}]), out)
    before = out.read_text()
    b = _spec(
        tmp_path / "b", [{"cluster.gpus_per_node": [2, 4, 8]}, {"training.global_batch": [64]}]
    )

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt  # before any point of B has finished

    with pytest.raises(KeyboardInterrupt):
        _run(b, out, replace=True, on_point=stop)
    assert replaced_copy(out).read_text() == before
    # Another sweep into the same file (which holds no row now, so nothing stale) finishes and
    # leaves B's copy alone: only B, resumed and finished, removes it (test_sweep).
    c = _spec(tmp_path / "c", [{"cluster.gpus_per_node": [8]}])
    _run(c, out)
    assert replaced_copy(out).read_text() == before
    _run(c, out, replace=True)
    assert replaced_copy(out).read_text() == before


def test_a_point_naming_a_new_profile_leaves_the_other_points_reusable(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    spot = {**ON_DEMAND, "cluster.pricing.tier": "spot"}
    first = _run(_spec(tmp_path / "a", [{"offer": [ON_DEMAND, spot]}]), out)
    gcp = {"cluster.pricing.profile": "gcp-a3-h100", "cluster.pricing.tier": "on_demand"}
    stale: list[int] = []
    evaluated: list[int] = []
    spec, base, _ = load_spec(_spec(tmp_path / "b", [{"offer": [ON_DEMAND, spot, gcp]}]))
    rows = run_sweep(
        spec,
        base,
        points(spec),
        out,
        executor="serial",
        on_stale=stale.append,
        on_point=lambda done, total: evaluated.append(done),
    )
    assert stale == []
    assert evaluated[0] == len(first)  # the two finished points reused, one evaluated
    assert len(rows) == len(first) + 1


def test_a_replacement_interrupted_once_its_copy_is_kept_resumes(tmp_path: Path) -> None:
    # interrupted right after it kept the file as it was: the same command resumes (it is not
    # refused over its own copy, and does not copy again), and removes the copy at the end
    from simulator.sweep.rows import keep_until_finished, replaced_owner

    out = tmp_path / "out.csv"
    _run(_spec(tmp_path / "a", [{"cluster.gpus_per_node": [4, 8]}]), out)
    before = out.read_text()
    b = _spec(tmp_path / "b", [{"cluster.gpus_per_node": [2, 4]}, {"training.global_batch": [64]}])
    spec, base, _ = load_spec(b)
    from simulator.sweep.fingerprint import point_salts
    from simulator.sweep.rows import run_id

    pts = points(spec)
    keys = [
        p.model_copy(update={"salt": s}).key
        for p, s in zip(pts, point_salts(spec, base, pts), strict=True)
    ]
    keep_until_finished(out, run_id(set(keys)))
    assert replaced_copy(out).read_text() == before
    _run(b, out, replace=True)
    assert not replaced_copy(out).exists() and not replaced_owner(out).exists()


def test_a_default_profile_the_base_does_not_name_still_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a base without cluster.storage runs on the default storage profile: editing that
    # profile makes its rows stale
    from simulator.sweep.fingerprint import point_salts

    data = yaml.safe_load(BASE.read_text())
    data["cluster"].pop("storage", None)
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump(data))
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump({"name": "t", "base": str(b), "axes": [{"cluster.nodes": [1]}]}))
    spec, base, _ = load_spec(s)
    before = point_salts(spec, base, points(spec))
    prof = tmp_path / "profiles"
    prof.mkdir()
    lustre = (REPO / "hardware_profiles" / "storage" / "lustre.yaml").read_text()
    (prof / "lustre.yaml").write_text(lustre + "\n# edited\n")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(prof))
    assert point_salts(spec, base, points(spec)) != before
