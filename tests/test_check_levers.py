"""`check`'s changes that make a plan fit, applied as a user applies them: added to the same
command line, after the user's own --set, they still make it fit; and where only a pair of
changes fits, tensor and context parallelism are among the candidates."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import CATALOG_SCENARIO, REPO, run_cli, write_yaml


def _check(*args: str) -> dict:  # type: ignore[type-arg]
    res = run_cli("check", *args, "--format", "json")
    d = json.loads(res.stdout)
    assert res.returncode == (0 if d["fits"] else 1), res.stderr  # 1: does not fit
    return d  # type: ignore[no-any-return]


def test_a_lever_added_after_the_users_own_set_takes_effect() -> None:
    """The user set `parallelism.sharding.stage=0`; a lever written as the whole sharding
    mapping would be outranked by that more specific --set and change nothing."""
    base = [
        "llama3-70b-64xh100",
        "--set",
        "cluster.nodes=4",
        "--set",
        "parallelism.pp=2",
        "--set",
        "parallelism.sharding.stage=0",
    ]
    d = _check(*base)
    assert d["fits"] is False and d["levers"]
    for lv in d["levers"]:
        args = list(base)
        for s in lv["set"]:
            args += ["--set", s]
        again = _check(*args)
        assert again["fits"] is True, lv
        assert again["memory_gb_per_gpu"]["total"] == lv["peak_gb"]


def test_an_fsdp_plan_set_field_by_field_is_offered_fsdps_own_lever() -> None:
    """The user set FSDP's strategy field by field; the ZeRO-3 mapping it was offered was
    refused beside that more specific --set (a ZeRO mapping has no strategy) or lost to it.
    The lever is FSDP's full_shard, as the field, and it fits applied after the user's own."""
    base = [
        "llama3-70b-1xh100-node",
        "--set",
        "parallelism.sharding.kind=fsdp",
        "--set",
        "parallelism.sharding.strategy=shard_grad_op",
    ]
    d = _check(*base)
    assert d["fits"] is False
    sets = [s for lv in d["levers"] for s in lv["set"]]
    assert "parallelism.sharding.strategy=full_shard" in sets
    assert not any(s.startswith("parallelism.sharding={") for s in sets)
    for lv in d["levers"]:
        args = list(base)
        for s in lv["set"]:
            args += ["--set", s]
        assert _check(*args)["fits"] is True, lv


def test_the_table_shows_the_stage_that_needs_the_most() -> None:
    """With more than four stages the table shows the first two and the last two, and now
    the peak stage wherever it sits (a 42-layer stage 3 was said to need 184 GB while the
    table's columns topped out at 54)."""
    res = run_cli(
        "check", "gpt3-175b-megatron-1024xa100", "--set", "parallelism.pp_schedule=1f1b",
        "--set", "parallelism.stage_layers=[6,6,6,42,6,6,12,12]",
    )  # fmt: skip
    assert res.returncode == 1
    header = next(line for line in res.stdout.splitlines() if "┃ stage 0" in line)
    assert "stage 3" in header and "stage 2" not in header


def test_a_long_sequence_is_offered_tensor_or_context_parallelism(tmp_path: Path) -> None:
    """Llama 3 8B at 128k tokens on one node: no single change fits, but recomputation with
    TP 8 or more CP does; before, only TP 2 was tried and `check` said to buy more GPUs."""
    data = copy.deepcopy(CATALOG_SCENARIO)
    data["training"].update(seq_len=131072, global_batch=8)
    data["parallelism"]["tp"] = 1
    f = write_yaml(tmp_path / "long.yaml", data)
    d = _check(str(f))
    assert d["fits"] is False
    sets = [" ".join(lv["set"]) for lv in d["levers"]]
    assert any("parallelism.tp=8" in s for s in sets), sets
    assert any("parallelism.cp=" in s for s in sets), sets
    for lv in d["levers"]:
        args = [str(f)]
        for s in lv["set"]:
            args += ["--set", s]
        assert _check(*args)["fits"] is True, lv


def test_an_explicit_dp_lists_the_same_levers() -> None:
    """A plan that gives DP gets `parallelism.dp=auto` beside each degree lever; that is not a
    change of its own, so the levers listed and their order are those of the same plan with
    DP left to auto."""
    base = [
        "llama3-70b-64xh100",
        "--set",
        "parallelism.tp=2",
        "--set",
        "parallelism.pp=1",
        "--set",
        "parallelism.sharding.stage=3",
        "--set",
        "training.micro_batch=2",
        "--set",
        "parallelism.recompute=none",
        "--set",
        "parallelism.pp_schedule={kind: 1f1b}",
    ]
    auto = _check(*base)["levers"]
    explicit = _check(*base, "--set", "parallelism.dp=32")["levers"]
    assert auto
    strip = [[s for s in lv["set"] if s != "parallelism.dp=auto"] for lv in explicit]
    assert strip == [lv["set"] for lv in auto]


def test_a_stage_count_that_is_not_a_power_of_two_is_offered() -> None:
    """A 76B model (60 layers) without ZeRO on 24 GPUs: three pipeline stages fit. The lever
    search tried only the first doubling of PP that divided (PP 2, which does not fit) and
    offered ZeRO alone (review finding); it now tries the next few stage counts that split
    both the layers and the GPUs."""
    base = [
        "llama3-70b-64xh100",
        *("--set", "model=megatron-76.1b"),
        *("--set", "training.seq_len=2048"),
        *("--set", "cluster.nodes=3"),
        *("--set", "training.global_batch=96"),
        *("--set", "parallelism.pp=1"),
        *("--set", "parallelism.pp_schedule.kind=1f1b"),
        *("--set", "parallelism.recompute=none"),
        *("--set", "parallelism.sharding.stage=0"),
    ]
    d = _check(*base)
    assert d["fits"] is False
    sets = [" ".join(lv["set"]) for lv in d["levers"]]
    assert "parallelism.pp=3" in sets, sets
    assert _check(*base, "--set", "parallelism.pp=3")["fits"] is True


def test_pp_levers_split_the_layers_per_chunk_and_skip_listed_stages() -> None:
    """Under the interleaved schedule each of a stage's v chunks holds layers, so a PP lever
    must split the layers into PP·v chunks (the 70B file: 80 layers, v 5: PP 8 and 16, not 5
    or 10); a plan that lists its stages' layers gets none (a new count needs a new list)."""
    from simulator.check import _candidate_changes
    from simulator.config.loading import load_scenario

    rs = load_scenario(REPO / "scenarios" / "llama3-70b-64xh100.yaml")
    v = rs.parallelism.virtual_stages
    pps = [int(c.split("=")[1]) for c in _candidate_changes(rs) if c.startswith("parallelism.pp=")]
    assert pps and all(rs.model.layers % (p * v) == 0 for p in pps), pps
    listed = load_scenario(
        REPO / "scenarios" / "llama3-70b-64xh100.yaml",
        ["parallelism.pp_schedule={kind: 1f1b}", "parallelism.stage_layers=[19, 21, 21, 19]"],
    )
    assert not [c for c in _candidate_changes(listed) if c.startswith("parallelism.pp=")]


def test_a_plan_near_the_gpus_memory_is_called_tight() -> None:
    """A plan that fits above 85% of the GPU's memory is tight (PyTorch's caching allocator
    reserves more than the live tensors the model counts): said in the table and the JSON;
    one with room is not."""
    from simulator.workload.memory import TIGHT_SHARE

    near = REPO / "scenarios/validation/llmfoundry-a100-80gb/mpt-30b-a100-80gb-s8192-g8-mb1.yaml"
    d = _check(str(near))
    mem = d["memory_gb_per_gpu"]
    assert d["fits"] and mem["total"] > TIGHT_SHARE * mem["capacity"] and d["tight"]
    res = run_cli("check", str(near))
    assert res.returncode == 0 and "tight" in res.stdout
    roomy = _check(str(REPO / "scenarios/llama3-8b-8xh100.yaml"))
    assert roomy["fits"] and not roomy["tight"]
    # simulate says it among its notes
    sim = json.loads(run_cli("simulate", str(near), "--no-scaling", "--format", "json").stdout)
    assert any(n.startswith("memory is tight") for n in sim["notes"])
