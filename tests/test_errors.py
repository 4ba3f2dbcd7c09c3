"""Every user error: one message naming the file, the field path and what to do; exit code 2;
no traceback. Runs the real command line on scenario files written to tmp_path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, CliResult, inline_scenario, run_cli, run_cli_process, write_yaml

from simulator.config.loading import resolve_dict
from simulator.errors import UserError


def assert_user_error(
    res: CliResult,
    *,
    file: Path | str | None,
    path: str | None,
    says: tuple[str, ...] = (),
    hint: tuple[str, ...] = (),
) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert res.stdout == ""
    text = res.stderr.strip()
    lines = text.splitlines()
    # One message: a first line with where and what, then at most the 'what to do' line.
    assert lines[0].startswith("error: "), text
    assert len(lines) <= 2, text
    assert text.count("error:") == 1, text
    assert "what to do:" in text, text
    head = lines[0]
    if file is not None:
        assert str(file) in head, text
    if path is not None:
        assert f": {path}: " in head, text
    for frag in says:
        assert frag in head, text
    hint_line = lines[-1]
    for frag in hint:
        assert frag in hint_line, text


def _write(tmp_path: Path, data: Any, name: str = "scenario.yaml") -> Path:
    return write_yaml(tmp_path / name, data)


def _mutated(change: Callable[[dict[str, Any]], None], **kw: Any) -> dict[str, Any]:
    data = inline_scenario("llama3-8b", **kw)
    change(data)
    return data


def test_baseline_inline_scenario_is_valid(tmp_path: Path) -> None:
    f = _write(tmp_path, inline_scenario("llama3-8b"))
    res = run_cli_process("check", str(f))
    # valid, but 8B with unsharded Adam state needs ~157 GB of 80: check's "does not fit" is 1
    assert res.returncode == 1 and "does not fit" in res.stdout, res.stderr
    assert res.stderr == ""


# --------------------------------------------------------------------------------------------
# The file itself
# --------------------------------------------------------------------------------------------


def test_malformed_yaml(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("cluster:\n  gpu: [h100, a100\n  nodes: 2\ntraining: {}\n")
    res = run_cli_process("check", str(f))  # a real process: exit status 2, no traceback
    assert_user_error(
        res, file=f, path=None, says=("not valid YAML", "line 3"), hint=("YAML syntax",)
    )


def test_tab_indented_yaml(tmp_path: Path) -> None:
    f = tmp_path / "tabs.yaml"
    f.write_text("cluster:\n\tgpu: h100-sxm-80gb\n")
    assert_user_error(run_cli("check", str(f)), file=f, path=None, says=("not valid YAML",))


@pytest.mark.parametrize("content", ["- a\n- b\n", "just a string\n", "", "42\n"])
def test_non_mapping_yaml(tmp_path: Path, content: str) -> None:
    f = tmp_path / "notamap.yaml"
    f.write_text(content)
    res = run_cli("check", str(f))
    assert_user_error(
        res, file=f, path=None, says=("must be a YAML mapping",), hint=("clustersim schema",)
    )


def test_missing_scenario_file(tmp_path: Path) -> None:
    f = tmp_path / "does-not-exist.yaml"
    res = run_cli("check", str(f))
    assert_user_error(res, file=f, path=None, says=("no such scenario file",))


def test_missing_file_close_to_a_bundled_scenario() -> None:
    res = run_cli("check", "llama3-8b-8xh10")
    assert_user_error(res, file="llama3-8b-8xh10", path=None, hint=("llama3-8b-8xh100",))


# --------------------------------------------------------------------------------------------
# Schema errors
# --------------------------------------------------------------------------------------------


def test_unknown_field_with_did_you_mean(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"]["tensor_parallel"] = 4

    f = _write(tmp_path, _mutated(change))
    res = run_cli("check", str(f))
    assert_user_error(
        res,
        file=f,
        path="parallelism.tensor_parallel",
        says=("unknown field 'tensor_parallel'",),
        hint=("did you mean 'tp'",),
    )


@pytest.mark.parametrize(
    ("where", "typo", "suggestion"),
    [
        (("training",), "seq_length", "seq_len"),
        (("training", "optimizer"), "knd", "kind"),
        (("parallelism", "sharding"), "stge", "stage"),
        (("cluster",), "gpus_per_nod", "gpus_per_node"),
        ((), "parallelsim", "parallelism"),
    ],
)
def test_unknown_field_hints(where: tuple[str, ...], typo: str, suggestion: str) -> None:
    data = inline_scenario("llama3-8b")
    data["parallelism"]["sharding"] = {"kind": "zero", "stage": 1}
    data["training"]["optimizer"] = {"kind": "adamw"}
    node = data
    for key in where:
        node = node[key]
    node[typo] = 1
    with pytest.raises(UserError) as exc:
        resolve_dict(data, file="s.yaml")
    err = exc.value
    assert err.file == "s.yaml"
    assert err.path == ".".join((*where, typo))  # no union tags such as 'zero' in the path
    assert err.hint == f"did you mean '{suggestion}'?"


def test_unknown_override_field_of_a_profile_or_preset() -> None:
    data = inline_scenario("llama3-8b")
    data["cluster"]["gpu"]["memory_gbb"] = 80
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert exc.value.path == "cluster.gpu.memory_gbb"
    assert exc.value.hint == "did you mean 'memory_gb'?"
    data = inline_scenario({"preset": "llama3-8b", "hiden": 4096})
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert exc.value.path == "model.hiden"
    assert exc.value.hint == "did you mean 'hidden'?"


def test_invalid_value_precision(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["training"]["precision"] = "fp4"

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="training.precision",
        says=("'bf16'", "'fp8'", "fp4"),
        hint=("allowed values",),
    )


def test_negative_value(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["training"]["seq_len"] = -2048

    f = _write(tmp_path, _mutated(change))
    assert_user_error(run_cli("check", str(f)), file=f, path="training.seq_len", says=("-2048",))


def test_missing_section(tmp_path: Path) -> None:
    f = _write(tmp_path, _mutated(lambda d: d.pop("training")))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="training",
        says=("required field is missing",),
        hint=("add the field",),
    )


def test_negative_profile_figure_message_is_short() -> None:
    data = inline_scenario("llama3-8b")
    data["cluster"]["gpu"]["memory_gb"] = -80
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert "memory_gb must be within [0.1, 100000] GB (got -80)" in exc.value.message
    assert len(exc.value.render()) < 300  # no dump of the whole profile


def test_inline_model_error_is_about_the_architecture() -> None:
    data = inline_scenario({"layers": 2, "hidden": 100, "heads": 3, "vocab": 1000})
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert "divisible by heads" in exc.value.message
    assert "preset" not in (exc.value.path or "")


# --------------------------------------------------------------------------------------------
# Names that are not in the catalogue or the presets
# --------------------------------------------------------------------------------------------


def test_unknown_gpu_profile(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"] = "h100-sxm-80g"

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="cluster.gpu",
        says=("unknown gpu profile 'h100-sxm-80g'",),
        hint=("did you mean", "h100-sxm-80gb"),
    )


def test_unknown_model_preset(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["model"] = "llama3-7b"

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="model",
        says=("unknown model preset 'llama3-7b'",),
        hint=("did you mean", "llama3-8b", "llama3-70b"),
    )


def test_unknown_model_preset_in_a_reference() -> None:
    with pytest.raises(UserError) as exc:
        resolve_dict(inline_scenario({"preset": "gpt4", "layers": 2}), file="x.yaml")
    assert exc.value.path == "model.preset"
    assert "unknown model preset 'gpt4'" in exc.value.message


# --------------------------------------------------------------------------------------------
# Layout errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "path", "fragment"),
    [
        ("parallelism.tp", None, "is not PATH=VALUE"),
        ("=4", None, "empty path"),
        ("parallelism.tp=abc", "parallelism.tp", "valid integer"),
        ("parallelism.tp=[", "parallelism.tp", "is not valid YAML"),
        ("parallelism.tensor_parallel=4", "parallelism.tensor_parallel", "unknown field"),
        ("training.precision=fp4", "training.precision", "fp4"),
    ],
)
def test_bad_set_expression(tmp_path: Path, expr: str, path: str | None, fragment: str) -> None:
    f = _write(tmp_path, inline_scenario("llama3-8b"))
    res = run_cli("check", str(f), "--set", expr)
    assert_user_error(res, file=f if path else None, path=path, says=(fragment,))
    if path is None:
        assert expr in res.stderr


def test_set_into_a_scalar() -> None:
    data = inline_scenario("llama3-8b")
    with pytest.raises(UserError) as exc:
        resolve_dict(data, ["training.seq_len.x=3"], file="s.yaml")
    assert exc.value.path == "training.seq_len"


def test_unknown_profile_kind_in_profiles_list() -> None:
    res = run_cli("profiles", "list", "--kind", "gpuu")
    assert_user_error(
        res, file=None, path=None, says=("no profiles of kind 'gpuu'",), hint=("gpu",)
    )


def test_unknown_profile_in_profiles_show() -> None:
    res = run_cli("profiles", "show", "h100-sxm-80g")
    assert_user_error(
        res, file=None, path=None, says=("unknown hardware profile",), hint=("h100-sxm-80gb",)
    )


def test_broken_profile_file_in_profile_path(tmp_path: Path) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "x-gpu.yaml").write_text(
        "kind: gpu\nname: x-gpu\ndisplay_name: X\nvendor: nvidia\n"
        "memory_gbb: {value: 80, source: datasheet}\n"
    )
    res = run_cli_process(
        "profiles", "list", "--format", "json", env={"CLUSTERSIM_PROFILE_PATH": str(d)}
    )
    f = d / "x-gpu.yaml"
    # The list of every other profile, then the broken file named: exit 2.
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "h100-sxm-80gb" in {p["name"] for p in json.loads(res.stdout)}
    assert res.stderr.startswith(f"error: {f}")
    # The path is the profile's own field, not prefixed by the union tag ('gpu.').
    assert ": gpu." not in res.stderr


def test_fp8_curve_and_ll128_overrides(tmp_path: Path) -> None:
    """The fp8 GEMM curve is a fraction like matmul_max; a fabric's LL128 switch takes a bare
    true/false as an inline override, and anything else is refused with its path."""

    def fp8_max(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"]["efficiency"]["matmul_fp8_max"] = 1.7

    f = _write(tmp_path, _mutated(fp8_max))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="cluster.gpu.efficiency.matmul_fp8_max",
        says=("matmul_fp8_max", "1.7"),
    )
    data = _mutated(lambda d: d["cluster"]["fabric"].update(ll128=False))
    assert resolve_dict(data).fabric.ll128.value is False  # type: ignore[union-attr]

    def bad_ll128(d: dict[str, Any]) -> None:
        d["cluster"]["fabric"]["ll128"] = 3

    f = _write(tmp_path, _mutated(bad_ll128), "bad-ll128.yaml")
    assert_user_error(run_cli("check", str(f)), file=f, path="cluster.fabric.ll128")


def test_fp8_on_a_gpu_without_fp8_tensor_cores(tmp_path: Path) -> None:
    def a100_fp8(d: dict[str, Any]) -> None:
        d["cluster"]["gpu"] = "a100-sxm4-80gb"
        d["training"]["precision"] = "fp8"

    f = _write(tmp_path, _mutated(a100_fp8))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="training.precision",
        says=("a100-sxm4-80gb", "fp8"),
        hint=("bf16",),
    )


def test_duplicate_key_is_refused_not_silently_overwritten(tmp_path: Path) -> None:
    text = (REPO / "scenarios" / "llama3-8b-8xh100.yaml").read_text()
    f = tmp_path / "dup.yaml"
    f.write_text(text.replace("training:\n", "training:\n  global_batch: 64\n", 1))
    assert_user_error(
        run_cli("check", str(f)), file=f, path=None, says=("'global_batch' is given twice",)
    )
    res = run_cli("check", "llama3-8b-8xh100", "--set", "training={micro_batch: 1, micro_batch: 2}")
    assert_user_error(res, file=None, path=None, says=("'micro_batch' is given twice",))


def test_oversized_yaml_message_reads_well(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("name: x\n" + "# padding\n" * 120_000)
    res = run_cli("check", str(f))
    assert_user_error(res, file=f, path=None, says=("the YAML is larger than",))
    assert "is is" not in res.stderr


@pytest.mark.parametrize("command", ["simulate", "check"])
def test_impossible_scaling_reference_is_an_error_not_a_missing_figure(command: str) -> None:
    res = run_cli(command, "llama3-70b-64xh100", "--set", "run.scaling_reference.nodes=2")
    assert_user_error(
        res,
        file=None,
        path="run.scaling_reference.nodes",
        says=("not a valid layout", "16 GPUs"),
        hint=("32 GPUs",),
    )


def test_an_int_key_and_a_string_key_are_not_duplicates() -> None:
    from simulator.config.yamlio import load_text

    assert load_text("a:\n  1: x\n  '1': y\n") == {"a": {1: "x", "1": "y"}}
