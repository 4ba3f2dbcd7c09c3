"""``compare`` names a best scenario only where one is better: never on a tie, never a plan
that does not fit, in the table, the CSV and the JSON alike."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.config.reading import read_yaml

SC = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


def test_a_tie_names_no_best(tmp_path: Path) -> None:
    twin = tmp_path / "twin.yaml"
    twin.write_text(SC.read_text())
    res = run_cli("compare", str(SC), str(twin), "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = {r["metric"]: r for r in csv.DictReader(io.StringIO(res.stdout))}
    assert rows["step_time_s"]["best"] == "" and rows["memory_gb_per_gpu"]["best"] == ""
    res = run_cli("compare", str(SC), str(twin), "--format", "json")
    metrics = json.loads(res.stdout)["metrics"]
    assert all(m["best"] is None for m in metrics), metrics


def test_memory_best_is_never_a_plan_that_does_not_fit(tmp_path: Path) -> None:
    data = read_yaml(SC)
    small = dict(data, name="small-gpu")
    small["cluster"] = dict(data["cluster"], gpu={"profile": "h100-sxm-80gb", "memory_gb": 40})
    other = dict(data, name="other")
    other["parallelism"] = dict(data["parallelism"], recompute="full")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(small))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(other))
    (tmp_path / "c.yaml").write_text(SC.read_text())
    res = run_cli(
        "compare", *(str(tmp_path / f) for f in ("a.yaml", "b.yaml", "c.yaml")), "--format", "json"
    )
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert "small-gpu" in rep["not_fitting"]
    assert all(m["best"] != "small-gpu" for m in rep["metrics"])


def test_two_level_at_the_top_of_three_name_no_best(tmp_path: Path) -> None:
    data = read_yaml(SC)
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(dict(data, name="a")))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(dict(data, name="b")))
    other = dict(data, name="c")
    other["parallelism"] = dict(data["parallelism"], recompute="full")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(other))
    res = run_cli("compare", *(str(tmp_path / f"{n}.yaml") for n in "abc"), "--format", "json")
    assert res.returncode == 0, res.stderr
    step = next(m for m in json.loads(res.stdout)["metrics"] if m["metric"] == "step_time_s")
    assert step["best"] is None and "tie for best" in step["verdict"]


def _compare_priced(tmp_path: Path, **pricings: dict[str, str]) -> dict[str, Any]:
    """`compare` of the scenario under each pricing (by name, in order): its metrics by name."""
    data = read_yaml(SC)
    paths = []
    for name, pricing in pricings.items():
        d = dict(data, name=name)
        d["cluster"] = dict(data["cluster"], pricing=pricing)
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(yaml.safe_dump(d))
    res = run_cli("compare", *map(str, paths), "--format", "json")
    assert res.returncode == 0, res.stderr
    return {x["metric"]: x for x in json.loads(res.stdout)["metrics"]}


def test_an_owned_cluster_named_cheapest_shows_its_commitment_and_spot_its_lost_time(
    tmp_path: Path,
) -> None:
    """Owned hardware is charged only the run's own hours of its life: compare shows what it
    commits up front and says so where it names it cheapest; spot's throughput per step is
    the same, but the share of wall time making progress is not."""
    m = _compare_priced(
        tmp_path,
        od={"profile": "aws-p5-h100", "tier": "on_demand"},
        spot={"profile": "aws-p5-h100", "tier": "spot"},
        own={"profile": "own-dgx-h100"},
    )
    held = m["usd_commitment"]["values"]
    assert held[0] == held[1] == 0 and held[2] > 1e6
    assert m["usd_total"]["best"] == "own" and "committed up front" in m["usd_total"]["verdict"]
    progress = m["goodput"]["values"]
    assert progress[1] < progress[0] == progress[2]
    # on-demand and spot tie at zero committed: no best, and no ratio against a zero
    assert m["usd_commitment"]["best"] is None
    assert "×" not in m["usd_commitment"]["verdict"]


def test_commitment_and_goodput_verdicts_give_their_own_reasons(tmp_path: Path) -> None:
    """A plan that commits nothing is best against an owned one without a ratio against zero,
    because it is paid by the hour; slower checkpoint storage loses wall time because its
    checkpoints take longer to write, which no part of the step shows."""
    data = read_yaml(SC)
    own = dict(data, name="own")
    own["cluster"] = dict(data["cluster"], pricing={"profile": "own-dgx-h100"})
    nfs = dict(data, name="nfs")
    nfs["cluster"] = dict(data["cluster"], storage="nfs")
    for name, d in (("own", own), ("nfs", nfs)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(d))
    res = run_cli("compare", str(SC), str(tmp_path / "own.yaml"), "--format", "json")
    m = {x["metric"]: x for x in json.loads(res.stdout)["metrics"]}
    v = m["usd_commitment"]["verdict"]
    assert m["usd_commitment"]["best"] == SC.stem and "×" not in v and "commits nothing" in v
    res = run_cli("compare", str(SC), str(tmp_path / "nfs.yaml"), "--format", "json")
    m = {x["metric"]: x for x in json.loads(res.stdout)["metrics"]}
    v = m["goodput"]["verdict"]
    assert m["goodput"]["best"] == SC.stem and "checkpoint written in" in v, v


def test_a_reserved_rate_without_its_term_commits_an_unknown_amount_not_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """simulate gives no commitment for a reserved rate whose term the profile leaves out;
    compare showed it as $0 committed, as if it were on demand."""
    gcp = REPO / "hardware_profiles" / "prices" / "gcp-a3-h100.yaml"
    text = "\n".join(
        line.replace("name: gcp-a3-h100", "name: noterm", 1)
        for line in gcp.read_text().splitlines()
        if not line.startswith("reserved_term_years")
    )
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "noterm.yaml").write_text(text + "\n")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    m = _compare_priced(
        tmp_path,
        od={"profile": "noterm", "tier": "on_demand"},
        res={"profile": "noterm", "tier": "reserved"},
    )
    assert m["usd_commitment"]["values"] == [0.0, None]
