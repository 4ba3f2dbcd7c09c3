"""Software-stack profile schema: what a training framework does with the hardware.

The same cluster runs at different speeds under Megatron-LM, DeepSpeed, PyTorch FSDP (eager)
and torchtitan: which elementwise kernels are fused, which attention kernel runs, which
communication overlaps computation, and how much host time each kernel launch costs. A GPU
profile says what the silicon can do; a software profile says what the framework does with it.
Every figure and every switch carries its source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

if TYPE_CHECKING:
    from .hardware import GPUProfile

from .software_parts import (
    FlashKernel,
    Fusion,
    Inline,
    LogitTraffic,
    OptimizerPasses,
    PipelineFloor,
    PipelineSplit,
    Schedules,
    SelectivePolicy,
    StackOverlap,
    ZeroCap,
)
from .sourced import Flag, Num, SourcedFlag, _Profile, bare_inline


def on(flag: Flag | None) -> bool:
    """Whether an optional switch of a profile is set (absent: off)."""
    return flag is not None and flag.value


def off(flag: Flag | None) -> bool:
    """Whether a profile states an optional switch is off (absent: not stated, so not off)."""
    return flag is not None and not flag.value


class SoftwareProfile(_Profile):
    kind: Literal["software"] = "software"
    framework: str = Field(description="framework and version range the figures describe")
    fusion: Fusion
    flash_kernel: Annotated[FlashKernel, BeforeValidator(bare_inline(str, "the kernel"))] = Field(
        default=FlashKernel(value="flash2", source="default: the portable FlashAttention-2 kernel"),
        description="fused attention kernel when training.flash_attention is on (flash3 needs a "
        "GPU profile with attention_flash3_max; elsewhere the flash2-class figure is used)",
    )
    flash_kernel_blackwell: (
        Annotated[FlashKernel, BeforeValidator(bare_inline(str, "the kernel"))] | None
    ) = Field(
        default=None,
        description="the kernel the stack runs instead on compute capability 10.0 and later "
        "(Blackwell), where it picks another there; unset: flash_kernel everywhere",
    )
    overlap: StackOverlap
    attention_repack: SourcedFlag | None = Field(
        default=None,
        description="flash attention through its variable-length entry point: Q, K and V "
        "gathered into packed tensors and the output scattered back, each way (none: no)",
    )
    grad_accumulate_add: SourcedFlag | None = Field(
        default=None,
        description="every backward pass adds the fresh weight gradients into the persistent "
        "gradient buffer in a kernel of its own (read both, write the buffer) instead of "
        "inside the weight-gradient GEMM (none: no)",
    )
    grad_accumulate_cast: SourcedFlag | None = Field(
        default=None,
        description="grad_accumulate_add first casts the 16-bit gradients to the buffer's "
        "width in a kernel of its own (a temporary written, then read by the add) instead of "
        "converting them inside the add (none: inside the add)",
    )
    grad_accumulate_fusion: SourcedFlag | None = Field(
        default=None,
        description="where gradients accumulate in fp32, the weight-gradient GEMM adds into the "
        "buffer itself and grad_accumulate_add's kernel does not run (Megatron's "
        "--gradient-accumulation-fusion); none: no",
    )
    grad_flatten_copy: SourcedFlag | None = Field(
        default=None,
        description="with ZeRO-3/FSDP sharding, every backward copies a layer's unsharded "
        "weight gradients into one flat buffer for its reduce-scatter (read and write; none: "
        "no copy)",
    )
    gather_copy_out: SourcedFlag | None = Field(
        default=None,
        description="with ZeRO-3/FSDP sharding, each layer's all-gathered parameters are "
        "copied out of the collective's buffer into the per-parameter tensors on the compute "
        "stream (read and write, forward and backward; none: used in place)",
    )
    host_us_per_kernel: Num = Field(
        description="host (CPU) time to issue one kernel, microseconds: a pass whose kernels "
        "are shorter than this is paced by the host"
    )
    host_us_per_collective: Num | None = Field(
        default=None, description="host time per layer collective call (its Python), us"
    )
    dp_bucket_mb: Num | None = Field(
        default=None,
        description="gradient bucket the framework reduces at a time, MB (a scenario's "
        "parallelism.dp_bucket_mb overrides it; none: PyTorch DDP's 25 MB)",
    )
    dp_bucket_params: Num | None = Field(
        default=None,
        description="gradient bucket the framework reduces at a time, in parameters, grown "
        "with the data-parallel group as max(this, dp_bucket_params_per_dp_rank × DP×CP) "
        "(Megatron-Core's default; a bucket of N parameters moves N × the collective's "
        "element width; exclusive with dp_bucket_mb)",
    )
    dp_bucket_params_per_dp_rank: Num | None = Field(
        default=None,
        description="parameters per DP×CP rank the bucket grows by (with dp_bucket_params; "
        "as in Megatron-Core, a reduction that does not overlap backward goes in one bucket)",
    )
    dp_bucket_first_chunk_only: SourcedFlag | None = Field(
        default=None,
        description="only the first pipeline stage's first model chunk reduces (and gathers) "
        "its gradients in buckets; every other chunk in one collective when its last "
        "backward ends (unset: every chunk in buckets)",
    )
    optimizer_passes: OptimizerPasses | None = Field(
        default=None,
        description="extra passes of the optimizer step over memory (none: one fused update)",
    )
    flash_attention: SourcedFlag | None = Field(
        default=None,
        description="whether the stack has a fused (flash) attention kernel (a scenario's "
        "training.flash_attention overrides it; unset: it has)",
    )
    loader_on_pipeline_ends: SourcedFlag | None = Field(
        default=None,
        description="only TP rank 0 of the first and last pipeline stages reads training data "
        "and broadcasts it to its TP group (unset: every rank reads its DP replica's samples)",
    )
    grad_reduce_fp32: SourcedFlag | None = Field(
        default=None,
        description="under bf16 or fp8 mixed precision the stack accumulates gradients in an "
        "fp32 buffer and reduces them over DP in fp32 (a scenario's training.grad_reduce_dtype "
        "overrides it; unset: 16-bit)",
    )
    pp_gathers_once: SourcedFlag | None = Field(
        default=None,
        description="under pipeline parallelism, ZeRO-2/3 and FSDP keep a stage's gathered "
        "parameters and unsharded gradients through the step's micro-batches: one parameter "
        "all-gather per step and one gradient reduce-scatter after the last backward, ZeRO-1's "
        "traffic and memory (unset: sharded state is gathered and reduced every micro-batch)",
    )
    grad_comm_16bit: SourcedFlag | None = Field(
        default=None,
        description="the DP reduction casts the (fp32) gradient buffer to the 16-bit training "
        "dtype on the wire (unset: it moves at the buffer's width)",
    )
    grad_16bit_kept: SourcedFlag | None = Field(
        default=None,
        description="the 16-bit gradients stay allocated beside an fp32 accumulation buffer "
        "(2 more bytes per parameter; unset: freed into it)",
    )
    fp8_saved_inputs: SourcedFlag | None = Field(
        default=None,
        description="under fp8 the linear layers keep for the weight gradient the fp8 copy of "
        "their input they cast for the forward GEMM (1 byte per element) instead of its 16-bit "
        "original (unset: the 16-bit input, as torchao's float8 training keeps)",
    )
    fp8_backward_fast_accum: SourcedFlag | None = Field(
        default=None,
        description="under fp8 the backward's GEMMs (input and weight gradients) accumulate "
        "fast as the forward's do, at the GPU's fp8 rate (torchao's rowwise recipes: "
        "use_fast_accum for all three GEMMs); unset or false: they promote their partial sums "
        "to FP32 and run at the GPU's matmul_fp8_promoted_accum of it (TransformerEngine; "
        "torchao's default tensorwise recipe)",
    )
    sp_keeps_gathered_input: SourcedFlag | None = Field(
        default=None,
        description="under sequence parallelism the column-parallel layers keep for backward "
        "the all-gathered input (DTensor's PrepareModuleInput gathers the block input once and "
        "the matmuls save it) instead of their sequence shard, so the backward gathers nothing "
        "again (unset: the shard, re-gathered in the backward, as Megatron's and "
        "TransformerEngine's linear layers do)",
    )
    zero1_grad_all_reduce: SourcedFlag | None = Field(
        default=None,
        description="ZeRO-1 all-reduces the whole gradient (each rank then updates its shard) "
        "instead of reduce-scattering it (unset: reduce-scatter)",
    )
    bf16_shards_optimizer: SourcedFlag | None = Field(
        default=None,
        description="under bf16 the stack's optimizer shards its states over DP even at ZeRO "
        "stage 0, which then runs as ZeRO-1 (unset: stage 0 keeps them whole)",
    )
    fp8_tp_all_gather: SourcedFlag | None = Field(
        default=None,
        description="under fp8 with sequence parallelism a linear layer's input all-gather "
        "moves the input's fp8 cast, one byte per element (and its backward re-gather the "
        "saved fp8 input); unset: the 16-bit input, cast after the gather",
    )
    master_weight_remainders: SourcedFlag | None = Field(
        default=None,
        description="the optimizer keeps only the low 16 bits of each fp32 master weight, the "
        "high half being the bf16 working weight (Apex DistributedFusedAdam "
        "store_param_remainders, which NeMo 1.x sets for an fp32 optimizer over a bf16 model "
        "without fp8 parameters): 2 bytes per parameter instead of 4 (unset: a full fp32 copy)",
    )
    selective_recompute: Inline[SelectivePolicy] | None = Field(
        default=None,
        description="what parallelism.recompute: selective runs again in the backward pass: "
        "attention_core (Korthikanti et al.: QK^T, softmax, attention over V; with flash "
        "attention, the fused kernel) or alternate_matmuls (every second matmul of the layer "
        "and every elementwise op, the attention kernel's output kept; unset: attention_core)",
    )
    recompute_early_stop: SourcedFlag | None = Field(
        default=None,
        description="full recomputation runs through PyTorch's non-reentrant checkpoint with "
        "early stop (torch >= 2.1): the re-run forward of a layer stops once every tensor its "
        "backward needs is back, so the layer's last matmul and what follows it (its "
        "collective, the residual add) are not run again (unset: the whole forward again, as "
        "Megatron's and DeepSpeed's checkpoints do)",
    )
    pp_tied_embeddings: SourcedFlag | None = Field(
        default=None,
        description="whether the stack can tie the input and output embeddings under pipeline "
        "parallelism (unset: it can, all-reducing their gradient between the end stages)",
    )
    pp_schedules: Inline[Schedules] | None = Field(
        default=None, description="the pipeline schedules the stack can run (unset: all)"
    )
    loss_traffic: Inline[LogitTraffic] | None = Field(
        default=None,
        description="bytes per logit of the rank's shard the loss reads and writes, forward "
        "and backward, the fp32 cast and the cast back included (unset: a fused softmax, "
        "read the 16-bit logits, write and read fp32 probabilities; twice that backward)",
    )
    pp_split: Inline[PipelineSplit] | None = Field(
        default=None, description="layers over pipeline ranks where the scenario lists none"
    )
    pp_1f1b_min_micro_batches: Inline[PipelineFloor] | None = Field(
        default=None,
        description="the fewest micro-batches per step the stack's 1F1B engine runs: "
        "pp_minus_1 (PP - 1) or pp (unset: any count)",
    )
    pp_max_zero_stage: Inline[ZeroCap] | None = Field(
        default=None,
        description="the highest ZeRO stage the stack runs with pipeline parallelism (unset: any)",
    )
    logit_bytes: Num | None = Field(
        default=None,
        description="bytes per logit (token x vocabulary entry of the rank's shard) the loss "
        "holds when the output layer's backward starts, with 16-bit logits: what it saved for "
        "backward and the gradient it writes (none, or fp32 training: 8, fp32 logits and their "
        "fp32 gradient)",
    )
    comm_sms: Num = Field(
        description="streaming multiprocessors a data-parallel collective's kernels hold while "
        "it overlaps computation: compute loses that share of the GPU for the overlap"
    )

    @model_validator(mode="after")
    def _one_bucket_rule(self) -> SoftwareProfile:
        if self.dp_bucket_params is not None and self.dp_bucket_mb is not None:
            raise ValueError("give dp_bucket_mb or dp_bucket_params, not both")
        if (self.dp_bucket_params is None) != (self.dp_bucket_params_per_dp_rank is None):
            raise ValueError(
                "dp_bucket_params and dp_bucket_params_per_dp_rank are set together or not at all"
            )
        return self


__all__ = ["Flag", "Fusion", "OptimizerPasses", "SoftwareProfile", "StackOverlap", "off", "on"]


def attention_kernel(software: SoftwareProfile, gpu: GPUProfile) -> str:
    """The fused attention kernel ``software`` runs on ``gpu`` (by its compute capability)."""
    late, cc = software.flash_kernel_blackwell, gpu.compute_capability
    if late is not None and cc is not None and cc.value >= 10.0:
        return late.value
    return software.flash_kernel.value
