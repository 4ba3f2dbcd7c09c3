"""The step's batch-independent part: linear layers' weights streamed by every pass
(``efficiency.gemm_weight_bandwidth``), its effect on an operation's time, and its fit from
the probe's step timed at two batch sizes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from calibrate.scenario import inline_job_scenario
from calibrate.step_fits import in_step_fit, simulated_compute_s
from simulator.config.hardware import GPUProfile
from simulator.engine.compute import OpTimer
from simulator.workload.ops import Op, backward_op

MODEL = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096, "seq": 128, "batch": 4}


def _gpu(**eff: float) -> dict[str, Any]:
    """The placeholder device (1 TFLOP/s), with memory fast enough (1 TB/s) that the job's
    GEMMs are compute-bound, as on the machines the fit is for."""
    gpu = copy.deepcopy(inline_job_scenario(MODEL)["cluster"]["gpu"])
    gpu["memory_bandwidth_gbps"] = {"value": 1000.0, "source": "set by the test"}
    for k, v in eff.items():
        gpu["efficiency"][k] = {"value": v, "source": "set by the test"}
    return gpu


def _timer(gpu: dict[str, Any]) -> OpTimer:
    return OpTimer(GPUProfile.model_validate(gpu), "fp32")


def test_weight_streaming_adds_weight_bytes_per_pass() -> None:
    """A compute-bound linear layer's GEMM pays its weight's bytes over the streaming
    bandwidth once in the forward pass and twice in the backward (read for the input
    gradient, written as the weight gradient); a product of two activations (attention
    scores) has no weight and pays nothing."""
    plain, streamed = _gpu(), _gpu(gemm_weight_bandwidth=0.25)
    t0, t1 = _timer(plain), _timer(streamed)
    m, n, k = 512, 1024, 256
    lin = Op("mlp_up", "gemm", flops=2.0 * m * n * k, dims=(1, m, n, k), weight=True)
    per_pass = 4 * k * n / (1000e9 * 0.25)  # fp32 weight
    assert t1.time(lin) - t0.time(lin) == pytest.approx(per_pass, rel=1e-9)
    back = backward_op(lin)
    assert back.weight
    assert t1.time(back) - t0.time(back) == pytest.approx(2 * per_pass, rel=1e-9)
    scores = Op("attn_scores", "gemm", flops=2.0 * 8 * m * m * 64, dims=(8, m, m, 64))
    assert t1.time(scores) == t0.time(scores)
    # a slower stream is never faster
    assert _timer(_gpu(gemm_weight_bandwidth=0.1)).time(lin) > t1.time(lin)


def test_a_streamed_weight_leaves_a_memory_bound_gemms_own_traffic() -> None:
    """In a memory-bound GEMM (few tokens) the weight is part of the traffic it already pays:
    streamed, it moves at the streaming bandwidth instead, not twice. At a streaming fraction
    of 1 the GEMM takes what it took."""
    m, n, k = 8, 4096, 4096  # 8 tokens: the weight dominates the traffic
    lin = Op("mlp_up", "gemm", flops=2.0 * m * n * k, dims=(1, m, n, k), weight=True)
    slow_mem = {"value": 100.0, "source": "set by the test"}
    plain, full, quarter = (
        _gpu(**({} if f is None else {"gemm_weight_bandwidth": f})) for f in (None, 1.0, 0.25)
    )
    for g in (plain, full, quarter):
        g["memory_bandwidth_gbps"] = slow_mem
        g["peak_tflops"]["fp32"] = {"value": 1000.0, "source": "set by the test"}
    t0, t1, tq = (_timer(g).time(lin) for g in (plain, full, quarter))
    weight = 4 * k * n
    others = 4 * (m * k + m * n)
    launch = 1e-6
    assert t0 == pytest.approx((weight + others) / 100e9 + launch, rel=1e-9)
    assert t1 == pytest.approx(t0, rel=1e-9)
    assert tq == pytest.approx(weight / 25e9 + others / 100e9 + launch, rel=1e-9)


def test_fp8_weight_gradients_are_written_in_16_bits() -> None:
    """fp8 training reads an fp8 weight but writes its gradient at 16 bits at least."""
    gpu = _gpu(gemm_weight_bandwidth=0.5)
    gpu["peak_tflops"]["fp8"] = {"value": 2.0, "source": "set by the test"}
    gpu["peak_tflops"]["bf16"] = {"value": 1.0, "source": "set by the test"}
    plain = copy.deepcopy(gpu)
    del plain["efficiency"]["gemm_weight_bandwidth"]
    t1 = OpTimer(GPUProfile.model_validate(gpu), "fp8")
    t0 = OpTimer(GPUProfile.model_validate(plain), "fp8")
    m, n, k = 4096, 1024, 1024
    lin = Op("mlp_up", "gemm", flops=2.0 * m * n * k, dims=(1, m, n, k), weight=True)
    bw = 1000e9 * 0.5
    assert t1.time(lin) - t0.time(lin) == pytest.approx(k * n / bw, rel=1e-9)
    back = backward_op(lin)
    assert t1.time(back) - t0.time(back) == pytest.approx((1 + 2) * k * n / bw, rel=1e-9)


def _synthetic_train(factor: float, fraction: float, steps: int = 6) -> dict[str, Any]:
    """Step times a device with this weight streaming and in-step factor would show, at the
    job's batch and at half of it, on two ranks."""
    truth = _gpu(gemm_weight_bandwidth=fraction)
    full = factor * simulated_compute_s(truth, MODEL)
    half = factor * simulated_compute_s(truth, {**MODEL, "batch": 2})
    return {
        "model": MODEL,
        "compute_step_median_s": full,
        "compute_step_times_s": [[full] * steps] * 2,
        "compute_step_how": "synthetic",
        "half_batch": 2,
        "compute_half_step_times_s": [[half] * steps] * 2,
        "compute_half_step_median_s": half,
        "alone_compute_step_median_s": 0.9 * full,
    }


def test_two_batch_sizes_recover_factor_and_weight_streaming() -> None:
    """From the step at two batch sizes the fit recovers the factor and the weight streaming
    that produced them; the fitted profile gives both steps their measured times, and a
    smaller batch, which the fit never saw, too."""
    train = _synthetic_train(1.1, 0.2)
    fit = in_step_fit(_gpu(), train)
    assert fit is not None and fit.weight_fraction is not None
    assert fit.factor == pytest.approx(1.1, rel=1e-6)
    assert fit.weight_fraction == pytest.approx(0.2, rel=1e-6)
    assert "does not shrink with the batch" in fit.weight_what
    fitted = _gpu(in_step_factor=fit.factor, gemm_weight_bandwidth=fit.weight_fraction)
    truth = _gpu(in_step_factor=1.1, gemm_weight_bandwidth=0.2)
    for batch in (4, 2, 1):
        shape = {**MODEL, "batch": batch}
        assert simulated_compute_s(fitted, shape) == pytest.approx(
            simulated_compute_s(truth, shape), rel=1e-6
        )
    # the alone factor is over the same (weight-including) simulated step
    assert fit.alone == pytest.approx(0.9 * 1.1, rel=1e-6)


def test_batch_independent_part_beats_a_single_factor_at_a_small_batch() -> None:
    """Where part of the step does not shrink with the batch, one factor fitted at the job's
    batch under-predicts a quarter of it; the two-size fit does not."""
    train = _synthetic_train(1.0, 0.1)
    single = in_step_fit(_gpu(), {k: v for k, v in train.items() if "half" not in k})
    split = in_step_fit(_gpu(), train)
    assert single is not None and split is not None and split.weight_fraction is not None
    truth = simulated_compute_s(_gpu(gemm_weight_bandwidth=0.1), {**MODEL, "batch": 1})
    one = {**MODEL, "batch": 1}
    flat = simulated_compute_s(_gpu(in_step_factor=single.factor), one)
    two = simulated_compute_s(
        _gpu(in_step_factor=split.factor, gemm_weight_bandwidth=split.weight_fraction), one
    )
    assert flat < 0.97 * truth
    assert two == pytest.approx(truth, rel=1e-6)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"compute_half_step_times_s": "same"}, "not faster"),
        ({"factor_noise": 1.0}, "too noisy"),
        ({"half_batch": 0}, "one batch size"),
    ],
)
def test_weight_term_refused_where_the_data_do_not_support_it(
    change: dict[str, Any], why: str
) -> None:
    """No weight term (and the single factor stands, saying why) where the half-batch step is
    no faster, where the difference implies a factor far from the whole step's, or where the
    probe did not time a second batch."""
    train = _synthetic_train(1.1, 0.2)
    if change.get("compute_half_step_times_s") == "same":
        train["compute_half_step_times_s"] = train["compute_step_times_s"]
    elif "factor_noise" in change:  # half the batch only 10% faster: implausible
        full = train["compute_step_median_s"]
        train["compute_half_step_times_s"] = [[0.9 * full] * 6] * 2
    else:
        train.update(change)
    fit = in_step_fit(_gpu(), train)
    assert fit is not None and fit.weight_fraction is None
    sim = simulated_compute_s(_gpu(), MODEL)
    assert fit.factor == pytest.approx(train["compute_step_median_s"] / sim, rel=1e-9)
    if train.get("half_batch"):
        assert why in fit.what


def test_no_weight_term_where_nothing_is_batch_independent() -> None:
    """A step that shrinks exactly as the simulator's (no time the model lacks) gets no weight
    term: a fraction above 1 would claim weights stream faster than memory."""
    train = _synthetic_train(1.2, 1.0)
    sim = simulated_compute_s(_gpu(), MODEL)
    half = simulated_compute_s(_gpu(), {**MODEL, "batch": 2})
    train["compute_step_times_s"] = [[1.2 * sim] * 6] * 2
    train["compute_step_median_s"] = 1.2 * sim
    train["compute_half_step_times_s"] = [[1.2 * half] * 6] * 2
    fit = in_step_fit(_gpu(), train)
    assert fit is not None and fit.weight_fraction is None
    assert fit.factor == pytest.approx(1.2, rel=1e-9)


def _llama_style(gpus: int, layers: int, **extra: Any) -> dict[str, Any]:
    """A small Llama-style scenario (RMSNorm, rotary positions) on one A100 node."""
    return {
        "name": "tensors",
        "cluster": {
            "gpu": "a100-sxm4-80gb",
            "gpus_per_node": gpus,
            "nodes": 1,
            "fabric": "nvlink3-nvswitch",
        },
        "model": {"layers": layers, "hidden": 1024, "heads": 8, "vocab": 32000},
        "training": {"seq_len": 1024, "global_batch": 8, "micro_batch": 1},
        **extra,
    }


def test_optimizer_pays_per_tensor_on_every_stage() -> None:
    """The optimizer step pays its per-tensor cost for each parameter tensor a rank holds:
    the probe's model holds 21 (8 per layer: two layer norms of weight and bias, fused QKV,
    attention output, MLP in and out; word and position embeddings, final norm, output layer);
    a Llama-style model split over two pipeline stages holds each stage's own."""
    from simulator.config.loading import resolve_dict
    from simulator.engine.sim import Simulation

    sc = inline_job_scenario(MODEL)
    sc["cluster"]["gpu"] = _gpu(optimizer_us_per_tensor=50.0)
    sim = Simulation(resolve_dict(sc))
    assert sim._stage_tensors(0) == 21
    t0 = sim.timer.optimizer_time(1e6)
    assert sim.timer.optimizer_time(1e6, 21) - t0 == pytest.approx(21 * 50e-6, rel=1e-9)
    with_cost = simulated_compute_s(_gpu(optimizer_us_per_tensor=50.0), MODEL)
    assert with_cost - simulated_compute_s(_gpu(), MODEL) == pytest.approx(21 * 50e-6, rel=1e-6)
    # Llama-style (RMSNorm, rotary positions): 6 per layer, embedding 1, norm and output 2
    llama = _llama_style(gpus=2, layers=4, parallelism={"pp": 2})
    two = Simulation(resolve_dict(llama))
    assert (two._stage_tensors(0), two._stage_tensors(1)) == (2 * 6 + 1, 2 * 6 + 2)


def test_optimizer_per_tensor_cost_recovered_from_two_timings() -> None:
    """The optimizer timed over the job's tensors and over many tiny ones: two equations in
    bandwidth and per-tensor cost, solved exactly; none where the tiny step shows no
    per-tensor cost."""
    from calibrate.step_fits import optimizer_tensor_fit

    per_param, inv_bw, per_tensor, op_s = 16.0, 1 / 20e9, 25e-6, 3e-6
    job = {"op": "job", "params": 3_700_000, "tensors": 21}
    tiny = {"op": "tiny", "params": 256 * 64, "tensors": 256}
    for d in (job, tiny):
        d["time_s"] = d["params"] * per_param * inv_bw + d["tensors"] * per_tensor + op_s
    fit = optimizer_tensor_fit(job, tiny, per_param, op_s)
    assert fit is not None
    assert fit[0] == pytest.approx(25.0, rel=1e-6)
    assert fit[2] == pytest.approx(job["params"] * per_param * inv_bw, rel=1e-6)
    assert optimizer_tensor_fit(job, {**tiny, "time_s": op_s}, per_param, op_s) is None
    assert optimizer_tensor_fit(job, None, per_param, op_s) is None


def test_a_zero_optimizer_visits_its_slice_of_the_tensors() -> None:
    """A ZeRO optimizer steps a 1/n slice of the stage's contiguous buffer: about 1/n of its
    tensors, plus one cut at each end; FSDP is counted per parameter (FSDP2)."""
    from simulator.config.loading import resolve_dict
    from simulator.engine.sim import Simulation

    base = _llama_style(gpus=8, layers=8)
    whole = 8 * 6 + 1 + 2  # RMSNorm Llama-style: 6 per layer, embedding, norm and output
    ddp = Simulation(
        resolve_dict({**base, "parallelism": {"sharding": {"kind": "zero", "stage": 0}}})
    )
    zero = Simulation(
        resolve_dict({**base, "parallelism": {"sharding": {"kind": "zero", "stage": 1}}})
    )
    fsdp = Simulation(resolve_dict({**base, "parallelism": {"sharding": {"kind": "fsdp"}}}))
    assert ddp._stage_tensors(0) == whole
    assert zero.shard_n == 8 and zero._stage_tensors(0) == -(-whole // 8) + 1
    assert fsdp._stage_tensors(0) == whole
