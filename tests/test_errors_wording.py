"""Error messages name the file and the field as the user wrote them, in the user's terms
(never a pydantic class name), and shorthand forms work alike everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
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
    import json

    assert res.returncode == (0 if json.loads(res.stdout)["fits"] else 1), res.stderr


def test_set_kind_works_in_either_order() -> None:
    for sets in (
        ["parallelism.sharding.stage=2", "parallelism.sharding.kind=zero"],
        ["parallelism.sharding.kind=zero", "parallelism.sharding.stage=2"],
    ):
        args = [a for s in sets for a in ("--set", s)]
        res = run_cli("check", "llama3-8b-8xh100", *args, "--format", "json")
        assert res.returncode == 0, res.stderr
        import json

        assert json.loads(res.stdout)["layout"]["zero_stage"] == 2, sets


def test_sweep_point_keys_that_look_like_numbers_stay_keys(tmp_path: Path) -> None:
    from simulator.sweep.run import complete_points, read_rows

    f = tmp_path / "r.csv"
    # (rows of points without a plan: an "ok" row must carry its figures)
    f.write_text(
        "point,point_key,point_rows,status\n0,004201359279,1,no plan\n1,37876569e336,1,no plan\n"
    )
    assert set(complete_points(read_rows(f))) == {"004201359279", "37876569e336"}


def test_compare_keeps_both_scenarios_of_one_name(tmp_path: Path) -> None:
    import csv
    import io

    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    data = yaml.safe_load((REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_text())
    a.write_text(yaml.safe_dump(data))
    data["training"]["micro_batch"] = 2
    b.write_text(yaml.safe_dump(data))
    res = run_cli("compare", str(a), str(b), "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert len(set(rows[0])) == len(rows[0]) == 4  # metric, two distinct columns, best
    step = next(r for r in rows if r[0] == "step_time_s")
    assert step[1] != step[2]


def test_a_software_override_without_a_software_key_adjusts_the_default_stack() -> None:
    ok = run_cli("check", "llama3-8b-8xh100", "--set", "software.comm_sms=20")
    assert ok.returncode == 0, ok.stderr
    for sms in ("1000", "132"):  # every SM: a collective would leave compute none
        res = run_cli("check", "llama3-8b-8xh100", "--set", f"software.comm_sms={sms}")
        assert_user_error(
            res, file=None, path="software.comm_sms", says=("132",), hint=("fewer than 132",)
        )


def test_an_unknown_preset_lists_the_presets_or_the_near_ones() -> None:
    far = run_cli("check", "llama3-8b-8xh100", "--set", "model=zzzz")
    assert_user_error(far, file=None, path="model", hint=("use a preset (", "llama3-70b"))
    near = run_cli("check", "llama3-8b-8xh100", "--set", "model=llama3-8x")
    assert_user_error(near, file=None, path="model", hint=("did you mean llama3-8b",))


def test_heads_that_do_not_divide_say_what_must_divide() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "model.heads=3")
    assert_user_error(res, file=None, path="model", hint=("hidden a multiple of heads",))


def test_calibrate_output_folder_is_checked(tmp_path: Path) -> None:
    import json

    from conftest import h100_probe_two_ranks

    probe = tmp_path / "p.json"
    probe.write_text(json.dumps(h100_probe_two_ranks()))
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out_dir, says in ((str(afile), "is a file"), ("", "empty path")):
        res = run_cli("calibrate", str(probe), "--name", "zq", "--out-dir", out_dir)
        assert_user_error(res, file=None, path="--out-dir", says=(says,), hint=("folder",))
    assert afile.read_text() == "x"


def test_a_sweep_base_that_is_a_folder_or_the_spec_itself_is_named(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    for base, says in (("adir", "is a folder"), ("s.yaml", "names itself")):
        spec = tmp_path / "s.yaml"
        spec.write_text(yaml.safe_dump({"name": "t", "base": base}))
        res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
        assert_user_error(res, file=spec, path="base", says=(says,))


def test_an_unreachable_ray_address_is_refused_at_once(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "t", "base": str(REPO / "scenarios" / "llama3-8b-8xh100.yaml")})
    )
    res = run_cli(
        "sweep", str(spec), "--out", str(tmp_path / "o.csv"), "--executor", "ray",
        "--address", "127.0.0.1:1",
    )  # fmt: skip
    assert_user_error(res, file=None, path="--address", says=("could not reach",))


@pytest.mark.parametrize(
    "text, value",
    [
        ("0100", 100),  # YAML 1.1 read this as octal 64
        ("007", 7),
        ("1_000", 1000),
        ("-5", -5),
        ("0o17", 15),
        ("0x10", 16),
        ("1:20", "1:20"),  # YAML 1.1 sexagesimal 80
        ("0b11", "0b11"),
        ("1e11", 1e11),
    ],
)
def test_numbers_are_read_as_yaml_1_2_reads_them(text: str, value: object) -> None:
    from simulator.config.yamlio import load_text

    assert load_text(f"a: {text}") == {"a": value}


def test_a_leading_zero_is_no_octal_marker_in_a_scenario_or_a_set() -> None:
    from simulator.config.loading import load_scenario

    rs = load_scenario(REPO / "scenarios" / "llama3-8b-8xh100.yaml", ["training.global_batch=0128"])
    assert rs.training.global_batch == 128


@pytest.mark.parametrize(
    "ref",
    [
        "{metric: mfu, source: a paper}",  # no value
        "{metric: mfu, value: 0.4, curve: c.csv, source: a paper}",  # both
        "{metric: busbw_gbps, value: 100, source: a paper}",  # a curve metric with a value
    ],
)
def test_a_reference_gives_exactly_its_kind_of_figure(ref: str) -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", f"reference={ref}")
    assert_user_error(res, file=REPO / "scenarios" / "llama3-8b-8xh100.yaml", path="reference")


def test_an_error_about_a_field_the_set_beside_it_changed_names_that_set() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "training.micro_batch=128")
    assert_user_error(
        res,
        file=REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        path="training.global_batch",
        says=("with --set training.micro_batch=128",),
    )


def test_of_several_sets_beside_the_field_the_one_the_message_names_is_blamed() -> None:
    """Two overrides in the section: the error names the one its message is about (the node
    count a network is needed for), not merely the last given."""
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "cluster.nodes=4",
        "--set",
        "cluster.fabric=pcie5-host",
    )
    assert_user_error(
        res,
        file=REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        path="cluster.network",
        says=("with --set cluster.nodes=4",),
    )


def test_the_named_field_is_matched_as_a_word_whatever_its_case() -> None:
    """'needs PP > 1' names parallelism.pp, not the later parallelism.tp beside it."""
    sets = ("--set", "cluster.nodes=1", "--set", "parallelism.pp=1", "--set", "parallelism.tp=8")
    res = run_cli("check", "llama3-70b-64xh100", *sets)
    assert_user_error(
        res,
        file=REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        path="parallelism.pp_schedule",
        says=("with --set parallelism.pp=1",),
    )


def test_set_of_a_figures_value_alone_points_to_the_bare_form() -> None:
    """``--set X.value=V`` on a sourced figure has no source; the message says how to give
    one, or to set the figure itself (recorded as an inline override)."""
    f = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    res = run_cli("check", str(f), "--set", "cluster.gpu.memory_gb.value=100")
    assert_user_error(
        res,
        file=f,
        path="cluster.gpu.memory_gb.source",
        says=("without a source",),
        hint=("--set cluster.gpu.memory_gb=100",),
    )
    ok = run_cli("check", str(f), "--set", "cluster.gpu.memory_gb=100")
    assert ok.returncode == 0, ok.stderr


def test_another_gpu_under_a_price_for_the_old_one_names_a_price_for_the_new() -> None:
    f = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    res = run_cli("check", str(f), "--set", "cluster.gpu=h200-sxm-141gb")
    assert_user_error(
        res,
        file=f,
        path="cluster.pricing.profile",
        says=("is for GPU 'h100-sxm-80gb'",),
        hint=("--set cluster.pricing.profile=aws-p5e-h200", "cluster.pricing=null"),
    )
    ok = run_cli(
        "check", str(f), "--set", "cluster.gpu=h200-sxm-141gb",
        "--set", "cluster.pricing.profile=aws-p5e-h200",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("value", "says", "hint"),
    [
        ("parallelism.sharding={kind:zero,stage:1}", "gives no known kind", "space after each"),
        ("parallelism.sharding=null", "expected a mapping", "{kind: zero, stage: 0}"),
        ("cluster.gpu=nvlink4-nvswitch", "is a fabric profile, not a gpu profile", "gpu profile"),
    ],
)
def test_common_slips_get_a_message_in_the_users_terms(value: str, says: str, hint: str) -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", value)
    assert_user_error(res, file=None, path=None, says=(says,), hint=(hint,))
    assert "discriminator" not in res.stderr and "Input should be" not in res.stderr


def test_a_tab_in_the_yaml_says_to_indent_with_spaces(tmp_path: Path) -> None:
    f = tmp_path / "tab.yaml"
    f.write_text("name: x\ncluster:\n\tgpu: h100-sxm-80gb\n")
    assert_user_error(run_cli("check", str(f)), file=f, path=None, hint=("spaces",))


@pytest.mark.parametrize(
    ("set_", "kind"),
    [
        ("cluster.gpu=-1", "GPU"),
        ("cluster.fabric=1e400", "fabric"),
        ("cluster.storage=0", "storage"),
        ("cluster.pricing.profile=0.5", "pricing"),
        ("cluster.network.profile=null", "network"),
        ("software=3", "software"),
    ],
)
def test_a_profile_slot_given_something_else_asks_for_a_profile_name(set_: str, kind: str) -> None:
    """A number where a profile name goes said 'expected a mapping of fields' (a robustness
    review): it asks for the kind of profile the slot takes."""
    from simulator.config.loading import load_scenario
    from simulator.errors import UserError

    with pytest.raises(UserError) as exc:
        load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml", [set_])
    assert exc.value.path == set_.partition("=")[0]
    assert f"expected a {kind} profile name" in exc.value.message


def test_an_error_on_a_field_the_set_did_not_touch_names_the_set() -> None:
    """--set model.layers=3 made PP=4 too deep: the error blamed parallelism.pp with no word of
    the override the user gave (a robustness review)."""
    res = run_cli("check", "llama3-70b-64xh100", "--set", "model.layers=3")
    assert res.returncode == 2
    said = " ".join(res.stderr.split())
    assert "parallelism.pp:" in said and "(with --set model.layers=3)" in said
    # only an override of a field the check reads is named, whatever the order or the words
    for order in (["model.layers=3", "cluster.gpu=h200-sxm-141gb"], ["run.tokens=2e11"]):
        args = [a for s in order for a in ("--set", s)]
        said = " ".join(run_cli("check", "llama3-70b-64xh100", *args).stderr.split())
        assert ("with --set model.layers=3" in said) == ("model.layers=3" in order)
        assert "with --set cluster.gpu" not in said and "with --set run.tokens" not in said
