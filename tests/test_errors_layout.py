"""Layouts that do not divide: DP·TP·PP·CP against the GPU count, TP against the heads, PP
against the layers, the global batch against DP·micro-batch, and the other layout checks; each
one message with the field path and what to do, exit 2."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from conftest import inline_scenario, run_cli
from test_errors import _mutated, _write, assert_user_error

from simulator.config.loading import resolve_dict
from simulator.errors import UserError


def test_degrees_do_not_multiply_to_gpu_count(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"].update(dp=3, tp=2)

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism.dp",
        says=("DP·TP·PP·CP = 3·2·1·1 = 6", "8 GPUs"),
        hint=("dp: auto", "dp: 4"),
    )


def test_degrees_do_not_divide_gpu_count(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"].update(tp=2, pp=3)

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism",
        says=("TP·PP·CP = 2·3·1 = 6",),
        hint=("divide 8",),
    )


def test_tp_not_dividing_heads(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"]["tp"] = 6  # 6 GPUs per node, 32 heads

    f = _write(tmp_path, _mutated(change, gpus_per_node=6, global_batch=12))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism.tp",
        says=("TP=6", "32 attention heads"),
        hint=("1, 2, 4, 8, 16, 32",),
    )


def test_tp_not_dividing_the_feed_forward_width(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"]["tp"] = 8
        d["model"] = {"preset": "llama3-8b", "ffn_hidden": 14337}

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism.tp",
        says=("TP=8", "feed-forward width 14337"),
        # 14,337 allows 1, 3, 9, 27 and 59, but 32 heads and 8 KV heads only 1 of them
        hint=("use a TP that divides it: 1 (what its heads",),
    )


def test_pp_not_dividing_layers_then_uneven_stages_fix_it(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"]["pp"] = 3  # 6 GPUs, 32 layers

    data = _mutated(change, gpus_per_node=6, global_batch=12)
    f = _write(tmp_path, data)
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism.pp",
        says=("PP=3", "32 layers"),
        hint=("stage_layers",),
    )

    data = copy.deepcopy(data)
    data["parallelism"]["stage_layers"] = [10, 11, 11]
    g = _write(tmp_path, data, "uneven.yaml")
    res = run_cli("check", str(g), "--format", "json")
    assert res.returncode == 0, res.stderr
    assert resolve_dict(data).stage_layers() == [10, 11, 11]


def test_stage_layers_that_do_not_sum(tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["parallelism"].update(pp=2, stage_layers=[10, 11])

    f = _write(tmp_path, _mutated(change))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="parallelism.stage_layers",
        says=("summing to 32", "got 2 summing to 21"),
    )


def test_global_batch_not_divisible(tmp_path: Path) -> None:
    f = _write(tmp_path, inline_scenario("llama3-8b", global_batch=12))
    assert_user_error(
        run_cli("check", str(f)),
        file=f,
        path="training.global_batch",
        says=("12", "DP·micro_batch = 8·1 = 8"),
        hint=("multiple of 8",),
    )


def test_sequence_parallel_at_tp_1_is_off_with_a_note() -> None:
    """As Megatron-LM does (it turns the flag off with a warning at TP 1): a sweep over
    tp: [1, 2, 8] from a base that sets sequence_parallel lost its TP 1 point as invalid."""
    data = inline_scenario("llama3-8b")
    data["parallelism"].update({"tp": 1, "sequence_parallel": True})
    rs = resolve_dict(data)
    assert not rs.parallelism.sequence_parallel
    assert any("off at TP 1" in n for n in rs.plan_notes())
    data["parallelism"]["tp"] = 2
    assert resolve_dict(data).plan_notes() == []


@pytest.mark.parametrize(
    ("kw", "par", "path", "fragment"),
    [
        ({"nodes": 2}, {}, "cluster.network", "need a network"),
        (
            {"seq_len": 1001},
            {"tp": 2, "sequence_parallel": True},
            "parallelism.sequence_parallel",
            "which does not divide them",
        ),
        ({}, {"pp_schedule": {"kind": "interleaved"}}, "parallelism.pp_schedule", "PP > 1"),
        ({"seq_len": 1001}, {"cp": 8}, "parallelism.cp", "sequence length 1001"),
        ({"gpus_per_node": 128, "global_batch": 128}, {}, "cluster.gpus_per_node", "at most 64"),
        (
            {"global_batch": 6},
            {"tp": 2, "pp": 2, "pp_schedule": {"kind": "interleaved"}},
            "training.global_batch",
            "multiple of PP",
        ),
    ],
)
def test_other_layout_errors(
    kw: dict[str, Any], par: dict[str, Any], path: str, fragment: str
) -> None:
    data = inline_scenario("llama3-8b", **kw)
    if kw.get("nodes", 1) > 1:
        del data["cluster"]["network"]
    data["parallelism"].update(par)
    with pytest.raises(UserError) as exc:
        resolve_dict(data, file="layout.yaml")
    err = exc.value
    assert err.file == "layout.yaml"
    assert err.path == path
    assert fragment in err.message
    assert err.hint


# --------------------------------------------------------------------------------------------
# --set
# --------------------------------------------------------------------------------------------


def test_full_mode_past_its_size_is_refused_before_it_starts(tmp_path: Path) -> None:
    """`--full` runs every rank's every pass: past 16,384 GPUs, or past 2^20 rank-passes (GPUs
    x micro-batches x chunks x 2), it is one clear refusal, not a run of many minutes."""
    import yaml
    from conftest import REPO

    base = yaml.safe_load((REPO / "scenarios" / "net-ib-ndr-256xh100.yaml").read_text())
    many = copy.deepcopy(base)
    many["training"]["global_batch"] = 256 * 4096  # 4,096 micro-batches per rank
    f = tmp_path / "many-passes.yaml"
    f.write_text(yaml.safe_dump(many))
    res = run_cli("simulate", str(f), "--full")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "rank-passes" in res.stderr and "fewer micro-batches" in res.stderr
    small = copy.deepcopy(base)
    small["cluster"]["nodes"] = 2049  # 16,392 GPUs
    small["training"]["global_batch"] = 16392
    g = tmp_path / "many-gpus.yaml"
    g.write_text(yaml.safe_dump(small))
    res = run_cli("simulate", str(g), "--full")
    assert res.returncode == 2 and "16392 GPUs is above the limit of 16384" in res.stderr


@pytest.mark.parametrize(
    ("parallelism", "path", "says"),
    [
        (
            {"sharding": {"kind": "fsdp", "strategy": "hybrid_shard", "shard_group": 3}},
            "parallelism.sharding.shard_group",
            "does not divide the 16 DP×CP ranks",
        ),
        (
            {"sharding": {"kind": "fsdp", "strategy": "full_shard", "shard_group": 4}},
            "parallelism.sharding.shard_group",
            "applies to hybrid_shard",
        ),
        (
            {"pp": 2, "pp_schedule": {"kind": "interleaved", "virtual_stages": 1}},
            "parallelism.pp_schedule",
            "",
        ),
        (
            {
                "pp": 2,
                "pp_schedule": {"kind": "interleaved", "virtual_stages": 16},
                "stage_layers": [10, 22],
            },
            "parallelism.stage_layers",
            "at least 16 layers",
        ),
    ],
    ids=["shard-group-not-dividing", "shard-group-without-hybrid", "one-chunk", "empty-chunks"],
)
def test_sharding_and_chunk_checks(parallelism: dict[str, Any], path: str, says: str) -> None:
    data = inline_scenario("llama3-8b", nodes=2, global_batch=32, **parallelism)
    with pytest.raises(UserError) as exc:
        resolve_dict(data)
    assert (exc.value.path or "").startswith(path) and says in exc.value.message


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (("cluster.gpu=mi300x",), "joins NVIDIA GPUs only"),
        (("cluster.fabric=infinity-fabric-mi300x",), "joins AMD GPUs only"),
        # a PCIe card has no NVLink to a switch
        (("cluster.gpu=l40s", "cluster.pricing=null"), "has no NVLink to a switch"),
    ],
)
def test_a_fabric_of_another_vendor_is_refused(sets: tuple[str, ...], says: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    res = run_cli("check", "llama3-8b-8xh100", *args)
    assert res.returncode == 2 and "cluster.fabric" in res.stderr and says in res.stderr


def test_json_output_never_holds_nan_or_infinity() -> None:
    """An owned cluster kept 1% busy: the figures are large, and the JSON stays valid (a
    non-finite figure would be written as null, never as NaN or Infinity)."""
    import json

    res = run_cli(
        "simulate",
        "llama3-8b-8xh100",
        "--set",
        "cluster.pricing.profile=own-dgx-h100",
        "--set",
        "cluster.pricing.utilisation=0.01",
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    assert "NaN" not in res.stdout and "Infinity" not in res.stdout
    json.loads(res.stdout)
    low = run_cli("check", "llama3-8b-8xh100", "--set", "cluster.pricing.utilisation=1e-300")
    assert low.returncode == 2 and "cluster.pricing.utilisation" in low.stderr


def test_a_token_budget_below_one_step_is_refused() -> None:
    res = run_cli("check", "llama3-8b-8xh100", "--set", "run.tokens=1")
    assert res.returncode == 2 and "run.tokens" in res.stderr and "one step" in res.stderr


def test_a_sequence_past_a_learned_position_table_is_noted() -> None:
    """Accepted (a what-if may mean an extended table) but said: GPT-3 learns 2048 positions."""
    import json

    res = run_cli(
        "simulate",
        "gpt3-175b-megatron-1024xa100",
        "--set",
        "training.seq_len=4096",
        "--no-scaling",
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("learns 2048 positions" in n for n in notes)
    checked = run_cli("check", "gpt3-175b-megatron-1024xa100", "--set", "training.seq_len=4096")
    assert checked.returncode == 0 and "learns 2048 positions" in checked.stderr


def test_a_fabric_faster_than_the_gpus_own_nvlink_is_noted() -> None:
    """An A100 on fourth-generation NVLink is simulated at its own 300 GB/s (its ports cap
    what the switch gives it) with a note that says so."""
    res = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "cluster.gpu=a100-sxm4-80gb",
        "--set",
        "cluster.pricing=null",
    )
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stderr.split())
    assert "more than 'a100-sxm4-80gb' has (300 GB/s" in said and "the GPU's figure" in said


def test_a_gpu_with_fewer_nvlink_ports_moves_less_on_the_same_switch() -> None:
    """An H800 written as an H100 with 200 GB/s of NVLink (8 links, not 18) on the H100's
    NVSwitch: its TP collectives take 450/200 as long as the H100's (they ran at the switch's
    450 GB/s, a held-out run 26% fast), and NVLink SHARP scales with the port too."""
    from simulator.config.loading import load_scenario
    from simulator.network.topology import Topology

    path = Path(__file__).resolve().parents[1] / "scenarios" / "llama3-8b-8xh100.yaml"
    fast = Topology(load_scenario(path)).fabric_tier()
    h800 = load_scenario(path, ["cluster.gpu={profile: h100-sxm-80gb, nvlink_gbps: 200}"])
    slow = Topology(h800).fabric_tier()
    assert slow.bandwidth == pytest.approx(fast.bandwidth * 200 / 450)
    assert slow.switch_reduce == pytest.approx(fast.switch_reduce)


def test_a_fabric_slower_than_the_gpus_own_nvlink_is_noted() -> None:
    """A B200 put on the file's fourth-generation NVLink (the GPU changed with --set, the
    fabric did not) is simulated at the fabric's 450 GB/s with a note naming the GPU's own 900:
    a walkthrough's B200 step was 20% slow with no word."""
    res = run_cli(
        "check", "llama3-8b-8xh100", "--set", "cluster.gpu=b200", "--set", "cluster.pricing=null"
    )
    assert res.returncode == 0, res.stderr
    assert "less than 'b200' has (900 GB/s" in " ".join(res.stderr.split())
    fixed = run_cli(
        "check",
        "llama3-8b-8xh100",
        "--set",
        "cluster.gpu=b200",
        "--set",
        "cluster.fabric=nvlink5-nvswitch",
        "--set",
        "cluster.pricing=null",
    )
    assert fixed.returncode == 0 and "less than" not in fixed.stderr


def test_a_scenario_without_storage_says_which_it_gets(tmp_path: Any) -> None:
    import yaml

    p = tmp_path / "nost.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "nost",
                "cluster": {"gpu": "h100-sxm-80gb", "nodes": 1, "fabric": "nvlink4-nvswitch"},
                "model": "llama3-8b",
                "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 1},
            }
        )
    )
    res = run_cli("check", str(p))
    assert res.returncode in (0, 1), res.stderr  # valid (1: it does not fit)
    assert "no cluster.storage given" in res.stderr and "'lustre'" in res.stderr


def test_one_switch_for_more_ports_than_it_has_is_noted() -> None:
    """A single switch joining 8,192 NIC ports (a 64-port switch profile) is simulated as the
    non-blocking switch asked for, with a note that it needs a fat tree."""
    res = run_cli(
        "check", "llama3-70b-64xh100", "--set", "cluster.network.topology={kind: single_switch}",
        "--set", "cluster.nodes=1024", "--set", "training.global_batch=1024",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "one switch joins the 8192 NIC ports" in " ".join(res.stderr.split())
