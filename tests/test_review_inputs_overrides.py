"""Bad inputs a review found handled poorly (each now one message, exit 2, naming the field):
a figure overridden without its value, a sweep whose deadline has no token budget left, a sweep
whose every point fails in the base scenario, cited software choices given bare, a YAML key
missing the space after its colon, a sweep's name, a profile base of another kind, and an
override that names another kind of profile."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_cli, run_cli_process
from test_sweep_checks import BASE, _write

from simulator.config.loading import load_scenario
from simulator.errors import UserError

EIGHT = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
SEVENTY = REPO / "scenarios" / "llama3-70b-64xh100.yaml"


@pytest.mark.parametrize(
    "figure", ["{source: 'estimate: a 96 GB part'}", "{}", "{note: 'a what-if'}"]
)
def test_a_figure_overridden_without_its_value_is_refused(figure: str) -> None:
    """It kept the profile's number under the new source, exit 0: the plan the user believed
    used 96 GB used 80."""
    with pytest.raises(UserError, match="gives no value") as e:
        load_scenario(EIGHT, [f"cluster.gpu.memory_gb={figure}"])
    assert e.value.path == "cluster.gpu.memory_gb" and "{value: NUMBER" in (e.value.hint or "")
    with pytest.raises(UserError, match="gives no value") as e:
        load_scenario(EIGHT, ["cluster.gpu.efficiency.matmul_max={source: 'from a probe run'}"])
    assert e.value.path == "cluster.gpu.efficiency.matmul_max"
    # with its value, the override is the what-if meant
    rs = load_scenario(EIGHT, ["cluster.gpu.memory_gb={value: 96, source: 'a 96 GB part'}"])
    assert rs.gpu.memory_gb.value == 96


@pytest.mark.parametrize("key", ["x", "-1", "value_"])
def test_a_figure_the_base_leaves_out_given_in_parts_is_named(key: str) -> None:
    """``software.pp_schedules.x=1f1b`` (a cited list the stack does not set): it was "add the
    field value", pointing at a field the user had no reason to write (a review)."""
    with pytest.raises(UserError, match="given whole") as e:
        load_scenario(SEVENTY, [f"software.pp_schedules.{key}=1f1b"])
    assert e.value.path == "software.pp_schedules"
    assert "{value: ..., source:" in (e.value.hint or "")


def test_a_deadline_needs_a_token_budget_some_point_keeps(tmp_path: Path) -> None:
    """An axis that replaces the whole run section drops run.tokens: the sweep ran, then said
    no layout met the deadline, exit 1, the answer a script reads as 'nothing fits'."""
    spec = _write(tmp_path, axes=[{"run": [{"stragglers": "off"}]}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out), "--best", "time", "--deadline-days", "1")
    assert res.returncode == 2 and "gives no token budget" in res.stderr
    assert "run.tokens stays" in res.stderr and not out.exists()
    spec = _write(tmp_path, "kept.yaml", axes=[{"run": [{"stragglers": "off", "tokens": 1e11}]}])
    res = run_cli("sweep", str(spec), "--out", str(out), "--best", "time", "--deadline-days", "90")
    assert res.returncode == 0, res.stderr
    # the section is set before the field inside it, whichever the option names first
    from simulator.sweep.axis_checks import tokens_reachable
    from simulator.sweep.spec import load_spec

    both = {"run.tokens": 1e11, "run": {"stragglers": "off"}}
    spec = _write(tmp_path, "both.yaml", axes=[{"run": [both]}])
    loaded, base, _ = load_spec(spec)
    assert tokens_reachable(loaded, base)


def test_a_base_scenario_that_fails_every_point_is_named(tmp_path: Path) -> None:
    """Every point failed at a field no axis sets; the message blamed the axes."""
    data = yaml.safe_load(BASE.read_text())
    data["training"]["global_batch"] = 63
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(data))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "t", "base": str(base), "axes": [{"run.tokens": [1e11, 2e11]}]})
    )
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"{base.resolve()}: training.global_batch: every point" in " ".join(res.stderr.split())
    assert "fix training.global_batch in the base scenario" in res.stderr


@pytest.mark.parametrize(
    ("field", "value", "want"),
    [
        ("pp_max_zero_stage", "1", 1),
        ("pp_schedules", "[1f1b, interleaved]", ["1f1b", "interleaved"]),
        ("selective_recompute", "alternate_matmuls", "alternate_matmuls"),
        ("pp_split", "cost_thresholds", "cost_thresholds"),
        ("loss_traffic", "[12, 24]", (12.0, 24.0)),
    ],
)
def test_a_cited_software_choice_may_be_given_bare_in_a_scenario(
    field: str, value: str, want: object
) -> None:
    """As a number or a flag may: it was refused as out of range when it was not."""
    rs = load_scenario(SEVENTY, ["software=megatron-core", f"software.{field}={value}"])
    got = getattr(rs.software, field)
    assert got.value == want and "inline" in got.source
    with pytest.raises(UserError, match="less than or equal to 3"):
        load_scenario(SEVENTY, ["software=megatron-core", "software.pp_max_zero_stage=5"])


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("cluster.gpu={profile:h100-sxm-80gb}", "write 'profile: h100-sxm-80gb'"),
        ("model={preset: llama3-8b, layers:12}", "write 'layers: 12', not 'layers:12'"),
    ],
)
def test_a_key_without_a_space_after_its_colon_says_so(setting: str, says: str) -> None:
    with pytest.raises(UserError) as e:
        load_scenario(EIGHT, [setting])
    assert "YAML needs a space after a colon" in (e.value.hint or "")
    assert says in (e.value.hint or "")


def test_a_sweep_name_is_not_held_to_the_profile_name_rule(tmp_path: Path) -> None:
    spec = _write(tmp_path, axes=[{"training.micro_batch": [1]}])
    data = yaml.safe_load(spec.read_text())
    data["name"] = "a/b"
    spec.write_text(yaml.safe_dump(data))
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"))
    assert res.returncode == 2 and "profile name" not in res.stderr and "use a-b" in res.stderr
    data["name"] = "My_Sweep"  # any case is a sweep's name
    spec.write_text(yaml.safe_dump(data))
    assert run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv")).returncode == 0


def test_a_profile_base_suggests_a_profile_of_its_own_kind(tmp_path: Path) -> None:
    gpus = tmp_path / "hardware_profiles" / "gpus"
    gpus.mkdir(parents=True)
    (gpus / "mine.yaml").write_text(
        "kind: gpu\nname: mine\ndisplay_name: mine\nbase: h100-sxm-80g\n"
    )
    res = run_cli_process(
        "check", str(EIGHT), "--set", "cluster.gpu=mine", "--set", "cluster.pricing=null",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2 and "did you mean h100-sxm-80gb?" in res.stderr


def test_a_profile_override_of_another_kind_is_refused() -> None:
    """The kind was ignored (a GPU slot given kind: fabric ran as the GPU)."""
    with pytest.raises(UserError, match="takes a gpu profile") as e:
        load_scenario(EIGHT, ["cluster.gpu={profile: h100-sxm-80gb, kind: fabric}"])
    assert e.value.path == "cluster.gpu.kind"
    assert load_scenario(EIGHT, ["cluster.gpu={profile: h100-sxm-80gb, kind: gpu}"])


def test_a_bundled_sweep_path_given_to_check_and_a_missing_sweep_say_what_they_are(
    tmp_path: Path,
) -> None:
    """Run from another folder, the README's path of a bundled sweep given to check read as
    'no such scenario file', and a missing sweep spec as an unreadable file."""
    res = run_cli("check", "scenarios/sweeps/gpu-generations.yaml", cwd=tmp_path)
    assert res.returncode == 2 and "is a bundled sweep spec, not a scenario" in res.stderr
    assert "clustersim sweep gpu-generations" in res.stderr
    out = str(tmp_path / "o.csv")
    res = run_cli("sweep", "scenarios/sweeps/nope.yaml", "--out", out, cwd=tmp_path)
    assert res.returncode == 2 and "no such sweep spec file" in res.stderr
    assert "gpu-generations" in res.stderr and "cannot read" not in res.stderr


def test_a_block_yaml_key_without_a_space_after_its_colon_says_so(tmp_path: Path) -> None:
    """'micro_batch:1' on its own line is one scalar to YAML: the file failed to parse with the
    generic 'fix the YAML syntax'."""
    text = EIGHT.read_text().replace("  micro_batch: 1", "  micro_batch:1")
    assert "micro_batch:1" in text
    path = tmp_path / "glued.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match="not valid YAML") as e:
        load_scenario(path)
    assert "write 'micro_batch: 1'" in (e.value.hint or "")


def test_a_section_axis_value_with_a_figure_out_of_range_is_refused_up_front(
    tmp_path: Path,
) -> None:
    """A scalar axis value out of range was refused before anything ran, a section given whole
    ran and wrote an invalid row with exit 0."""
    bad = {"profile": "h100-sxm-80gb", "memory_gb": -1}
    spec = _write(tmp_path, axes=[{"cluster.gpu": [bad, "h100-sxm-80gb"]}])
    out = tmp_path / "o.csv"
    res = run_cli("sweep", str(spec), "--out", str(out))
    assert res.returncode == 2 and "memory_gb must be within" in res.stderr
    assert "axes[0]" in res.stderr and not out.exists()


def test_a_profile_file_starting_from_a_base_refuses_a_figure_without_its_value(
    tmp_path: Path,
) -> None:
    """The same merge serves a profile file's base: and a scenario's inline override, so a
    figure given as {source: ...} is refused in both rather than kept at the base's number."""
    gpus = tmp_path / "hardware_profiles" / "gpus"
    gpus.mkdir(parents=True)
    (gpus / "mine.yaml").write_text(
        "kind: gpu\nname: mine\ndisplay_name: mine\nbase: h100-sxm-80gb\n"
        "memory_gb: {source: 'estimate: a 96 GB part'}\n"
    )
    res = run_cli_process(
        "check", str(EIGHT), "--set", "cluster.gpu=mine", "--set", "cluster.pricing=null",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2 and "memory_gb: this override of a figure gives no value" in (
        res.stderr
    )


def test_nics_beyond_one_per_gpu_are_a_note_as_they_carry_nothing() -> None:
    """A GPU sends through one NIC at most: more NICs than GPUs leave the step as it is (and a
    price profile still counts them), which the notes say."""
    from simulator.config.loading import load_scenario
    from simulator.simulate import simulate

    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    eight = simulate(load_scenario(base), scaling=False)
    more = simulate(load_scenario(base, ["cluster.network.nics_per_node=16"]), scaling=False)
    assert more.metrics.step_time_s == eight.metrics.step_time_s
    assert any("16 NICs per node for 8 GPUs" in n for n in more.notes)
    assert not any("NICs per node for" in n for n in eight.notes)
