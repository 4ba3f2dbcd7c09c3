"""The hardware catalogue: every expected profile is there and validates, every figure cites a
real source, prices name existing GPUs, and `profiles list|show` print every profile and
number (table, JSON and CSV)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli

from simulator.catalog import bundled_profiles_dir, load_catalog, load_profile_file
from simulator.config.hardware import Sourced
from simulator.config.profiles import PROFILE_KINDS
from simulator.errors import UserError

EXPECTED_PROFILES = {
    "gpu": [
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm-80gb",
        "h100-pcie-80gb",
        "h200-sxm-141gb",
        "b200",
        "l40s",
        "mi300x",
    ],
    "fabric": [
        "nvlink3-nvswitch",
        "nvlink4-nvswitch",
        "nvlink5-nvswitch",
        "pcie4-host",
        "pcie4-switch",
        "pcie5-host",
        "pcie5-switch",
        "infinity-fabric-mi300x",
    ],
    "network": [
        "ib-hdr-200",
        "ib-ndr-400",
        "ib-xdr-800",
        "roce-100",
        "roce-200",
        "roce-400",
        "tcp-25gbe",
        "tcp-100gbe",
    ],
    "storage": ["local-nvme", "lustre", "nfs", "object-store"],
    "price": ["aws-p5-h100", "aws-p4de-a100-80gb", "own-dgx-h100"],
}

FOLDER_KINDS = {
    "gpus": {"gpu"},
    "fabrics": {"fabric"},
    "networks": {"network"},
    "storage": {"storage"},
    "prices": {"cloud_price", "ownership_price"},
    "software": {"software"},
    "calibrated": set(PROFILE_KINDS),
}


def _profile_files() -> list[Path]:
    """The shipped catalogue: not the (git-ignored) output of `clustersim calibrate` under
    calibrated/, except its tracked examples."""
    return sorted(
        p
        for p in bundled_profiles_dir().rglob("*.yaml")
        if p.parent.name != "calibrated" or p.name.startswith("example-")
    )


def _sourced(value: Any, prefix: str = "") -> list[tuple[str, Sourced]]:
    """Every sourced figure in a profile, with its field path."""
    if isinstance(value, Sourced):
        return [(prefix, value)]
    if isinstance(value, dict):
        out: list[tuple[str, Sourced]] = []
        for k, v in value.items():
            out += _sourced(v, f"{prefix}.{k}")
        return out
    if hasattr(type(value), "model_fields"):
        out = []
        for k in type(value).model_fields:
            out += _sourced(getattr(value, k), f"{prefix}.{k}" if prefix else k)
        return out
    return []


# --------------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------------


def test_catalogue_has_the_expected_profiles() -> None:
    cat = load_catalog()
    for kind, names in EXPECTED_PROFILES.items():
        kinds = ("cloud_price", "ownership_price") if kind == "price" else (kind,)
        for name in names:
            assert name in cat.by_kind(*kinds), f"missing {kind} profile {name}"


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: p.stem)
def test_profile_file_validates(path: Path) -> None:
    prof = load_profile_file(path)
    assert prof.name == path.stem
    folder = path.parent.name
    assert folder in FOLDER_KINDS, f"unexpected folder {folder}"
    assert prof.kind in FOLDER_KINDS[folder]  # type: ignore[attr-defined]
    raw = yaml.safe_load(path.read_text())
    assert raw["kind"] in PROFILE_KINDS


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: p.stem)
def test_every_figure_has_a_real_source(path: Path) -> None:
    prof = load_profile_file(path)
    figures = _sourced(prof)
    assert figures
    for field, fig in figures:
        assert "todo" not in fig.source.lower(), f"{path.name}: {field} source is TODO"
        assert "tbd" not in fig.source.lower(), f"{path.name}: {field}"
        assert "inline override" not in fig.source, f"{path.name}: {field} has a bare number"
        assert len(fig.source.strip()) >= 10, f"{path.name}: {field}: '{fig.source}'"
    assert "TODO" not in path.read_text()


def test_prices_name_existing_gpus() -> None:
    cat = load_catalog()
    gpus = cat.by_kind("gpu")
    for name, prof in cat.by_kind("cloud_price", "ownership_price").items():
        assert prof.gpu in gpus, f"{name} prices unknown GPU {prof.gpu}"  # type: ignore[attr-defined]


def test_gpu_profiles_are_plausible() -> None:
    for name, g in load_catalog().by_kind("gpu").items():
        eff = g.efficiency  # type: ignore[attr-defined]
        assert 0 < eff.matmul_max.value <= 1, name
        assert 0 < eff.attention_max.value <= 1, name
        assert 0 < eff.memory_bandwidth.value <= 1, name
        peak = g.peak_tflops  # type: ignore[attr-defined]
        assert "bf16" in peak or "fp16" in peak, name
        if "fp8" in peak and "bf16" in peak:
            assert peak["fp8"].value >= peak["bf16"].value, name


def test_profiles_list_shows_every_profile() -> None:
    res = run_cli("profiles", "list")
    assert res.returncode == 0, res.stderr
    cat = load_catalog()
    for name in cat.profiles:
        assert name in res.stdout, name
    js = run_cli("profiles", "list", "--format", "json")
    listed = {p["name"] for p in json.loads(js.stdout)}
    assert listed == set(cat.profiles)
    assert {p.stem for p in _profile_files()} <= listed


def test_profiles_list_by_kind() -> None:
    res = run_cli("profiles", "list", "--kind", "network", "--format", "json")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    assert items and all(p["kind"] == "network" for p in items)


def test_profiles_show_prints_every_number_with_its_source() -> None:
    res = run_cli("profiles", "show", "h100-sxm-80gb")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    prof = load_catalog().get("h100-sxm-80gb")
    assert prof.display_name in out
    assert "source" in out
    assert "TODO" not in out
    for field, fig in _sourced(prof):
        line = next((ln for ln in out.splitlines() if f" {field} " in ln), None)
        assert line is not None, field
        # The value's row carries a source (first words of it, before any folding).
        assert fig.source.split()[0] in line, (field, line)
    js = json.loads(run_cli("profiles", "show", "h100-sxm-80gb", "--format", "json").stdout)
    assert js["name"] == "h100-sxm-80gb"
    assert js["memory_gb"]["value"] == prof.memory_gb.value  # type: ignore[attr-defined]
    assert js["memory_gb"]["source"]


def test_profiles_list_and_show_csv() -> None:
    import csv
    import io

    res = run_cli("profiles", "list", "--kind", "gpu", "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {r["name"] for r in rows} >= {"h100-sxm-80gb", "a100-sxm4-80gb"}
    assert all(r["kind"] == "gpu" and r["file"].endswith(".yaml") for r in rows)
    res = run_cli("profiles", "show", "h100-sxm-80gb", "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    peak = {r["field"]: r for r in rows}["peak_tflops.bf16"]
    assert float(peak["value"]) > 900 and peak["source"]


def test_a_local_profile_that_replaces_a_bundled_one_is_said_by_every_command(
    tmp_path: Path,
) -> None:
    """check, simulate, compare and sweep each name the file a prediction was made from."""
    src = REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml"
    data = yaml.safe_load(src.read_text())
    data["memory_bandwidth_gbps"]["value"] = 2000
    (tmp_path / "hardware_profiles").mkdir()
    (tmp_path / "hardware_profiles" / "h100-sxm-80gb.yaml").write_text(yaml.safe_dump(data))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"),
                "axes": [{"training.micro_batch": [1]}],
            }
        )
    )
    said = "which replaces"
    res = run_cli("check", "llama3-8b-8xh100", cwd=tmp_path)
    assert res.returncode == 0 and said in res.stderr
    res = run_cli("simulate", "llama3-8b-8xh100", "--format", "json", cwd=tmp_path)
    assert any(said in n for n in json.loads(res.stdout)["notes"])
    res = run_cli(
        "compare", "llama3-8b-8xh100", "llama3-8b-8xh100", "--format", "json", cwd=tmp_path
    )
    assert any(said in n for n in json.loads(res.stdout)["notes"])
    res = run_cli("sweep", str(spec), "--out", str(tmp_path / "o.csv"), cwd=tmp_path)
    assert res.returncode == 0 and said in res.stderr
    # from elsewhere, the bundled profile and no note
    assert said not in run_cli("check", "llama3-8b-8xh100").stderr


def test_shipped_profiles_parse_the_same_with_libyaml() -> None:
    """The bundled profiles are read by libyaml (cold start); every one gives the same data,
    types included, as the bounded Python loader that reads a user's files."""
    from simulator.catalog import bundled_profiles_dir, profile_files
    from simulator.config.yamlio import load_text, read_file_text

    files = profile_files(bundled_profiles_dir())
    assert len(files) > 40
    for f in files:
        text = read_file_text(f, 4_000_000)
        assert repr(load_text(text, shipped=True)) == repr(load_text(text)), f


def test_without_libyaml_every_command_still_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['yaml._yaml'] = None\n"
        "import yaml; assert not yaml.__with_libyaml__\n"
        "from simulator.cli import main\n"
        "sys.argv = ['clustersim', 'check', sys.argv[1]]\n"
        "main()\n"
    )
    scen = str(REPO / "scenarios" / "llama3-8b-8xh100.yaml")
    r = subprocess.run([sys.executable, "-c", code, scen], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_calibrated_profiles_in_the_bundled_folder_are_read_as_a_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in a source checkout ./hardware_profiles is the bundled folder and `calibrate` writes to
    # its calibrated/: such a file is read by the bounded Python loader, not libyaml (which
    # refuses an unknown %directive the Python loader accepts)
    import simulator.catalog as catalog

    monkeypatch.setattr(catalog, "bundled_profiles_dir", lambda: tmp_path)
    src = (REPO / "hardware_profiles" / "storage" / "lustre.yaml").read_text()
    for sub in ("calibrated", "storage"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "lustre.yaml").write_text("%FOO bar\n---\n" + src)
    assert catalog.load_profile_file(tmp_path / "calibrated" / "lustre.yaml").name == "lustre"
    import yaml

    if yaml.__with_libyaml__:
        with pytest.raises(catalog.UserError):
            catalog.load_profile_file(tmp_path / "storage" / "lustre.yaml")


def test_a_name_read_alone_is_what_the_whole_catalogue_holds_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scenario reads only the files named for its profiles (cold start); for every name the
    result, its file and what it replaced are the whole catalogue's, a local copy, a clash of
    kinds and a broken file included."""
    from simulator.catalog import get_profile

    local = tmp_path / "profiles"
    (local / "gpus").mkdir(parents=True)
    h100 = REPO / "hardware_profiles" / "gpus" / "h100-sxm-80gb.yaml"
    (local / "gpus" / "h100-sxm-80gb.yaml").write_text(
        h100.read_text().replace("display_name:", "display_name: local", 1)
    )
    (local / "gpus" / "broken.yaml").write_text("kind: gpu\nname: broken\n")
    (local / "gpus" / "lustre.yaml").write_text(h100.read_text().replace("h100-sxm-80gb", "lustre"))
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(local))
    whole = load_catalog()
    names = [*whole.profiles, *whole.broken, *whole.clashes]
    assert {"h100-sxm-80gb", "broken", "lustre"} <= set(names)
    for name in names:
        one = load_catalog(name)
        assert one.profiles.get(name) == whole.profiles.get(name), name
        assert one.files.get(name) == whole.files.get(name), name
        assert one.replaced.get(name) == whole.replaced.get(name), name
        assert (name in one.broken, name in one.clashes) == (
            name in whole.broken,
            name in whole.clashes,
        ), name
    assert get_profile("h100-sxm-80gb", "gpu") == whole.get("h100-sxm-80gb", "gpu")
    with pytest.raises(UserError, match="did you mean"):
        get_profile("h100-sxm-80", "gpu")  # the whole catalogue's suggestion
