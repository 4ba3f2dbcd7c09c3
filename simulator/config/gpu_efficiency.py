"""A GPU profile's achieved efficiency: the fractions of its spec-sheet peaks that GEMMs,
attention, memory-bound kernels and the optimizer reach, and the curves they follow with size,
kept apart from the peaks themselves (:mod:`.hardware`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .bounds import document_ranges
from .sourced import Num


class GPUEfficiency(BaseModel):
    """Achieved fractions of peak, separate from the spec sheet.

    Matmul efficiency follows a saturating curve in the operation's FLOPs:
    ``eff(F) = matmul_max * F / (F + matmul_half_flops)``.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, json_schema_extra=document_ranges
    )

    matmul_max: Num = Field(description="fraction of dense peak reached by large GEMMs")
    matmul_half_flops: Num = Field(description="GEMM size (FLOPs) at which efficiency is half")
    matmul_fp8_max: Num | None = Field(
        default=None,
        description="matmul_max for fp8 GEMMs, a fraction of the fp8 peak; unset: matmul_max",
    )
    matmul_fp8_half_flops: Num | None = Field(
        default=None,
        description="matmul_half_flops for fp8 GEMMs; unset: matmul_half_flops",
    )
    matmul_fp8_promoted_accum: Num | None = Field(
        default=None,
        description=(
            "rate of fp8 GEMMs that promote their partial sums to FP32 at intervals (cuBLASLt "
            "FP8 fast accumulation off), as a fraction of the fast-accumulation fp8 rate "
            "(matmul_fp8_max, or matmul_max where that is unset); fp8 training runs its "
            "backward GEMMs (input and weight gradients) this way and its forward ones fast, "
            "unless the stack says otherwise (fp8_backward_fast_accum); unset: 1 (tensor cores "
            "that accumulate fp8 products in full FP32 and have no fast mode, as Blackwell's)"
        ),
    )
    attention_max: Num = Field(
        description="fraction of dense peak reached by the portable fused attention kernel "
        "(FlashAttention-2 class), forward and backward, its FLOPs counted over the full s×s "
        "scores with the backward at twice the forward (so a causal kernel, which computes "
        "about half the scores, can pass 1: at most 12/7)"
    )
    attention_flash3_max: Num | None = Field(
        default=None,
        description=(
            "fraction of dense peak reached by the architecture-specific fused attention kernel "
            "(FlashAttention-3 on Hopper, cuDNN fused attention on Blackwell) for software "
            "stacks with flash_kernel: flash3 (the asymptote where attention_flash3_half_seq "
            "is set; never below the portable kernel's figure); unset: attention_max"
        ),
    )
    attention_half_seq: Num | None = Field(
        default=None,
        description=(
            "key/value length (tokens) at which the portable fused attention kernel runs at "
            "half of attention_max: efficiency max·s/(s+half), each query "
            "block's fixed cost (and causal masking's partly empty diagonal tiles) amortised "
            "over the keys it visits; unset: the same efficiency at every length"
        ),
    )
    attention_flash3_half_seq: Num | None = Field(
        default=None,
        description=(
            "attention_half_seq of the architecture-specific kernel (attention_flash3_max); "
            "unset: its efficiency is the same at every length"
        ),
    )
    attention_forward_share: Num | None = Field(
        default=None,
        description=(
            "part of a fused attention kernel's forward+backward time its forward takes (the "
            "efficiency figures above time the pair): the backward recomputes the scores, five "
            "products to the forward's two, at lower efficiency; matters where a forward runs "
            "alone (recomputation); unset: 2/7, the products' share at equal efficiency"
        ),
    )
    memory_bandwidth: Num = Field(description="fraction of HBM bandwidth reached by copies")
    host_link: Num | None = Field(
        default=None,
        description="fraction of host_link_gbps that copies between host and GPU memory reach "
        "(activation offloading); unset: the datasheet figure, with a note",
    )
    kernel_launch_us: Num = Field(description="fixed overhead per kernel, microseconds")
    optimizer_bandwidth: Num | None = Field(
        default=None,
        description=(
            "fraction of memory bandwidth the optimizer step reaches, its traffic counted with "
            "each tensor touched once (a fused optimizer comes close to that; an unfused, "
            "per-operation one moves several times as much, so its fraction is lower); "
            "unset: memory_bandwidth"
        ),
    )
    optimizer_us_per_tensor: Num | None = Field(
        default=None,
        description=(
            "fixed cost of the optimizer step per parameter tensor, microseconds: a foreach "
            "optimizer that loops over the tensors for each of its element-wise operations "
            "(PyTorch's on a CPU) pays it for every tensor, so a model of many small tensors "
            "steps slower than its bytes say; unset: 0 (multi-tensor kernels that take "
            "hundreds of tensors per launch)"
        ),
    )
    gemm_weight_bandwidth: Num | None = Field(
        default=None,
        description=(
            "fraction of memory bandwidth at which a linear layer's GEMM streams its weight "
            "operand on top of its own time, once per pass and micro-batch (the forward and "
            "the input gradient read the weight, the weight gradient writes one as large): "
            "inside a training step the rest of the step's work has evicted it since its "
            "last use, a cost that does not shrink with the micro-batch; fitted from the "
            "step at two batch sizes; unset: weights cost nothing beyond the GEMM's roofline"
        ),
    )
    in_step_factor: Num | None = Field(
        default=None,
        description=(
            "factor on the time of every compute-stream operation (GEMMs, attention, "
            "memory-bound operations, optimizer): a training step's operations take this much "
            "longer than the same operations timed alone (framework and allocator overhead, "
            "caches shared with other work, the host's other devices busy); measured by "
            "timing the job's step without communication (with gemm_weight_bandwidth: from how "
            "much that step shrinks at half the batch); unset: 1"
        ),
    )


__all__ = ["GPUEfficiency"]
