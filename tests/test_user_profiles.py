"""A user's own profiles (CLUSTERSIM_PROFILE_PATH), as a user writes them: a GPU without the
peak its precision needs is refused before simulating, a `.yml` file is read, a YAML slip is
placed by line, a price profile naming no GPU is blamed in its own file, and `price` lists both
kinds of price profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from test_errors import assert_user_error

H100 = REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml"


def _gpu(folder: Path, name: str, drop: tuple[str, ...] = (), suffix: str = ".yaml") -> Path:
    lines = [
        line
        for line in H100.read_text().splitlines()
        if not any(line.startswith(f"  {d}:") for d in drop)
    ]
    text = "\n".join(lines).replace("name: h100-sxm-80gb", f"name: {name}", 1) + "\n"
    (folder / "gpus").mkdir(parents=True, exist_ok=True)
    path = folder / "gpus" / f"{name}{suffix}"
    path.write_text(text)
    return path


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8"])
def test_a_gpu_without_a_16_bit_peak_is_refused_not_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    _gpu(tmp_path, "x1", drop=("bf16", "fp16"))
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    for cmd in ("check", "simulate"):
        res = run_cli(
            cmd,
            "llama3-8b-8xh100",
            "--set",
            "cluster.gpu=x1",
            "--set",
            "cluster.pricing=null",
            "--set",
            f"training.precision={precision}",
        )
        assert_user_error(res, file=None, path="training.precision", hint=("peak_tflops.bf16",))


def test_bf16_on_a_gpu_with_only_an_fp16_peak_is_refused_with_fp16_suggested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU without bf16 tensor cores (V100) runs bf16 emulated, far below its fp16 rate: its
    fp16 peak is not a bf16 one. fp16 still runs on it."""
    _gpu(tmp_path, "x3", drop=("bf16",))
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    sets = ["--set", "cluster.gpu=x3", "--set", "cluster.pricing=null"]
    res = run_cli("check", "llama3-8b-8xh100", *sets, "--set", "training.precision=bf16")
    assert_user_error(res, file=None, path="training.precision", hint=("training.precision: fp16",))
    res = run_cli("check", "llama3-8b-8xh100", *sets, "--set", "training.precision=fp16")
    assert res.returncode == 0, res.stderr


def test_the_bundled_v100_refuses_bf16_and_runs_fp16() -> None:
    sets = ["--set", "cluster.gpu=v100-sxm2-32gb", "--set", "cluster.pricing=null"]
    res = run_cli("check", "llama3-8b-8xh100", *sets)  # a bf16 scenario
    assert_user_error(res, file=None, path="training.precision", hint=("training.precision: fp16",))
    res = run_cli(
        "simulate", "llama3-8b-8xh100", *sets, "--set", "training.precision=fp16",
        "--set", "training.flash_attention=false", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["gpu"] == "v100-sxm2-32gb"


def test_a_yml_profile_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(tmp_path, "x2", suffix=".yml")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    res = run_cli(
        "check", "llama3-8b-8xh100", "--set", "cluster.gpu=x2", "--set", "cluster.pricing=null"
    )
    assert res.returncode == 0, res.stderr


def test_a_yaml_slip_in_a_profile_is_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "x3.yaml").write_text(
        "kind: gpu\nname: x3\nmemory_gb: {value: 80, source: x\n"
    )
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu=x3")
    assert_user_error(res, file=None, path="cluster.gpu", says=("not valid YAML at line 4",))


def test_a_price_profile_naming_no_gpu_is_blamed_in_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = REPO / "hardware_profiles" / "prices" / "aws-p5-h100.yaml"
    text = src.read_text().replace("name: aws-p5-h100", "name: my-price", 1)
    text = text.replace("gpu: h100-sxm-80gb", "gpu: nosuchgpu", 1)
    (tmp_path / "prices").mkdir()
    mine = tmp_path / "prices" / "my-price.yaml"
    mine.write_text(text)
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.pricing.profile=my-price")
    assert_user_error(res, file=mine, path="gpu", says=("nosuchgpu",), hint=("gpu: field",))


def test_price_lists_both_kinds_of_price_profile() -> None:
    res = run_cli("profiles", "list", "price", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert {p["kind"] for p in json.loads(res.stdout)} == {"cloud_price", "ownership_price"}


def test_a_count_given_as_a_fraction_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """131.5 SMs, or a price quoted for instances of 3.5 GPUs (which was billed as instances of
    4), is a typo: whole-number figures are refused in a profile file and inline, and the
    message says the --set named the faulty profile rather than gave the value."""
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "half.yaml").write_text(
        "kind: cloud_price\nname: half\nbase: aws-p5-h100\ndisplay_name: half\n"
        "gpus_per_node: {value: 3.5, source: 'a typo in a quote, 2024'}\n"
    )
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    res = run_cli("simulate", "llama3-8b-8xh100", "--set", "cluster.pricing.profile=half")
    assert_user_error(res, file=None, path="cluster.pricing.profile", says=("whole number",))
    assert "names that profile" in res.stderr and "comes from" not in res.stderr
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu.sm_count=131.5")
    assert_user_error(res, file=None, path="cluster.gpu.sm_count", says=("whole number",))
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu.sm_count=132")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("where", ["gpus/vendor/custom/mine.yaml", "gpus/mine.YAML"])
def test_a_profile_file_that_is_not_read_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A file three folders down or ending in .YAML is not read; 'unknown profile' pointed the
    user at the ./hardware_profiles folder they already had instead of saying which file."""
    path = tmp_path / "profiles" / where
    path.parent.mkdir(parents=True)
    path.write_text(_gpu(tmp_path / "elsewhere", "mine").read_text())
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path / "profiles"))
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu=mine")
    assert_user_error(res, file=None, path="cluster.gpu", says=(str(path), "is not read"))


def test_a_broken_link_in_a_profile_folder_is_not_called_bad_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu=gone")
    assert_user_error(res, file=None, path="cluster.gpu", says=("a link that leads to no file",))
    assert "YAML" not in res.stderr


@pytest.mark.parametrize("name", ["a**b", "*", "x[1"])
def test_a_profile_name_with_glob_characters_is_unknown_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    deep = tmp_path / "gpus" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "foo.bak.yaml").write_text("kind: gpu\n")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    for asked in (name, "foo"):  # foo.bak.yaml is not a file named foo
        res = run_cli("check", "llama3-8b-8xh100", "--set", f"cluster.gpu={asked}")
        assert_user_error(res, file=None, path="cluster.gpu", says=("unknown gpu profile",))
        assert "is not read" not in res.stderr


def test_a_link_looping_on_itself_as_a_base_is_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "loopy.yaml").symlink_to("loopy.yaml")
    (tmp_path / "gpus" / "mine.yaml").write_text("kind: gpu\nname: mine\nbase: loopy\n")
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(tmp_path))
    assert run_cli("check", "llama3-8b-8xh100").returncode == 0
    res = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.gpu=mine")
    assert_user_error(res, file=None, path="cluster.gpu", says=("leads to no file",))
