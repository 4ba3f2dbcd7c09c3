"""Messages that say what to do where a user's first guess is wrong: a bare word where a
mapping with a ``kind`` goes is that mapping, a value from ``--set`` is blamed on ``--set``, a
partial profile is told to name its base, a left-out profile slot gets an example, and a
profile folder that is not one is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_cli, run_cli_process
from test_errors import assert_user_error

from simulator.config.loading import load_scenario

SC = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


@pytest.mark.parametrize(
    ("path", "kind", "get"),
    [
        ("parallelism.pp_schedule", "interleaved", lambda rs: rs.parallelism.pp_schedule),
        ("parallelism.sharding", "fsdp", lambda rs: rs.parallelism.sharding),
        ("cluster.network.topology", "single_switch", lambda rs: rs.topology),
        ("training.optimizer", "sgd", lambda rs: rs.training.optimizer),
    ],
)
def test_a_bare_kind_is_the_mapping_with_that_kind(path: str, kind: str, get: Any) -> None:
    assert get(load_scenario(SC, [f"{path}={kind}"])).kind == kind


def test_an_unknown_bare_kind_lists_the_kinds() -> None:
    res = run_cli("check", str(SC), "--set", "parallelism.pp_schedule=bogus")
    assert_user_error(res, file=None, path="parallelism.pp_schedule", says=("1f1b",))


def test_a_value_from_set_is_blamed_on_set() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.nodes=-1")
    assert_user_error(
        res, file=None, path="cluster.nodes", says=("comes from --set cluster.nodes=-1",)
    )


def test_a_field_of_another_kind_is_told_how_to_change_the_kind() -> None:
    """virtual_stages belongs to the interleaved schedule: set beside kind 1f1b it is refused
    with how to give the whole mapping."""
    res = run_cli(
        "check",
        "llama3-70b-64xh100",
        "--set",
        "parallelism.pp_schedule.kind=1f1b",
        "--set",
        "parallelism.pp_schedule.virtual_stages=2",
    )
    assert_user_error(
        res,
        file=None,
        path="parallelism.pp_schedule.virtual_stages",
        says=("unknown field 'virtual_stages'",),
        hint=("not a field of this kind", "--set 'parallelism.pp_schedule={kind: ...}'"),
    )


def test_an_unknown_field_outside_a_union_keeps_the_spelling_hint() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "training.optimizer.foo=1")
    assert_user_error(
        res,
        file=None,
        path="training.optimizer.foo",
        says=("unknown field 'foo'",),
        hint=("remove the field or fix its spelling",),
    )


def test_a_partial_profile_is_told_to_name_its_base() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu={memory_gb: 94}")
    assert_user_error(res, file=None, path=None, hint=("{profile: NAME, memory_gb: ...}",))


def test_a_left_out_fabric_gets_an_example(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: one\ncluster: {gpu: h100-sxm-80gb, gpus_per_node: 1, nodes: 1}\n"
        "model: llama3-8b\ntraining: {seq_len: 2048, global_batch: 8, micro_batch: 1}\n"
    )
    res = run_cli("check", str(sc))
    assert_user_error(res, file=sc, path="cluster.fabric", hint=("nvlink4-nvswitch",))


def test_a_profile_path_that_is_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "profiles"
    target.write_text("x")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(target))
    res = run_cli("check", "llama3-8b-8xh100")
    assert_user_error(res, file=None, path="CLUSTERSIM_PROFILE_PATH", hint=("unset it",))


def test_a_profile_path_not_made_yet_is_noted_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path / "later"))
    res = run_cli("check", "llama3-8b-8xh100")
    assert res.returncode == 0 and "does not exist" in res.stderr


def test_the_last_set_of_a_field_is_the_one_blamed() -> None:
    res = run_cli(
        "check", "llama3-8b-8xh100", "--set", "cluster.nodes=1", "--set", "cluster.nodes=-1"
    )
    assert_user_error(res, file=None, path="cluster.nodes", says=("--set cluster.nodes=-1",))


def test_a_bundled_sweep_named_to_simulate_points_to_sweep() -> None:
    res = run_cli("simulate", "gpu-generations")
    assert_user_error(res, file="gpu-generations", path=None, hint=("clustersim sweep",))


def test_a_profile_replacing_a_bundled_one_is_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local copy of a bundled profile wins (that is how calibrated profiles are used), but
    it never changes a prediction unannounced: the result names the file and what it replaced,
    and the prediction is the local profile's."""
    gpus = tmp_path / "mine" / "gpus"
    gpus.mkdir(parents=True)
    text = (REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml").read_text()
    assert "matmul_max: {value: 0.70," in text
    (gpus / "h100-sxm-80gb.yaml").write_text(
        text.replace("matmul_max: {value: 0.70,", "matmul_max: {value: 0.50,")
    )
    # an identical copy (a checkout's own folder beside the installed package) is no news
    same = REPO / "hardware_profiles" / "fabrics" / "nvlink4-nvswitch.yaml"
    (tmp_path / "mine" / "nvlink4-nvswitch.yaml").write_text(same.read_text())
    plain = json.loads(run_cli("simulate", "llama3-8b-8xh100", "--format", "json").stdout)
    assert not any("replaces" in n for n in plain["notes"])
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path / "mine"))
    res = run_cli("simulate", "llama3-8b-8xh100", "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    (note,) = [n for n in out["notes"] if "replaces" in n]
    assert "'h100-sxm-80gb'" in note and str(gpus / "h100-sxm-80gb.yaml") in note
    assert out["step_time_s"] > plain["step_time_s"]


def test_a_profile_reusing_another_kinds_name_is_left_out_and_named(tmp_path: Path) -> None:
    """A GPU profile called 'lustre' beside the bundled storage 'lustre': the bundled one
    stays (scenarios naming the storage run as before), the GPU one is reported."""
    d = tmp_path / "profiles"
    d.mkdir()
    src = (REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml").read_text()
    (d / "lustre.yaml").write_text(src.replace("name: h100-sxm-80gb", "name: lustre", 1))
    env = {"CLUSTERSIM_PROFILE_PATH": str(d)}
    ok = run_cli_process("check", "llama3-70b-64xh100", env=env)
    assert ok.returncode == 0, ok.stderr
    res = run_cli_process("profiles", "list", "--kind", "storage", env=env)
    assert res.returncode == 2 and "lustre" in res.stdout
    assert "is already the storage profile" in res.stderr


def test_a_bare_figure_in_a_profile_file_needs_its_source(tmp_path: Path) -> None:
    """In a scenario a bare number is an inline override; in a profile file every figure says
    where it comes from, so a bare one is refused there (it was shown as an 'inline override in
    scenario')."""
    d = tmp_path / "profiles"
    d.mkdir()
    src = (REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml").read_text()
    lines = [
        "memory_bandwidth_gbps: 3350" if ln.startswith("memory_bandwidth_gbps:") else ln
        for ln in src.replace("name: h100-sxm-80gb", "name: my-gpu", 1).splitlines()
    ]
    (d / "my-gpu.yaml").write_text("\n".join(lines) + "\n")
    res = run_cli_process("profiles", "show", "my-gpu", env={"CLUSTERSIM_PROFILE_PATH": str(d)})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "memory_bandwidth_gbps: a figure in a profile file needs its source" in res.stderr
    ok = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu.memory_bandwidth_gbps=3000")
    assert ok.returncode == 0, ok.stderr


def test_a_command_given_the_other_kind_of_file_says_which_it_is() -> None:
    """A scenario given to calibrate is not a damaged probe file, a bundled scenario's name
    given to sweep is not a missing file, and an unquoted YAML `no` is a boolean: each says
    so, with exit 2."""
    from conftest import REPO, run_cli

    res = run_cli("calibrate", str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"), "--name", "zz")
    assert res.returncode == 2 and "not a probe file" in res.stderr
    assert "truncated" not in res.stderr
    res = run_cli("sweep", "llama3-8b-8xh100", "--out", "x.csv")
    assert res.returncode == 2 and "is a bundled scenario, not a sweep spec" in res.stderr
    res = run_cli("check", "llama3-8b-8xh100", "--set", "parallelism.recompute=no")
    assert res.returncode == 2 and "quote the word" in res.stderr


def test_too_many_interleaved_chunks_are_told_which_virtual_stages_fit() -> None:
    """32 layers over PP 2 cannot take 32 chunks per rank: the fix is the chunk count, and the
    message names the counts that divide the layers (not a PP of 1)."""
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "parallelism.pp=2",
        "--set",
        "parallelism.pp_schedule={kind: interleaved, virtual_stages: 32}",
    )
    assert_user_error(
        res,
        file=None,
        path="parallelism.pp_schedule.virtual_stages",
        says=("more pipeline chunks than the 32 layers",),
        hint=("virtual_stages", "16", "PP=2"),
    )


def test_a_misspelt_field_is_named_before_the_gap_it_leaves(tmp_path: Path) -> None:
    """`layerz` for `layers` in an inline model: the message names the unknown field and the
    field it was meant to be, rather than only that `layers` is missing."""
    f = tmp_path / "typo.yaml"
    f.write_text(
        "name: t\n"
        "cluster: {gpu: h100-sxm-80gb, gpus_per_node: 8, nodes: 1, fabric: nvlink4-nvswitch}\n"
        "model: {hidden: 1024, layerz: 4, heads: 16, vocab: 32000}\n"
        "training: {seq_len: 1024, global_batch: 8, micro_batch: 1}\n"
    )
    res = run_cli("check", str(f))
    assert_user_error(res, file=f, path="model.layerz", hint=("did you mean 'layers'?",))


def test_more_cpu_sockets_than_gpus_is_refused() -> None:
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "cluster.fabric=pcie4-host",
        "--set",
        "cluster.fabric.sockets=16",
    )
    assert_user_error(res, file=None, path="cluster.fabric.sockets", hint=("at most 8",))


def test_the_kind_of_profile_to_list_may_be_given_as_a_word() -> None:
    """The form the error hints give (`clustersim profiles list fabric`) works, as does
    `--kind`; two different kinds are refused."""
    word = run_cli("profiles", "list", "fabric", "--format", "json")
    option = run_cli("profiles", "list", "--kind", "fabric", "--format", "json")
    assert word.returncode == 0, word.stderr
    assert json.loads(word.stdout) == json.loads(option.stdout)
    assert {p["kind"] for p in json.loads(word.stdout)} == {"fabric"}
    both = run_cli("profiles", "list", "gpu", "--kind", "fabric")
    assert_user_error(both, file=None, path=None, says=("two kinds",))


def test_a_16_bit_gradient_reduction_under_fp32_training_is_noted() -> None:
    rs = load_scenario(
        REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        ["training.precision=fp32", "training.grad_reduce_dtype=bf16"],
    )
    assert rs.grad_reduce_fp32
    assert any("grad_reduce_dtype bf16 has no effect" in n for n in rs.model_notes())
