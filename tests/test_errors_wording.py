"""Error messages name the file and the field as the user wrote them, in the user's terms
(never a pydantic class name), and shorthand forms work alike everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import REPO, inline_scenario, run_cli, write_yaml
from test_errors import assert_user_error


def _scenario(tmp_path: Path, change: Any) -> Path:
    data = inline_scenario("llama3-8b")
    change(data)
    return write_yaml(tmp_path / "s.yaml", data)


def test_missing_price_tier_names_the_file(tmp_path: Path) -> None:
    def reserved(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"] = "h100-sxm-80gb"
        d["cluster"]["pricing"] = {"profile": "aws-p5-h100", "tier": "reserved"}

    f = _scenario(tmp_path, reserved)
    assert_user_error(
        run_cli("check", str(f)), file=f, path="cluster.pricing.tier", says=("no reserved price",)
    )


def test_pricing_by_name_like_every_other_profile(tmp_path: Path) -> None:
    def by_name(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"] = "h100-sxm-80gb"
        d["cluster"]["pricing"] = "aws-p5-h100"

    f = _scenario(tmp_path, by_name)
    res = run_cli("simulate", str(f), "--no-scaling", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert "aws-p5-h100" in res.stdout


def test_a_word_where_a_figure_goes_says_what_a_figure_is(tmp_path: Path) -> None:
    def word(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"] = {"profile": "h100-sxm-80gb", "memory_gb": "lots"}

    f = _scenario(tmp_path, word)
    res = run_cli("check", str(f))
    assert_user_error(res, file=f, path="cluster.gpu.memory_gb", says=("a number", "'lots'"))
    assert "Sourced" not in res.stderr and "instance of" not in res.stderr


def test_sweep_plan_field_path_has_no_class_name(tmp_path: Path) -> None:
    spec = {
        "name": "t",
        "base": str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"),
        "parallelism": {"tp": "auto", "foo": 1},
    }
    f = tmp_path / "sw.yaml"
    f.write_text(yaml.safe_dump(spec))
    res = run_cli("sweep", str(f), "--out", str(tmp_path / "r.csv"))
    assert_user_error(res, file=f, path="parallelism.foo", says=("unknown field 'foo'",))
    assert "AutoPlan" not in res.stderr


def test_set_kind_starts_the_mapping_afresh() -> None:
    # The bundled scenario shards with FSDP (kind: fsdp, strategy: ...); switching the kind
    # with --set must not keep FSDP's fields for ZeRO.
    res = run_cli(
        "check", "llama3-8b-8xh100", "--set", "parallelism.sharding.kind=zero",
        "--set", "parallelism.sharding.stage=1", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
