"""A sweep spec's mistakes are refused before any output is written: an axis value its field
never accepts, and a base that is itself a sweep spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli
from test_errors import assert_user_error

from simulator.errors import UserError
from simulator.sweep.axis_checks import check_axis_values
from simulator.sweep.fingerprint import point_salts
from simulator.sweep.spec import load_spec, points

BASE = REPO / "scenarios" / "llama3-8b-8xh100.yaml"


def _write(tmp: Path, name: str = "spec.yaml", base: Any = None, **spec: Any) -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump({"name": "t", "base": str(base or BASE), **spec}))
    return p


@pytest.mark.parametrize(
    ("values", "says"),
    [([1, "2"], "valid integer"), ([1, "4x"], "valid integer"), ([1, 0], "greater than")],
)
def test_a_value_its_field_never_accepts_is_refused_before_output(
    tmp_path: Path, values: list[Any], says: str
) -> None:
    spec = _write(tmp_path, axes=[{"cluster.nodes": values}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert "axes[0]" in res.stderr and "cluster.nodes" in res.stderr and says in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()


def test_a_value_valid_only_with_another_axis_is_kept(tmp_path: Path) -> None:
    """A ZeRO stage is no field of FSDP sharding, but another axis may choose ZeRO: only a
    value wrong in itself (its type or range) is refused up front."""
    spec = _write(
        tmp_path,
        axes=[
            {"parallelism.sharding.kind": ["zero", "fsdp"]},
            {"parallelism.sharding.stage": [1, 3]},
        ],
    )
    s, base, _ = load_spec(spec)
    base = {**base, "parallelism": {**base.get("parallelism", {}), "sharding": {"kind": "fsdp"}}}
    check_axis_values(s, base, str(spec))  # no error


def test_a_base_that_is_a_sweep_spec_is_refused_before_output(tmp_path: Path) -> None:
    inner = _write(tmp_path, "inner.yaml", axes=[{"cluster.nodes": [1, 2]}])
    outer = _write(tmp_path, "outer.yaml", base=inner, axes=[{"cluster.nodes": [1]}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(outer), "--out", str(out))
    assert res.returncode == 2
    assert "is itself a sweep spec" in res.stderr and str(BASE) in res.stderr
    assert not out.exists()
    with pytest.raises(UserError) as exc:
        load_spec(outer)
    assert exc.value.path == "base"


def test_an_axis_naming_an_unknown_profile_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"),
                "axes": [{"cluster.gpu": ["h100-sxm-80gb", "h100-sxm-80g"]}],
            }
        )
    )
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 2 and "axes[0]" in res.stderr
    assert "unknown gpu profile 'h100-sxm-80g'" in res.stderr and "h100-sxm-80gb" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, path",
    [
        (("--executor", "serial", "--workers", "2"), "--workers"),
        (("--executor", "serial", "--address", "auto"), "--address"),
        (("--executor", "local", "--address", "auto"), "--address"),
        (("--executor", "ray", "--workers", "2"), "--workers"),
    ],
)
def test_an_option_the_executor_ignores_is_refused(
    tmp_path: Path, args: tuple[str, ...], path: str
) -> None:
    out = tmp_path / "o.csv"
    res = run_cli("sweep", "llama3-70b-strong-scaling", "--out", str(out), *args)
    assert res.returncode == 2 and f"error: {path}:" in res.stderr, res.stderr
    assert not out.exists()


def test_a_typo_in_the_base_is_named_in_the_base_before_anything_runs(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(BASE.read_text().replace("  nodes: 1", "  nodez: 1", 1))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "t", "base": "base.yaml", "axes": [{"training.global_batch": [64]}]}
        )
    )
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out), "--executor", "serial")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"error: {base}: cluster.nodez: unknown field")
    assert not out.exists()


@pytest.mark.parametrize(
    ("axis", "says"),
    [
        ("cluster.nodes.", "empty part"),
        ("cluster.nodes.value", "has no field 'value'"),
        ("parallelism.stage_layers.0", "a list item cannot be set"),
    ],
)
def test_an_axis_path_that_cannot_be_set_is_refused_up_front(
    tmp_path: Path, axis: str, says: str
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "t", "base": str(BASE), "axes": [{axis: [1, 2]}]}))
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out), "--executor", "serial")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"axes[0]: axis '{axis}'" in res.stderr and says in res.stderr
    assert "--set" not in res.stderr
    assert not out.exists()


def test_plot_given_a_file_name_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "t", "base": str(BASE), "axes": [{"training.global_batch": [64]}]})
    )
    png = tmp_path / "plot.png"
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--plot", str(png))
    assert res.returncode == 2 and "reads as a file name" in res.stderr
    assert not png.exists() and not (tmp_path / "o.csv").exists()


def _spec_file(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "t", "base": str(BASE), "axes": [{"training.global_batch": [32]}]})
    )
    return spec


def test_an_edited_profile_changes_every_points_key_and_an_unnamed_one_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile the sweep names, replaced or edited, makes every finished row stale; a
    profile file no point names (another calibrated fabric, say) leaves them reusable."""
    spec, base, _ = load_spec(_spec_file(tmp_path))
    assert "aws-p5-h100" in json.dumps(base)
    prof = tmp_path / "profiles"
    prof.mkdir()
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(prof))
    bundled = point_salts(spec, base, points(spec))
    src = (REPO / "hardware_profiles" / "prices" / "lambda-b200.yaml").read_text()
    (prof / "my-price.yaml").write_text(src.replace("name: lambda-b200", "name: my-price"))
    assert point_salts(spec, base, points(spec)) == bundled
    mine = (REPO / "hardware_profiles" / "prices" / "aws-p5-h100.yaml").read_text()
    (prof / "aws-p5-h100.yaml").write_text(mine.replace("1 ", "1  ", 1) + "\n")
    replaced = point_salts(spec, base, points(spec))
    assert replaced != bundled
    (prof / "aws-p5-h100.yaml").write_text(mine + "\n\n")
    assert point_salts(spec, base, points(spec)) != replaced


def test_a_point_without_a_valid_plan_names_the_fields_that_refused_them() -> None:
    """Plans refused one reason per stage count (PP=3, PP=6, PP=12 do not split the layers)
    are counted under their field, so the batch the user can change is not hidden behind
    them (a review found every point blamed 'PP=3' alone)."""
    from collections import Counter

    from simulator.sweep.plans import _refusals

    invalid = Counter(
        {
            "parallelism.pp: PP=3 does not divide the 80 layers": 12,
            "parallelism.pp: PP=6 does not divide the 80 layers": 12,
            "parallelism.pp: PP=12 does not divide the 80 layers": 12,
            "training.global_batch: global batch 512 is not a multiple of DP·mb = 3": 10,
            "no GPUs left for data parallelism": 2,
        }
    )
    text = _refusals(invalid, 48)
    assert text.startswith("parallelism.pp (36 of 48 plans; e.g. PP=3 does not divide")
    assert "training.global_batch: global batch 512 is not a multiple" in text
    # a message that only looks like 'field: ...' is not a field
    assert (
        _refusals(Counter({"Error: something odd": 1}), 1) == "Error: something odd (1 of 1 plans)"
    )
    assert "(10 of 48 plans)" in text and text.endswith(
        "no GPUs left for data parallelism (2 of 48 plans)"
    )


def test_axes_written_as_a_mapping_are_shown_the_list_form(tmp_path: Path) -> None:
    spec = _write(tmp_path, axes={"cluster.nodes": [1, 2]})
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert_user_error(res, file=str(spec), path="axes", says=("not a mapping",))
    assert "- cluster.nodes: [...]" in res.stderr
    assert not (tmp_path / "o.csv").exists()
