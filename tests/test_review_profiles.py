"""What an extensibility review (2026-12-07, a new GPU, network, price and software stack
written as YAML by a new user) found: two files of one name in one profile folder are refused
rather than picked by sorting order; a placeholder source ('TBD') is refused in a profile file;
'did you mean' ignores case and offers prefixes; a missing failure rate or efficiency figure
is announced in the notes (and compare gives no reliability verdict across such profiles);
`tail_latency`, which the engine never read, is optional; activation offloading copies at the
GPU's achieved host-link rate, and behind a PCIe switch all GPUs share its uplink."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_cli
from test_errors import assert_user_error

from simulator.config.loading import load_scenario
from simulator.errors import closest
from simulator.simulate import simulate

BUNDLED = REPO / "hardware_profiles"
H100 = BUNDLED / "gpus" / "h100-sxm-80gb.yaml"


def _gpu(folder: Path, name: str, edit: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    data = yaml.safe_load(H100.read_text())
    data["name"] = name
    for key in drop:
        data.pop(key)
    for key, value in (edit or {}).items():
        data[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _use(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(folder))


def test_two_different_files_of_one_name_in_one_folder_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = tmp_path / "prof"
    _gpu(prof / "gpus", "h100-copy")
    _gpu(prof / "gpus" / "old", "h100-copy", {"tdp_w": {"value": 500, "source": "an old copy"}})
    _use(monkeypatch, prof)
    res = run_cli("profiles", "show", "h100-copy")
    assert_user_error(
        res, file=None, path=None, says=("two files in one profile folder",), hint=("delete",)
    )
    assert "old/h100-copy.yaml" in res.stderr
    assert run_cli("profiles", "list").returncode == 2


def test_an_identical_copy_in_the_same_folder_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = tmp_path / "prof"
    _gpu(prof / "gpus", "h100-copy")
    _gpu(prof / "gpus" / "backup", "h100-copy")
    _use(monkeypatch, prof)
    assert run_cli("profiles", "show", "h100-copy").returncode == 0


@pytest.mark.parametrize(
    "source",
    ["TBD", "todo: find it", "estimate", "n/a", "datasheet", "x" * 32, "datasheet2024"],
)
def test_a_placeholder_source_is_refused_in_a_profile_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    prof = tmp_path / "prof"
    path = _gpu(prof / "gpus", "h100-src", {"tdp_w": {"value": 700, "source": source}})
    _use(monkeypatch, prof)
    res = run_cli("profiles", "show", "h100-src")
    assert_user_error(res, file=None, path=None, says=("tdp_w.source", str(path)))


def test_a_scenario_inline_figure_keeps_its_short_source() -> None:
    rs = load_scenario(
        REPO / "scenarios" / "llama3-8b-8xh100.yaml",
        ["cluster.gpu.tdp_w={value: 600, source: mine}"],
    )
    assert rs.gpu.tdp_w.value == 600


@pytest.mark.parametrize(
    ("written", "first"),
    [
        ("H20", "h20-96gb"),
        ("H20-96GB", "h20-96gb"),
        ("gpus/h20-96gb.yaml", "h20-96gb"),
        ("h2o-96gb", "h20-96gb"),
        ("H100", "h100-sxm-80gb"),
    ],
)
def test_did_you_mean_ignores_case_and_offers_prefixes(written: str, first: str) -> None:
    pool = ["h20-96gb", "b200", "gb200", "h100-sxm-80gb", "h200-sxm-141gb"]
    assert closest(written, pool)[0] == first


def test_profiles_list_takes_the_folder_names_of_kinds() -> None:
    res = run_cli("profiles", "list", "GPUs", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert {p["kind"] for p in json.loads(res.stdout)} == {"gpu"}


def test_a_network_profile_needs_no_tail_latency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = yaml.safe_load((BUNDLED / "networks" / "ib-ndr-400.yaml").read_text())
    assert "tail_latency" not in data
    data["name"] = "ib-ndr-400-tail"
    data["tail_latency"] = {"sigma": {"value": 0.3, "source": "a probe run's fit spread"}}
    (tmp_path / "networks").mkdir()
    (tmp_path / "networks" / "ib-ndr-400-tail.yaml").write_text(yaml.safe_dump(data))
    _use(monkeypatch, tmp_path)
    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    plain = simulate(load_scenario(base), scaling=False)
    tail = simulate(load_scenario(base, ["cluster.network.profile=ib-ndr-400-tail"]), scaling=False)
    # recorded, not modelled: the step is the same
    assert tail.metrics.step_time_s == pytest.approx(plain.metrics.step_time_s, rel=1e-12)


def test_a_missing_failure_rate_is_a_note_and_compare_gives_no_verdict_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = tmp_path / "prof"
    _gpu(prof / "gpus", "h100-nomtbf", drop=("mtbf_other_hours",))
    _use(monkeypatch, prof)
    base = yaml.safe_load((REPO / "scenarios" / "llama3-70b-64xh100.yaml").read_text())
    files = []
    for gpu in ("h100-sxm-80gb", "h100-nomtbf"):
        d = dict(base, name=gpu)
        d["cluster"] = dict(base["cluster"], gpu=gpu)
        d["cluster"].pop("pricing")
        files.append(tmp_path / f"{gpu}.yaml")
        files[-1].write_text(yaml.safe_dump(d))
    res = run_cli("simulate", str(files[1]), "--no-scaling", "--format", "json")
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("no mtbf_other_hours" in n and "are not modelled" in n for n in notes), notes
    res = run_cli("compare", *map(str, files), "--format", "json")
    assert res.returncode == 0, res.stderr
    row = next(r for r in json.loads(res.stdout)["metrics"] if r["metric"] == "goodput")
    assert row["best"] is None
    assert "failure rates" in row["verdict"]


def test_a_stack_kernel_the_gpu_has_no_figure_for_is_a_note() -> None:
    rs = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        ["cluster.gpu=a100-sxm4-80gb", "cluster.pricing=null"],
    )
    assert rs.software.flash_kernel.value == "flash3"
    notes = simulate(rs, scaling=False).notes
    assert any("no efficiency.attention_flash3_max" in n for n in notes), notes
    h100 = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml")
    assert not any("attention_flash3_max" in n for n in simulate(h100, scaling=False).notes)


OFFLOAD = [
    "cluster.gpu=h100-pcie-80gb",
    "cluster.gpu.host_link_gbps=64",
    "cluster.fabric=pcie5-switch",
    "parallelism.offload_activation_layers=24",
    "parallelism.recompute=none",
    "parallelism.pp=1",
    "cluster.pricing=null",
]


def _offload_step(*sets: str) -> float:
    rs = load_scenario(REPO / "scenarios" / "llama3-8b-8xh100.yaml", [*OFFLOAD, *sets])
    return simulate(rs, scaling=False).metrics.step_time_s


def test_offloading_copies_at_the_achieved_host_link_rate() -> None:
    # a lower achieved fraction of the link is never faster, and the uplink shared behind
    # the switch is the tighter limit once it is narrow (eight GPUs copy up one link)
    wide = "cluster.fabric.shared_uplink_gbps=1000"
    full = _offload_step(wide, "cluster.gpu.efficiency.host_link=1.0")
    half = _offload_step(wide, "cluster.gpu.efficiency.host_link=0.5")
    assert half > full
    narrow = _offload_step("cluster.fabric.shared_uplink_gbps=32")
    narrower = _offload_step("cluster.fabric.shared_uplink_gbps=8")
    assert narrower > narrow > _offload_step(wide)


def test_the_offload_note_names_the_missing_host_link_efficiency() -> None:
    rs = load_scenario(REPO / "scenarios" / "llama3-8b-8xh100.yaml", OFFLOAD)
    assert rs.gpu.efficiency.host_link is None
    assert any("no efficiency.host_link" in n for n in simulate(rs, scaling=False).notes)


def test_profile_file_messages_say_what_to_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    (gpus / "empty.yaml").write_text("")
    bare = _gpu(gpus, "h100-bare", {"tdp_w": 700})
    data = yaml.safe_load(H100.read_text())
    data["name"] = "H100-Mine"
    (gpus / "H100-Mine.yaml").write_text(yaml.safe_dump(data))
    _use(monkeypatch, tmp_path)
    res = run_cli("profiles", "show", "empty")
    assert_user_error(res, file=None, path=None, says=("the profile file is empty",))
    res = run_cli("profiles", "show", "h100-bare")
    assert_user_error(res, file=None, path=None, says=(str(bare), "tdp_w"), hint=("{value: 700",))
    res = run_cli("profiles", "list")
    assert res.returncode == 2
    assert "use h100-mine" in res.stderr and "lower-case" in res.stderr


def test_a_likely_unit_slip_is_a_note_and_real_parts_give_none() -> None:
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    slipped = load_scenario(base, ["cluster.gpu.memory_bandwidth_gbps=4"])  # 4 TB/s meant
    assert any("check the units" in n for n in simulate(slipped, scaling=False).notes)
    from simulator.engine.compute import unit_slips

    for gpu, dtype in (
        ("h100-sxm-80gb", "bf16"),
        ("a100-sxm4-40gb", "bf16"),
        ("v100-sxm2-32gb", "fp16"),
        ("mi300x", "bf16"),
    ):
        sets = [f"cluster.gpu={gpu}", "cluster.pricing=null", f"training.precision={dtype}"]
        if gpu == "mi300x":
            sets.append("cluster.fabric=infinity-fabric-mi300x")
        assert unit_slips(load_scenario(base, sets)) == [], gpu


def test_the_gpus_compute_capability_sets_ncclss_ll128_channel_rate() -> None:
    """Across nodes NCCL rates an LL128 channel by the GPU generation (perChMax*LL128Bws:
    Hopper 29-36.7 GB/s, Ampere 20): a Hopper GPU on an NVLink fabric without NVLink SHARP gets
    Hopper's rate from its compute_capability, where it was inferred as Ampere's."""
    from simulator.network.collectives import GroupShape, choose
    from simulator.network.nccl import TierLink

    net = TierLink(bandwidth=46e9, alpha=2e-6)
    shape = GroupShape(8 * 4, 4)
    times = {}
    for sm90 in (None, False, True):
        fab = TierLink(bandwidth=369e9, alpha=2e-6, ll128=True, sm90=sm90)
        times[sm90] = [choose("all_reduce", shape, s, fab, net)[2] for s in (2.0**18, 2.0**20)]
    assert times[None] == times[False]  # no switch reduction: inferred as Ampere
    assert all(h <= a for h, a in zip(times[True], times[False], strict=True))
    assert any(h < a for h, a in zip(times[True], times[False], strict=True))
    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml")
    assert rs.gpu.compute_capability is not None and rs.gpu.compute_capability.value == 9.0


def test_torchtitan_runs_cudnn_attention_on_blackwell_and_fa2_on_hopper() -> None:
    """torchtitan puts cuDNN attention first from compute capability 10.0 (its PR #1196),
    FlashAttention-2 first on Hopper: so on B200 flash attention is faster than the unfused
    path again (the physics review found it 10% slower with the portable kernel there)."""
    from simulator.config.software import attention_kernel

    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    b200 = ["cluster.gpu=b200", "cluster.fabric=nvlink5-nvswitch", "cluster.pricing=null"]
    rs = load_scenario(base, [*b200, "software=torchtitan"])
    assert attention_kernel(rs.software, rs.gpu) == "flash3"
    h100 = load_scenario(base, ["software=torchtitan", "cluster.pricing=null"])
    assert attention_kernel(h100.software, h100.gpu) == "flash2"
    steps = {
        fa: simulate(
            load_scenario(base, [*b200, "software=torchtitan", f"training.flash_attention={fa}"]),
            scaling=False,
        ).metrics.step_time_s
        for fa in ("true", "false")
    }
    assert steps["true"] < steps["false"]


def _software(folder: Path, name: str, body: dict) -> None:
    (folder / "software").mkdir(parents=True, exist_ok=True)
    data = {"kind": "software", "name": name, "display_name": name, **body}
    (folder / "software" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_stack_written_as_a_variant_of_another_takes_its_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``base: megatron-core`` and one switch: every other field is megatron-core's, so the
    variant times a step as megatron-core with that switch set does."""
    tp = {"tp_comm": {"value": True, "source": "NeMo launcher configs: ub_tp_comm_overlap"}}
    _software(tmp_path, "nemo-tp-overlap", {"base": "megatron-core", "overlap": tp})
    _use(monkeypatch, tmp_path)
    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    variant = load_scenario(base, ["software=nemo-tp-overlap"])
    same = load_scenario(base, ["software.overlap.tp_comm=true"])
    assert variant.software.flash_kernel == same.software.flash_kernel
    assert variant.software.overlap.tp_comm.value is True
    assert variant.software.overlap.dp_grad == same.software.overlap.dp_grad  # merged, kept
    a = simulate(variant, scaling=False).metrics.step_time_s
    b = simulate(same, scaling=False).metrics.step_time_s
    assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize(
    ("profiles", "says"),
    [
        ({"v1": {"base": "megatron-cor"}}, "no profile 'megatron-cor'"),
        ({"v1": {"base": "v2"}, "v2": {"base": "v1"}}, "leads back"),
        ({"v1": {"base": "h100-sxm-80gb"}}, "is a gpu profile"),
        ({"v1": {"base": "v1"}}, "names this profile itself"),
        # a chain of ten without a loop: too deep, not a loop
        ({f"v{i}": {"base": f"v{i + 1}"} for i in range(1, 11)}, "more than 8 profiles deep"),
    ],
)
def test_a_bad_base_is_one_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profiles: dict, says: str
) -> None:
    for name, body in profiles.items():
        _software(tmp_path, name, body)
    _use(monkeypatch, tmp_path)
    res = run_cli("profiles", "show", "v1")
    assert_user_error(res, file=None, path=None, says=(says,))


def test_a_local_copy_of_a_bundled_profile_may_start_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local megatron-core.yaml with ``base: megatron-core`` changes one switch of the bundled
    stack it replaces (it was refused as a loop, which broke every scenario using the stack);
    a scenario then runs as the bundled stack with that switch set, and says a local copy
    replaced the bundled one."""
    tp = {"tp_comm": {"value": True, "source": "NeMo launcher configs: ub_tp_comm_overlap"}}
    _software(tmp_path, "megatron-core", {"base": "megatron-core", "overlap": tp})
    _use(monkeypatch, tmp_path)
    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    local = load_scenario(base)
    assert local.software.overlap.tp_comm.value is True
    assert local.software.overlap.dp_grad.value is True  # the bundled stack's, kept
    res = run_cli("simulate", str(base), "--no-scaling", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert any("megatron-core" in n for n in json.loads(res.stdout)["notes"])


def test_a_local_copy_reached_through_two_profile_folders_still_starts_from_the_bundled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same file found again through $CLUSTERSIM_PROFILE_PATH pointing inside
    ./hardware_profiles is not the profile below it: that was refused as a loop."""
    gpus = tmp_path / "hardware_profiles" / "gpus"
    gpus.mkdir(parents=True)
    (gpus / "h100-sxm-80gb.yaml").write_text(
        "kind: gpu\nname: h100-sxm-80gb\nbase: h100-sxm-80gb\ndisplay_name: local H100\n"
    )
    monkeypatch.setenv("CLUSTERSIM_PROFILE_PATH", str(gpus))
    res = run_cli("check", str(REPO / "scenarios" / "llama3-8b-8xh100.yaml"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("memory_gb", [94.0, 40.0])
def test_a_gpu_variant_with_other_memory_exposes_the_bases_usable_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_gb: float
) -> None:
    """``base: h100-sxm-80gb`` with another ``memory_gb`` usable as the inline what-if's: the
    base's usable share of the datasheet figure (it kept 85 GB of a 94 GB part, and a 40 GB
    variant was refused as exposing more than it has)."""
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    mem = {"value": memory_gb, "source": "a variant of the H100 with other memory"}
    (gpus / "h100-var.yaml").write_text(
        yaml.safe_dump(
            {"kind": "gpu", "name": "h100-var", "display_name": "H100 variant"}
            | {"base": "h100-sxm-80gb", "memory_gb": mem}
        )
    )
    _use(monkeypatch, tmp_path)
    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    variant = load_scenario(base, ["cluster.gpu=h100-var", "cluster.pricing=null"])
    inline = load_scenario(base, [f"cluster.gpu.memory_gb={memory_gb}"])
    assert variant.gpu.capacity_gb == pytest.approx(inline.gpu.capacity_gb)
    assert variant.gpu.capacity_gb < memory_gb * 1.07


def test_a_profile_whose_kind_is_wrong_is_told_the_kind_its_fields_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU file written kind: fabric was answered 'memory_bandwidth_gbps: unknown field ...
    did you mean bandwidth_gbps?'."""
    path = _gpu(tmp_path / "gpus", "hk", {"kind": "fabric"})
    _use(monkeypatch, tmp_path)
    res = run_cli("profiles", "show", "hk")
    assert_user_error(res, file=path, path="kind", says=("fields are a gpu profile's",))
    assert "did you mean" not in res.stderr
