"""Memory per GPU under a parallelism plan.

Model state follows Rajbhandari et al., "ZeRO" (SC20), §3.1 and §5: with mixed-precision Adam a
parameter costs 2 bytes (16-bit weight) + 2 (16-bit gradient) + K=12 (fp32 master weight,
momentum, variance) = 16 bytes; ZeRO-1 shards the K bytes over DP, ZeRO-2 the gradients too,
ZeRO-3 everything. Activations follow Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (2022), §4, generalised to grouped-query attention, SwiGLU and fused
attention; the first pipeline stage holds the most micro-batches in flight. PyTorch DDP with its
default ``gradient_as_bucket_view=False`` (``parallelism.dp_bucket_copy``) keeps its gradient
buckets as a second full gradient buffer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config.parallelism import FSDPSharding
from ..config.scenario import ResolvedScenario
from ..config.software import on
from .activations import (
    _alternate_saved_per_layer,
    _full_recompute_bytes_per_layer,
    _selective_saving_per_layer,
    activation_bytes_per_layer,
)
from .model import param_breakdown
from .ops import act_bytes
from .params import end_params, layer_params_per_rank, stage_params

GB = 1e9

# A plan whose modelled peak is above this share of the GPU's memory is called tight: PyTorch's
# caching allocator holds more than the live tensors (freed blocks it keeps, fragmentation),
# and the peaks torchtitan logs (max_memory_reserved, README "Accuracy") run 10-30% above this
# model's peak on 18 of its 20 runs (mean 17.5%): at 85% of capacity such a plan may not fit,
# or may run slowed by the allocator flushing its cache.
TIGHT_SHARE = 0.85


@dataclass(frozen=True)
class StageMemory:
    stage: int
    params: float  # parameters held by one rank of this stage (before ZeRO sharding)
    weights_gb: float
    gradients_gb: float
    grad_buckets_gb: float  # DDP's bucket copy of the gradients (parallelism.dp_bucket_copy)
    optimizer_gb: float
    activations_gb: float
    gathered_params_gb: float  # ZeRO-3/FSDP: full layers all-gathered for compute
    reserve_gb: float
    inflight_microbatches: float

    @property
    def total_gb(self) -> float:
        return (
            self.weights_gb
            + self.gradients_gb
            + self.grad_buckets_gb
            + self.optimizer_gb
            + self.activations_gb
            + self.gathered_params_gb
            + self.reserve_gb
        )

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["total_gb"] = self.total_gb
        return d


@dataclass(frozen=True)
class MemoryReport:
    stages: list[StageMemory]
    capacity_gb: float

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_gb)

    @property
    def fits(self) -> bool:
        return self.peak.total_gb <= self.capacity_gb


def has_master_copy(rs: ResolvedScenario) -> bool:
    """Mixed precision with fp32 master weights; fp32 training updates its weights directly."""
    tr = rs.training
    return tr.optimizer.master_weights_fp32 and tr.precision != "fp32"


def bytes_per_param(rs: ResolvedScenario) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter before sharding."""
    tr = rs.training
    fp32 = tr.precision == "fp32"
    # 16-bit working weights (fp8 training keeps 16-bit weights and casts per GEMM); fp32
    # training has fp32 weights and gradients and no separate master copy.
    w = 4.0 if fp32 else 2.0
    g = 4.0 if rs.grad_reduce_fp32 else 2.0
    master = 0.0
    if has_master_copy(rs):
        # An fp32 master weight whose high half is the bf16 working weight needs its low half
        # only (software.master_weight_remainders); an fp16 weight is not such a half.
        halves = on(rs.software.master_weight_remainders) and tr.precision in ("bf16", "fp8")
        master = 2.0 if halves else 4.0
    states = {"adam": 8.0, "adamw": 8.0, "sgd": 4.0, "adafactor": 0.5}[tr.optimizer.kind]
    if tr.optimizer.state_dtype == "bf16":
        states /= 2.0
    return w, g, master + states


def optimizer_bytes_per_param(rs: ResolvedScenario) -> float:
    """Memory traffic of the optimizer step per parameter. One fused update touches each tensor
    once: read the gradient, read and write the states and master weights; with a master copy
    write the working weights from it, without one update the weights in place (read and write).
    A software stack whose step makes further passes (``optimizer_passes``: Megatron-LM copies
    16-bit gradients to fp32, unscales them, reads them for the clipping norm and copies the
    master weights back in a pass of its own) adds their traffic. Zeroing the gradient buffer
    covers every parameter, not the shard: :func:`buffer_bytes_per_param`."""
    w, g, opt = bytes_per_param(rs)  # opt: optimizer states + master weights
    master = has_master_copy(rs)
    weights = w if master else 2 * w
    fused = g + 2 * opt + weights
    passes = rs.software.optimizer_passes
    if passes is None:
        return fused
    main_g = g  # the gradient the update and the passes before it read
    extra = 0.0
    if passes.grad_copy.value and master and g < 4:
        main_g = 4.0
        extra += g + main_g + (main_g - g)  # read 16-bit, write fp32; the update reads fp32
    if passes.unscale.value and rs.training.precision == "fp16":
        extra += 2 * main_g
    if passes.grad_norm.value:
        extra += main_g
    if passes.weight_copy.value and master:
        extra += 4.0
    return fused + extra


def buffer_bytes_per_param(rs: ResolvedScenario) -> float:
    """Traffic per parameter of the optimizer step over the whole (unsharded) gradient buffer
    rather than the rank's optimizer shard: zeroing it each step, where the stack does
    (Megatron zeroes every rank's full buffer even with the distributed optimizer)."""
    passes = rs.software.optimizer_passes
    if passes is None or not passes.zero_grads.value:
        return 0.0
    return bytes_per_param(rs)[1]


def gather_bytes_per_param(rs: ResolvedScenario) -> float:
    """Bytes per parameter element ZeRO-3/FSDP gathers (and holds while a layer computes):
    fp32 where FSDP gathers fp32 parameters (Composer's 'DEFAULT') or training is fp32."""
    fp32 = rs.training.param_gather_dtype == "fp32" or rs.training.precision == "fp32"
    return 4.0 if fp32 else 2.0


def layer_gather_bytes_per_param(rs: ResolvedScenario) -> float:
    """Bytes per parameter of one layer's ZeRO-3/FSDP all-gather, and of the gathered copy held
    while it computes: the working weights' width, or with float8 all-gathers
    (``param_gather_dtype: fp8``) one byte for the linear layers' weights, the norms and
    biases keeping their width (torchtitan docs/float8.md: FSDP casts each rank's shard of a
    Float8Linear weight to float8 before the all-gather; norms are not linear layers, and the
    output layer, outside the blocks, is left in high precision by torchtitan's filter_fqns)."""
    width = gather_bytes_per_param(rs)
    if rs.training.param_gather_dtype != "fp8":
        return width
    per = layer_params_per_rank(rs)
    m = rs.model
    rest = float(param_breakdown(m, rs.training.seq_len).norms_per_layer)
    if m.linear_bias:  # biases stay in high precision (torchao's Float8Linear casts weights)
        n_in = 2 if m.mlp == "swiglu" else 1
        rest += (m.hidden + 2 * m.kv_dim + n_in * m.ffn) / rs.tp + 2 * m.hidden
    return (per - rest + width * rest) / per if per > 0 else width


def shard_group(rs: ResolvedScenario) -> int:
    """Ranks over which ZeRO/FSDP shards state: the DP replicas with their CP ranks (hybrid
    sharding: within a node's worth)."""
    sh = rs.parallelism.sharding
    if getattr(sh, "strategy", None) == "hybrid_shard":
        assert isinstance(sh, FSDPSharding)
        # a node holds gpus_per_node / TP of the DP×CP ranks (TP is laid out fastest)
        group = sh.shard_group or max(1, rs.gpus_per_node // rs.tp)
        return max(1, min(rs.dp_cp, group))
    return rs.dp_cp


def inflight_microbatches(rs: ResolvedScenario, stage: int) -> float:
    """Micro-batches whose activations a stage holds at its peak (Korthikanti et al. §4.2.3)."""
    m = rs.micro_batches
    p = rs.pp
    kind = rs.parallelism.pp_schedule.kind
    if p == 1:
        return 1.0
    if kind == "gpipe":
        return float(m)
    if kind == "interleaved":
        # Megatron's interleaved schedule (schedules.py,
        # forward_backward_pipelining_with_interleaving) runs 2(p-r-1) + (v-1)p warm-up chunk
        # forwards on rank r before its first backward, so it holds that many chunks plus the
        # one in flight, each 1/v of the stage's layers: p(1 + (p-1)/(pv)) micro-batches on
        # stage 0 (Korthikanti et al. 2022, §4.2.3), fewer on later stages, never more than
        # the m·v chunks there are.
        # With as many micro-batches as stages every chunk forward runs first (warm-up of all
        # m·v: engine.schedule.interleaved_warmup), so the stage holds all m.
        from ..engine.schedule import interleaved_warmup

        v = rs.parallelism.virtual_stages
        chunks = min(interleaved_warmup(stage, p, m, v) + 1, m * v)
        return chunks / v
    return float(min(p - stage, m))


def held_layer_microbatches(rs: ResolvedScenario, stage: int) -> float:
    """Layers' worth of micro-batch activations a stage holds at its peak: its layers times
    :func:`inflight_microbatches`, or, where its model chunks hold different numbers of layers
    (an uneven per-chunk ``stage_layers``, say an empty first chunk), the peak over its
    schedule of the layers of the chunk forwards whose backward has not yet run."""
    layers = rs.stage_layers()[stage]
    v, p = rs.parallelism.virtual_stages, rs.pp
    chunk = rs.chunk_layers(stage)
    if v == 1 or len(set(chunk)) == 1:
        return layers * inflight_microbatches(rs, stage)
    from ..engine.schedule import schedule

    # The peak falls in the warm-up ((v+1)·p chunk forwards at most) or the first steady
    # round; four rounds of p micro-batches hold both.
    m = min(rs.micro_batches, 4 * p)
    live = peak = 0
    for kind, _mb, ch in schedule(rs.parallelism.pp_schedule.kind, stage, p, m, v):
        live += chunk[ch] if kind == "F" else -chunk[ch]
        peak = max(peak, live)
    return float(peak)


def stage_memory(rs: ResolvedScenario, stage: int) -> StageMemory:
    params = stage_params(rs, stage)
    w_b, g_b, o_b = bytes_per_param(rs)
    z = rs.zero_stage
    n = shard_group(rs)
    weights = params * w_b / (n if z >= 3 else 1)
    grads = params * g_b / (n if z >= 2 else 1)
    kept = rs.software.grad_16bit_kept
    if g_b > 2.0 and rs.training.precision != "fp32" and kept is not None and kept.value:
        grads += params * 2.0 / (n if z >= 2 else 1)
    # DDP's flat buckets hold a copy of every gradient (only plain DP with more than one rank).
    copy_buckets = rs.parallelism.dp_bucket_copy and rs.dp_cp > 1 and z == 0
    buckets = params * g_b if copy_buckets else 0.0
    optim = params * o_b / (n if z >= 1 else 1)
    gathered = 0.0
    layers = rs.stage_layers()[stage]
    if z >= 3 and layers and n > 1:
        # Two layers' full TP shard live at once: the one computing and the one prefetched
        # (one without prefetching; with one rank in the shard group nothing is sharded, so
        # nothing is gathered).
        per_layer = layer_params_per_rank(rs)
        live = 2 if rs.parallelism.overlap.param_gather else 1
        gathered = min(live, layers) * per_layer * layer_gather_bytes_per_param(rs)
    if z >= 3 and n > 1:
        # The root unit (the embedding on the first stage, the output layer and final norm
        # on the last) is gathered as each micro-batch's forward begins and kept through its
        # backward (FSDP does not reshard the root after forward).
        emb, head = end_params(rs)
        root = (emb if stage == 0 else 0.0) + (head if stage == rs.pp - 1 else 0.0)
        gathered += root * gather_bytes_per_param(rs)
    rc = rs.parallelism.recompute
    per_layer_act = activation_bytes_per_layer(rs)
    held = held_layer_microbatches(rs, stage)
    inflight = held / layers if layers else inflight_microbatches(rs, stage)
    if rc == "full":
        # Layer inputs of every in-flight micro-batch, plus the rest of one layer's full
        # activations while its backward pass runs (its input is one of those held).
        inputs = _full_recompute_bytes_per_layer(rs)
        act = inputs * held + (per_layer_act - inputs if held else 0.0)
    else:
        full_layer = per_layer_act
        if rc == "selective" and rs.selective_policy == "alternate_matmuls":
            per_layer_act = _alternate_saved_per_layer(rs)
        elif rc == "selective":
            per_layer_act -= _selective_saving_per_layer(rs)
        # What selective recomputation drops comes back for one layer while its backward runs
        # (as full recomputation's one layer, above). An op-level policy that saves more of a
        # layer than autograd would (torchtitan's keeps the row-parallel matmuls' whole partial
        # sums) brings nothing back.
        act = per_layer_act * held + (max(0.0, full_layer - per_layer_act) if held else 0.0)
        off = rs.parallelism.offload_activation_layers
        if off and layers:
            # Offloaded layers keep nothing on the GPU but the one whose copy is under way
            # (pipeline parallelism is refused with offloading: one micro-batch in flight).
            act -= per_layer_act * (off * held / layers - 1)
    T = rs.training.micro_batch * rs.training.seq_len // rs.cp
    if stage == rs.pp - 1:
        # The loss's logits for one micro-batch over the vocabulary shard as the output
        # layer's backward starts: what it saved and the gradient it writes (the stack's
        # ``logit_bytes``, which describes 16-bit logits; fp32 logits and their fp32 gradient
        # where it gives none or the model trains in fp32).
        lb = rs.software.logit_bytes
        per_logit = lb.value if lb is not None and act_bytes(rs) < 4 else 4.0 + 4.0
        act += T * rs.model.vocab / rs.tp * per_logit
    if stage == 0:
        act += 2 * T * rs.model.hidden / (rs.tp if rs.parallelism.sequence_parallel else 1)
    return StageMemory(
        stage=stage,
        params=params,
        weights_gb=weights / GB,
        gradients_gb=grads / GB,
        grad_buckets_gb=buckets / GB,
        optimizer_gb=optim / GB,
        activations_gb=act / GB,
        gathered_params_gb=gathered / GB,
        reserve_gb=rs.training.memory_reserve_gb,
        inflight_microbatches=inflight,
    )


def memory_report(rs: ResolvedScenario) -> MemoryReport:
    return MemoryReport(
        stages=[stage_memory(rs, i) for i in range(rs.pp)], capacity_gb=rs.gpu.capacity_gb
    )


def zero_model_state_bytes(psi: float, nd: int, stage: int, k: float = 12.0) -> float:
    """Model-state bytes per GPU from the ZeRO paper's formulas (Fig. 1): (2+2+K)Ψ baseline,
    2Ψ+2Ψ+KΨ/Nd for stage 1, 2Ψ+(2+K)Ψ/Nd for stage 2, (2+2+K)Ψ/Nd for stage 3."""
    if stage == 0:
        return (4 + k) * psi
    if stage == 1:
        return 4 * psi + k * psi / nd
    if stage == 2:
        return 2 * psi + (2 + k) * psi / nd
    return (4 + k) * psi / nd
