"""Memory per GPU by pipeline schedule and stage (micro-batches in flight, stage parameters,
tied embeddings, uneven stages) and its invariants: more TP, a higher ZeRO stage or more
recomputation never need more memory; the total adds up; fits follows capacity."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import REPO, resolve_inline
from test_memory import _dp64

from simulator.errors import UserError
from simulator.workload.activations import activation_bytes_per_layer
from simulator.workload.memory import (
    inflight_microbatches,
    memory_report,
    stage_params,
)
from simulator.workload.model import param_breakdown, param_count
from simulator.workload.presets import PRESETS

GB = 1e9

# --------------------------------------------------------------------------------------------
# Pipeline schedules: micro-batches in flight
# --------------------------------------------------------------------------------------------


def _pp(schedule: dict[str, Any], pp: int = 4, micro_batches: int = 16, **kw: Any):
    # One node, TP 2, PP `pp`: DP = 8 / (2·pp).
    dp = 8 // (2 * pp)
    return resolve_inline(
        "llama3-8b", tp=2, pp=pp, pp_schedule=schedule, global_batch=dp * micro_batches, **kw
    )


def test_1f1b_first_stage_holds_p_microbatches() -> None:
    rs = _pp({"kind": "1f1b"}, pp=4, micro_batches=16)
    assert rs.micro_batches == 16
    rep = memory_report(rs)
    assert [s.inflight_microbatches for s in rep.stages] == [4, 3, 2, 1]
    assert inflight_microbatches(rs, 0) == rs.pp


def test_1f1b_with_fewer_microbatches_than_stages() -> None:
    rs = _pp({"kind": "1f1b"}, pp=4, micro_batches=2)
    assert [inflight_microbatches(rs, i) for i in range(4)] == [2, 2, 2, 1]


def test_gpipe_holds_every_microbatch() -> None:
    rs = _pp({"kind": "gpipe"}, pp=4, micro_batches=16)
    assert [s.inflight_microbatches for s in memory_report(rs).stages] == [16] * 4
    one = _pp({"kind": "1f1b"}, pp=4, micro_batches=16)
    assert memory_report(rs).peak.activations_gb > memory_report(one).peak.activations_gb


def test_interleaved_holds_a_little_more_than_1f1b() -> None:
    """Korthikanti et al. §4.2.3: the interleaved schedule's first stage holds
    p·(1 + (p-1)/(p·v)) micro-batches."""
    p, v = 4, 2
    rs = _pp({"kind": "interleaved", "virtual_stages": v}, pp=p, micro_batches=16)
    assert inflight_microbatches(rs, 0) == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_no_pipeline_holds_one_microbatch() -> None:
    rs = resolve_inline("llama3-8b", global_batch=64, micro_batch=1)
    assert rs.micro_batches == 8
    assert memory_report(rs).peak.inflight_microbatches == 1


def test_pipeline_stage_params() -> None:
    rs = _pp({"kind": "1f1b"}, pp=4, micro_batches=8)
    m = rs.model
    pb = param_breakdown(m, rs.training.seq_len)
    per_stage_layers = (pb.attention_per_layer + pb.mlp_per_layer) / 2 + pb.norms_per_layer
    layers = m.layers // 4
    assert stage_params(rs, 1) == pytest.approx(layers * per_stage_layers)
    assert stage_params(rs, 0) == pytest.approx(layers * per_stage_layers + pb.embedding / 2)
    assert stage_params(rs, 3) == pytest.approx(
        layers * per_stage_layers + pb.lm_head / 2 + pb.final_norm
    )
    # Summed over stages and TP ranks (norms replicated), every parameter is held once.
    total = sum(stage_params(rs, i) for i in range(4)) * 2
    replicated_norms = m.layers * pb.norms_per_layer + pb.final_norm
    assert total - replicated_norms == pytest.approx(param_count(m))


def test_tied_embeddings_on_both_ends_of_a_pipeline() -> None:
    rs = resolve_inline("megatron-1.7b", pp=4, tp=1, global_batch=16)
    pb = param_breakdown(rs.model, rs.training.seq_len)
    assert pb.lm_head == 0
    mid = stage_params(rs, 1)
    assert stage_params(rs, 3) - mid == pytest.approx(pb.embedding + pb.final_norm)
    assert stage_params(rs, 0) - mid == pytest.approx(pb.embedding + pb.positions)


def test_uneven_stage_layers() -> None:
    rs = resolve_inline("llama3-8b", tp=2, pp=4, global_batch=8, stage_layers=[7, 9, 9, 7])
    assert rs.stage_layers() == [7, 9, 9, 7]
    assert stage_params(rs, 1) == stage_params(rs, 2)  # same layers, no embedding or head
    pb = param_breakdown(rs.model, rs.training.seq_len)
    per_layer = (pb.attention_per_layer + pb.mlp_per_layer) / 2 + pb.norms_per_layer
    assert stage_params(rs, 0) == pytest.approx(7 * per_layer + pb.embedding / 2)
    rep = memory_report(rs)
    assert rep.stages[1].activations_gb > rep.stages[2].activations_gb  # more in flight


# --------------------------------------------------------------------------------------------
# Monotonicity of the per-GPU peak
# --------------------------------------------------------------------------------------------

MODELS = ["llama3-8b", "llama3-70b", "megatron-18.4b", "gpt3-175b"]


def _peak(model: str, **kw: Any) -> float:
    return memory_report(resolve_inline(model, **kw)).peak.total_gb


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("zero", [0, 1, 3])
@pytest.mark.parametrize("flash", [True, False])
def test_more_tp_never_increases_memory(model: str, sp: bool, zero: int, flash: bool) -> None:
    peaks = [
        _peak(
            model,
            tp=t,
            sequence_parallel=sp and t > 1,
            flash_attention=flash,
            sharding={"kind": "zero", "stage": zero},
            global_batch=64,
            seq_len=4096,
        )
        for t in (1, 2, 4, 8)
    ]
    for a, b in zip(peaks, peaks[1:], strict=False):
        assert b <= a + 1e-9, peaks
    assert peaks[-1] < peaks[0]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("tp", "pp", "nodes"), [(1, 1, 1), (2, 1, 1), (8, 1, 4), (4, 2, 4)])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_higher_zero_stage_never_increases_memory(
    model: str, tp: int, pp: int, nodes: int, recompute: str
) -> None:
    if PRESETS[model].layers % pp:
        pytest.skip("layers not divisible")
    peaks = [
        _peak(
            model,
            tp=tp,
            pp=pp,
            nodes=nodes,
            recompute=recompute,
            global_batch=256,
            sharding={"kind": "zero", "stage": z},
        )
        for z in (0, 1, 2, 3)
    ]
    for a, b in zip(peaks, peaks[1:], strict=False):
        assert b <= a + 1e-9, peaks
    assert peaks[-1] < peaks[0]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize(("tp", "pp", "sp"), [(1, 1, False), (4, 2, False), (8, 1, True)])
def test_recompute_full_le_selective_le_none(
    model: str, flash: bool, tp: int, pp: int, sp: bool
) -> None:
    kw = dict(
        tp=tp,
        pp=pp,
        sequence_parallel=sp,
        flash_attention=flash,
        global_batch=64,
        seq_len=4096,
        micro_batch=2,
    )
    none = _peak(model, recompute="none", **kw)
    sel = _peak(model, recompute="selective", **kw)
    full = _peak(model, recompute="full", **kw)
    assert full <= sel <= none
    assert full < none
    if not flash:
        assert sel < none  # the s×s scores are what selective recomputation drops


def test_memory_total_adds_up() -> None:
    rs = resolve_inline("llama3-8b", tp=2, sharding={"kind": "zero", "stage": 1})
    st = memory_report(rs).peak
    parts = (
        st.weights_gb
        + st.gradients_gb
        + st.optimizer_gb
        + st.activations_gb
        + st.gathered_params_gb
        + st.reserve_gb
    )
    assert st.total_gb == pytest.approx(parts)
    assert st.reserve_gb == rs.training.memory_reserve_gb == 2.0
    assert memory_report(rs).capacity_gb == 80


def test_fits_follows_capacity() -> None:
    small = resolve_inline("llama3-8b", tp=8, gpu_memory_gb=10)
    big = resolve_inline("llama3-8b", tp=8, gpu_memory_gb=1000)
    assert not memory_report(small).fits
    assert memory_report(big).fits


def test_fp32_training_holds_fp32_weights_gradients_and_activations() -> None:
    # Plain fp32 training (no mixed precision): 4 + 4 bytes of weights and gradients and Adam's
    # 8 bytes of states per parameter, no master copy; every activation element twice bf16's.
    from simulator.config.loading import resolve_dict

    base = _dp64()
    psi = param_count(base.model, base.training.seq_len)
    with pytest.raises(UserError, match="fp32 peak") as err:
        resolve_dict(dict(base.raw), ["training.precision=fp32"])
    assert err.value.path == "training.precision"
    fp32 = resolve_dict(
        dict(base.raw),
        [
            "training.precision=fp32",
            "cluster.gpu.peak_tflops.fp32={value: 19.5, source: test}",
        ],
    )
    st = memory_report(fp32).peak
    assert st.weights_gb == pytest.approx(4 * psi / GB)
    assert st.gradients_gb == pytest.approx(4 * psi / GB)
    assert st.optimizer_gb == pytest.approx(8 * psi / GB)
    flash = activation_bytes_per_layer(base)
    assert activation_bytes_per_layer(fp32) > 1.9 * flash


def test_capacity_is_the_memory_the_runtime_exposes_and_scales_with_a_what_if() -> None:
    """Datasheets name binary capacities: an '80GB' H100 exposes 85.05e9 bytes to CUDA, and
    the memory check holds a layout to that. A what-if memory_gb keeps the base GPU's usable
    share; an explicit memory_usable_gb wins."""
    from simulator.config.loading import load_scenario
    from simulator.workload.memory import memory_report

    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    rs = load_scenario(base)
    assert rs.gpu.memory_gb.value == 80 and rs.gpu.capacity_gb == pytest.approx(85.05)
    assert memory_report(rs).capacity_gb == pytest.approx(85.05)
    bigger = load_scenario(base, ["cluster.gpu={profile: h100-sxm-80gb, memory_gb: 160}"])
    assert bigger.gpu.capacity_gb == pytest.approx(2 * 85.05)
    given = "cluster.gpu={profile: h100-sxm-80gb, memory_gb: 160, memory_usable_gb: 150}"
    assert load_scenario(base, [given]).gpu.capacity_gb == pytest.approx(150)
    # A layout between the datasheet figure and the usable one fits (it did not when the
    # datasheet's binary 80 was read as 80e9 bytes).
    between = load_scenario(
        base, ["training.seq_len=11264", "parallelism.recompute=none", "training.global_batch=64"]
    )
    assert 80 < memory_report(between).peak.total_gb < 85.05
    assert memory_report(between).fits


def test_usable_memory_cannot_exceed_what_the_datasheet_capacity_holds() -> None:
    from simulator.config.loading import load_scenario
    from simulator.errors import UserError

    base = REPO / "scenarios" / "llama3-8b-8xh100.yaml"
    inline = "cluster.gpu.memory_usable_gb={value: 85.05, source: nvidia-smi}"
    # an inline what-if that lowers memory_gb below the usable figure it also carries
    with pytest.raises(UserError) as err:
        load_scenario(
            base, ["cluster.gpu={profile: h100-sxm-80gb}", inline, "cluster.gpu.memory_gb=40"]
        )
    assert "memory_usable_gb" in str(err.value) and "memory_gb" in str(err.value)
    # a large what-if scales without tripping the usable figure's own range
    big = load_scenario(base, ["cluster.gpu={profile: h100-sxm-80gb, memory_gb: 95000}"])
    assert big.gpu.capacity_gb == pytest.approx(85.05 * 95000 / 80)
    assert (
        load_scenario(base, ["cluster.gpu={profile: h100-sxm-80gb, memory_gb: 80}"]).gpu.capacity_gb
        == 85.05
    )


def test_uneven_chunks_hold_the_layers_of_the_chunks_in_flight() -> None:
    """With every chunk listed, a stage holds the activations of the chunk forwards whose
    backward has not run, each with its own layers: the closed form (layers × in-flight
    micro-batches) where the chunks are even, the schedule's own peak where they are not."""
    from simulator.config.loading import load_scenario
    from simulator.workload.memory import (
        held_layer_microbatches,
        inflight_microbatches,
        memory_report,
    )

    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"  # PP 4, 80 layers
    il = "parallelism.pp_schedule={kind: interleaved, virtual_stages: 5}"
    even = load_scenario(base, [il, f"parallelism.stage_layers={[4] * 20}"])
    for s in range(4):
        assert held_layer_microbatches(even, s) == pytest.approx(
            even.stage_layers()[s] * inflight_microbatches(even, s)
        )
    # An empty first chunk (stage 0) and an 8-layer last one (stage 3): Megatron's warm-up
    # runs 2(p-r-1)+(v-1)p chunk forwards before the first backward; worked by hand, stage 0
    # then holds 64 layer-micro-batches (not 73.6) and stage 3 72 (not 81.6).
    uneven = load_scenario(base, [il, f"parallelism.stage_layers={[0] + [4] * 18 + [8]}"])
    assert held_layer_microbatches(uneven, 0) == 64
    assert held_layer_microbatches(uneven, 3) == 72
    rep = memory_report(uneven)
    assert rep.stages[0].inflight_microbatches == pytest.approx(64 / 16)


def test_zero3_without_data_parallelism_gathers_nothing() -> None:
    """With one rank in the shard group ZeRO-3 shards nothing: no gather buffer, so it needs
    no more memory than ZeRO-2 (an invariant hunt found it adding two layers' worth)."""
    from simulator.config.loading import load_scenario
    from simulator.workload.memory import memory_report

    base = REPO / "scenarios" / "llama3-70b-64xh100.yaml"
    over = ["cluster.nodes=1", "parallelism.tp=8", "parallelism.pp=1", "training.global_batch=8"]
    over.append("parallelism.pp_schedule={kind: 1f1b}")
    peaks = []
    for stage in (2, 3):
        rs = load_scenario(base, [*over, f"parallelism.sharding={{kind: zero, stage: {stage}}}"])
        assert rs.dp == 1
        rep = memory_report(rs)
        assert all(s.gathered_params_gb == 0 for s in rep.stages)
        peaks.append(rep.peak.total_gb)
    assert peaks[1] <= peaks[0]
