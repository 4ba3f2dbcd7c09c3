"""How a software stack splits the DP gradient reduction into collectives: Megatron-Core's
bucket of max(40M, 1M x DP x CP) parameters (megatron/core/distributed/
distributed_data_parallel.py), bucketing only the first stage's first model chunk and only while
the reduction overlaps backward, and how a scenario's or an override's bucket size replaces a
stack's rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import inline_scenario, run_cli, write_yaml

from simulator.config.loading import resolve_dict
from simulator.simulate import simulate

ZERO1 = {"kind": "zero", "stage": 1}


def _data(software: str, sharding: dict, pp: int = 2) -> dict:
    data = inline_scenario(
        "llama3-8b", nodes=2, gpus_per_node=8, global_batch=64, tp=2, pp=pp, sharding=sharding
    )
    data["software"] = software
    return data


def test_megatron_core_buckets_grow_with_the_data_parallel_group(tmp_path: Path) -> None:
    """Megatron-Core sizes its buckets as max(40M, 1M × DP) parameters (so that each rank's
    chunk of an NCCL ring stays bandwidth-bound), for the fp32 gradient reduce-scatter and the
    bf16 weight all-gather alike; a scenario's dp_bucket_mb still overrides the rule."""
    from simulator.workload.comm import dp_bucket_bytes

    def rs(nodes: int, **par: float) -> object:
        data = inline_scenario(
            "llama3-8b", nodes=nodes, gpus_per_node=8, global_batch=8 * nodes, tp=8, sharding=ZERO1
        )
        data["software"] = "megatron-core"
        data["parallelism"].update(par)
        return resolve_dict(data)

    small, large = rs(4), rs(96)  # DP 4 and DP 96
    assert dp_bucket_bytes(small, 4.0) == pytest.approx(40e6 * 4.0)
    assert dp_bucket_bytes(small, 2.0) == pytest.approx(40e6 * 2.0)
    assert dp_bucket_bytes(large, 4.0) == pytest.approx(96e6 * 4.0)
    assert dp_bucket_bytes(rs(96, dp_bucket_mb=25.0), 4.0) == pytest.approx(25e6)
    # Fewer, larger collectives at DP 96: never slower than per-layer 25 MB buckets.
    t_rule = simulate(large, scaling=False).metrics.step_time_s  # type: ignore[arg-type]
    t_small = simulate(rs(96, dp_bucket_mb=25.0), scaling=False).metrics.step_time_s  # type: ignore[arg-type]
    assert t_rule <= t_small


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"dp_bucket_mb": {"value": 25, "source": "a test"}}, "not both"),
        ({"dp_bucket_params_per_dp_rank": None}, "set together"),
    ],
)
def test_a_bucket_rule_is_one_rule(tmp_path: Path, extra: dict, says: str) -> None:
    import yaml
    from conftest import REPO

    prof = yaml.safe_load(
        (REPO / "hardware_profiles" / "software" / "megatron-core.yaml").read_text()
    )
    prof.update(extra)
    prof = {k: v for k, v in prof.items() if v is not None}
    data = _data("megatron-core", ZERO1)
    data["software"] = prof
    res = run_cli("simulate", str(write_yaml(tmp_path / "s.yaml", data)))
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_megatron_core_buckets_only_the_first_chunk_and_only_when_overlapping() -> None:
    """Megatron-Core reduces in buckets only on the first pipeline stage's first model chunk
    (every other chunk in one collective when its last backward ends), and in one bucket
    whenever the reduction does not overlap backward."""
    import math

    from simulator.workload.comm import dp_bucket_bytes, grad_bucket_bytes

    data = inline_scenario(
        "llama3-8b", nodes=8, gpus_per_node=8, global_batch=64, tp=8, pp=2, sharding=ZERO1
    )
    data["software"] = "megatron-core"
    data["parallelism"]["pp_schedule"] = {"kind": "interleaved", "virtual_stages": 2}
    rs = resolve_dict(data)
    b = dp_bucket_bytes(rs, 4.0)
    assert grad_bucket_bytes(rs, 4.0, 0, 0) == b
    assert math.isinf(grad_bucket_bytes(rs, 4.0, 1, 0))
    assert math.isinf(grad_bucket_bytes(rs, 4.0, 0, 1))
    off = resolve_dict(data, ["parallelism.overlap={dp_grad: false}"])
    assert math.isinf(grad_bucket_bytes(off, 4.0, 0, 0))
    # a scenario's bucket size is kept everywhere
    mb = resolve_dict(data, ["parallelism.dp_bucket_mb=100"])
    assert grad_bucket_bytes(mb, 4.0, 1, 1) == pytest.approx(100e6)
    for case in (rs, off, mb):
        res = simulate(case, scaling=False).metrics
        for acc in res.per_class.values():
            assert sum(acc.values()) == pytest.approx(res.step_time_s, rel=1e-9)


def test_a_bucket_size_override_replaces_the_stacks_rule() -> None:
    """--set software.dp_bucket_mb on megatron-core (which sizes buckets in parameters)."""
    from conftest import REPO

    from simulator.config.loading import load_scenario
    from simulator.workload.comm import dp_bucket_bytes

    path = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    rs = load_scenario(path, ["software.dp_bucket_mb=50"])
    assert rs.software.dp_bucket_params is None and dp_bucket_bytes(rs, 4.0) == 50e6
    # and the other way round: megatron-lm-2021 sizes its one bucket in MB
    gpt3 = REPO / "scenarios" / "gpt3-175b-megatron-1024xa100.yaml"
    back = load_scenario(
        gpt3,
        [
            "software.dp_bucket_params={value: 1e6, source: a test}",
            "software.dp_bucket_params_per_dp_rank={value: 0, source: a test}",
        ],
    )
    assert back.software.dp_bucket_mb is None


def test_zero1_gathers_the_embedding_before_the_first_forward_and_the_head_before_its_own() -> None:
    # Megatron's distributed optimizer shards every parameter, the embedding's and the output
    # layer's too: with the gather overlapped, the embedding's bucket goes first and the first
    # forward waits for it; the output layer's goes last and the head's forward waits for it.
    from test_engine import assert_accounting, scenario, sim

    model = {"name": "wide-vocab", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 256000}
    model["tied_embeddings"] = False
    data = scenario(
        4,
        8,
        model=model,
        tp=8,
        sharding={"kind": "zero", "stage": 1},
        overlap={"dp_grad": True, "param_gather": True},
    )
    res = sim(data, trace=True)
    assert_accounting(res)
    assert res.engine.trace is not None
    spans = [e for e in res.engine.trace if e.get("ph") == "X"]
    gathers = sorted((e for e in spans if e["name"] == "param all_gather"), key=lambda e: e["ts"])
    first, last = gathers[0], gathers[-1]
    # 256,000 x 1,024 / 8 parameters each: far more than any bucket of the 4 small layers
    layers = max(e["dur"] for e in gathers[1:-1])
    assert first["dur"] > 2 * layers and last["dur"] > 2 * layers
    emb = min((e for e in spans if e["name"].startswith("embedding")), key=lambda e: e["ts"])
    head = min((e for e in spans if "logits" in e["name"]), key=lambda e: e["ts"])
    assert emb["ts"] >= first["ts"] + first["dur"] - 1e-6
    assert head["ts"] >= last["ts"] + last["dur"] - 1e-6
    # and both waits are exposed DP communication
    assert res.metrics.breakdown_s["comm_dp"] * 1e6 >= first["dur"] * (1 - 1e-9)


@pytest.mark.parametrize("software", ["megatron-lm-2021", "megatron-core", "pytorch-fsdp"])
def test_fsdp_reduces_one_wrapped_layer_per_collective(software: str) -> None:
    """PyTorch FSDP's unit is the module it wraps, each transformer block: it all-gathers and
    reduce-scatters one layer's parameters per collective, whatever bucket size the stack gives
    its DDP (Megatron-LM 2021's one bucket for the whole model included); a scenario's
    dp_bucket_mb still sets it."""
    from simulator.workload.comm import dp_bucket_bytes, grad_bucket_bytes
    from simulator.workload.memory import layer_params_per_rank

    for strategy in ("full_shard", "shard_grad_op"):
        rs = resolve_dict(_data(software, {"kind": "fsdp", "strategy": strategy}, pp=1))
        layer = layer_params_per_rank(rs)
        assert dp_bucket_bytes(rs, 2.0) == pytest.approx(layer * 2.0)
        assert grad_bucket_bytes(rs, 4.0) == pytest.approx(layer * 4.0)
    data = _data(software, {"kind": "fsdp", "strategy": "full_shard"}, pp=1)
    data["parallelism"]["dp_bucket_mb"] = 3000.0
    assert dp_bucket_bytes(resolve_dict(data), 2.0) == pytest.approx(3000e6)


@pytest.mark.parametrize(
    "sharding, knob",
    [
        ({"kind": "fsdp", "strategy": "shard_grad_op"}, "param_gather"),
        ({"kind": "zero", "stage": 1}, "param_gather"),
        ({"kind": "zero", "stage": 2}, "dp_grad"),
        ({"kind": "zero", "stage": 3}, "dp_grad"),
    ],
)
def test_turning_overlap_off_never_makes_a_step_faster(sharding: dict, knob: str) -> None:
    """Without overlap the same collectives run exposed: the parameter gather still in the
    overlapped path's buckets (not one whole-model gather that pays the latency once), and
    ZeRO-2/3's per-micro-batch reduce-scatters as each backward ends (not all deferred to the
    end of the step, off the pipeline's critical path)."""
    data = inline_scenario(
        "llama2-7b", nodes=4, gpus_per_node=8, global_batch=64, tp=4, pp=2, sharding=sharding
    )
    data["cluster"]["network"] = {"profile": "roce-100", "nics_per_node": 2}
    data["training"]["micro_batch"] = 2
    on = simulate(resolve_dict(data), scaling=False).metrics.step_time_s
    data["parallelism"]["overlap"] = {knob: False}
    off = simulate(resolve_dict(data), scaling=False)
    assert off.metrics.step_time_s >= on * 0.999
    assert off.metrics.breakdown_s["comm_dp"] > 0


def test_buckets_hold_whole_tensors() -> None:
    """DDP, Megatron-Core and DeepSpeed close a bucket at the first tensor that fills it and
    never split one: a tensor larger than the bucket goes alone, so the collectives never
    outnumber the tensors."""
    from simulator.workload.buckets import chunk_bucket_count, fill, layer_tensors
    from simulator.workload.memory import layer_params_per_rank

    assert fill([3.0, 1.0, 1.0, 5.0, 1.0], 2.0) == [3.0, 2.0, 5.0, 1.0]
    assert fill([1.0, 1.0], float("inf")) == [2.0]
    rs = resolve_dict(inline_scenario("llama3-8b", tp=2))
    tensors = layer_tensors(rs)
    assert len(tensors) == 4
    assert sum(tensors) == pytest.approx(layer_params_per_rank(rs))
    layer = 2.0 * sum(tensors)  # bytes of 16-bit gradients
    layers = rs.model.layers

    def count(cap: float) -> int:
        return chunk_bucket_count(rs, 0, 0, 2.0, cap)

    assert count(1e3) == layers * 4 + 2  # 1 kB: every tensor alone, embedding and head too
    assert count(float("inf")) == 1
    assert count(layer) == layers + 2  # a layer a bucket; the embedding and head alone
    counts = [count(layer * k) for k in (0.3, 0.5, 1.0, 1.5, 2.5, 4.0, 16.0)]
    assert counts == sorted(counts, reverse=True)  # a larger bucket never makes more


LAYOUTS = [
    ("megatron-core", {"kind": "zero", "stage": 1}, 2, 1, None),
    ("megatron-core", {"kind": "zero", "stage": 1}, 2, 2, None),
    ("megatron-core", {"kind": "zero", "stage": 1}, 2, 2, 15.0),
    ("pytorch-eager", {"kind": "zero", "stage": 0}, 1, 1, None),
    ("pytorch-eager", {"kind": "zero", "stage": 0}, 2, 1, 10.0),
    ("pytorch-eager", {"kind": "zero", "stage": 0}, 2, 1, 10000.0),
    ("deepspeed", {"kind": "zero", "stage": 2}, 1, 1, 40.0),
    ("deepspeed", {"kind": "zero", "stage": 2}, 1, 1, 10000.0),
    ("deepspeed", {"kind": "zero", "stage": 1}, 1, 1, 0.001),
]


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize(("software", "sharding", "pp", "v", "bucket_mb"), LAYOUTS)
def test_the_engine_launches_the_buckets_the_step_summary_counts(
    software: str, sharding: dict, pp: int, v: int, bucket_mb: float | None, overlap: bool
) -> None:
    """Per stage, the DP reductions and ZeRO-1/2 parameter gathers the event engine launches
    are the buckets `dp_buckets` and `gather_buckets` count (and `check` reports), with
    overlap and without."""
    from simulator.engine.sim import run_engine
    from simulator.workload.comm import step_comm

    data = inline_scenario(
        {"name": "m", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000},
        nodes=1,
        gpus_per_node=8,
        global_batch=8 * pp,
        pp=pp,
        sharding=sharding,
    )
    data["software"] = software
    par = data["parallelism"]
    if v > 1:
        par["pp_schedule"] = {"kind": "interleaved", "virtual_stages": v}
    if bucket_mb is not None:
        par["dp_bucket_mb"] = bucket_mb
    par["overlap"] = {"dp_grad": overlap, "param_gather": overlap}
    rs = resolve_dict(data)
    trace = run_engine(rs, trace=True).trace or []
    for stage in range(rs.pp):
        names = [e["name"] for e in trace if e.get("ph") == "X" and e.get("pid") == stage + 1]
        reduces = sum(n.startswith(("all_reduce ", "reduce_scatter ")) for n in names)
        gathers = sum(n == "param all_gather" for n in names)
        want = {(it.op, it.phase): it.calls for it in step_comm(rs, stage) if it.group == "dp"}
        coll = "all_reduce" if rs.zero_stage == 0 or rs.grads_all_reduced else "reduce_scatter"
        assert reduces == want[(coll, "backward")], (stage, names)
        assert gathers == want.get(("all_gather", "step"), 0), (stage, names)


def test_a_bucket_below_a_layer_sends_a_collective_per_filled_bucket() -> None:
    """Overlapped DDP with its 25 MB buckets on Llama-3 8B, whose every weight matrix is
    larger (the smallest, QKV, is 100 MB of fp32 gradients): one all-reduce per tensor, four a
    layer plus the embedding's and the output layer's, as DDP's reducer makes them; a bucket
    of several layers sends far fewer; symmetric and full mode agree."""
    from simulator.engine.sim import run_engine
    from simulator.workload.comm import dp_buckets

    def all_reduces(mb: float | None) -> tuple[int, object]:
        data = inline_scenario("llama3-8b", nodes=2, gpus_per_node=8, global_batch=16)
        data["software"] = "pytorch-eager"
        if mb is not None:
            data["parallelism"]["dp_bucket_mb"] = mb
        rs = resolve_dict(data)
        trace = run_engine(rs, trace=True).trace or []
        return sum(
            1 for e in trace if e.get("ph") == "X" and e["name"].startswith("all_reduce")
        ), rs

    n, rs = all_reduces(None)
    layers = rs.model.layers  # type: ignore[attr-defined]
    assert n == layers * 4 + 2
    assert dp_buckets(rs)[1] == layers * 4 + 2  # type: ignore[arg-type]
    few, _ = all_reduces(2000.0)
    assert few < layers
    sym = simulate(rs, scaling=False).metrics.step_time_s  # type: ignore[arg-type]
    full = simulate(rs, full=True, scaling=False).metrics.step_time_s  # type: ignore[arg-type]
    assert sym == pytest.approx(full, rel=1e-9)


@pytest.mark.parametrize("pp", [1, 2])
def test_fsdp_gathers_its_root_unit_once_a_micro_batch(pp: int) -> None:
    """ZeRO-3/FSDP shard the embedding and the output layer too: the root unit holding them is
    gathered once a micro-batch before the layers' forward and kept through the backward (the
    layers twice), as the engine launches and the step summary counts."""
    from simulator.engine.sim import run_engine
    from simulator.workload.comm import step_comm

    data = inline_scenario(
        {"name": "m", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000},
        gpus_per_node=8,
        global_batch=4 * 8 // pp,
        pp=pp,
        sharding={"kind": "fsdp", "strategy": "full_shard"},
    )
    data["software"] = "pytorch-fsdp"
    rs = resolve_dict(data)
    trace = run_engine(rs, trace=True).trace or []
    for stage in range(pp):
        names = [e["name"] for e in trace if e.get("ph") == "X" and e.get("pid") == stage + 1]
        comm = step_comm(rs, stage)
        root = [it for it in comm if it.op == "all_gather" and it.phase == "forward"]
        assert sum(n == "root all_gather" for n in names) == root[0].calls == rs.micro_batches
        layer_gathers = sum(n == "layer all_gather" for n in names)
        assert layer_gathers == 2 * rs.micro_batches * rs.stage_layers()[stage]
