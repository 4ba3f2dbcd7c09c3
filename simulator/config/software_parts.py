"""The parts of a software-stack profile (config.software): kernel fusion, what communication
overlaps computation, the optimizer's extra passes, and the cited choices a stack makes (pipeline
schedules and split, selective recomputation, the ZeRO cap, the fused attention kernel)."""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from .sourced import Cited, SourcedFlag, _real_source, bare_inline


class SoftmaxUpcast(BaseModel):
    """Where a stack's unfused attention softmax chain works in fp32, with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Literal["scores_scaled", "scores", "output"]
    source: str = Field(min_length=3, max_length=4000)


SourcedUpcast = Annotated[SoftmaxUpcast, BeforeValidator(bare_inline(str, "a value"))]


class Fusion(BaseModel):
    """Elementwise chains the framework runs as one kernel (one read and one write of the
    tensor instead of one per operation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bias_gelu: SourcedFlag = Field(description="linear bias + GELU in one kernel")
    bias_dropout_add: SourcedFlag = Field(description="bias + dropout + residual add in one kernel")
    scale_mask_softmax: SourcedFlag = Field(
        description="unfused attention: scale, causal mask and softmax of the scores in one kernel"
    )
    rms_norm: SourcedFlag | None = Field(
        default=None,
        description="RMSNorm as one kernel (a fused kernel or a compiler's); off: the eager "
        "composite (upcast, square, mean, rsqrt scale, downcast, weight), a pass each; unset: "
        "one kernel",
    )
    swiglu: SourcedFlag | None = Field(
        default=None,
        description="SwiGLU's SiLU of the gate times the up projection in one kernel; off: a SiLU "
        "kernel and a multiply; unset: one kernel",
    )
    softmax_upcast: SourcedUpcast | None = Field(
        default=None,
        description="where the unfused softmax chain works in fp32: 'scores_scaled' (the scores "
        "are cast to fp32 before scale, mask and softmax and the probabilities cast back), "
        "'scores' (the same with no scale kernel: 1/sqrt(d) is in the score GEMM), 'output' (the "
        "softmax writes fp32, cast back after it); unset: all in 16 bits",
    )
    skip_bias_add: SourcedFlag | None = Field(
        default=None,
        description="linear layers return their output without the bias, which the next "
        "elementwise kernel adds (unfused: a bias-add kernel of its own); unset: the bias is "
        "in the GEMM",
    )


class StackOverlap(BaseModel):
    """Which communication the framework runs concurrently with computation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp_grad: SourcedFlag = Field(description="gradient reduction overlaps the backward pass")
    param_gather: SourcedFlag = Field(
        description="ZeRO-3/FSDP parameter all-gathers are prefetched"
    )
    tp_comm: SourcedFlag = Field(description="tensor-parallel collectives overlap GEMMs")
    tp_backward: SourcedFlag | None = Field(
        default=None,
        description="a column-parallel layer's backward collectives run beside its own GEMMs: "
        "the input gradient's all-reduce (or reduce-scatter) beside the weight gradient, and "
        "with sequence parallelism the input's re-gather beside the input gradient (Megatron's "
        "asynchronous TP backward); unset: off",
    )
    pp_p2p: SourcedFlag = Field(
        description="pipeline sends and receives run on their own stream (false: they block "
        "the compute stream until the transfer completes)"
    )


class OptimizerPasses(BaseModel):
    """Passes the framework's optimizer step makes over memory besides one fused update (which
    reads the gradient, reads and writes the optimizer states and master weights, and writes the
    working weights from the master copy). Each is a multi-tensor kernel over the whole shard."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grad_copy: SourcedFlag = Field(
        description="16-bit gradients copied into separate fp32 main gradients before the "
        "update (read 16-bit, write fp32; the update then reads fp32)"
    )
    unscale: SourcedFlag = Field(
        description="with fp16 loss scaling, a separate pass unscales the main gradients and "
        "checks them for inf/nan (read and write)"
    )
    grad_norm: SourcedFlag = Field(
        description="gradient norm for clipping: read the main gradients"
    )
    weight_copy: SourcedFlag = Field(
        description="master weights copied to the working weights in a pass of their own "
        "(the fp32 master read again)"
    )
    zero_grads: SourcedFlag = Field(description="the gradient buffer zeroed each step (one write)")


class Schedules(BaseModel):
    """Pipeline schedules a stack runs, with where that is documented."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: list[Literal["gpipe", "1f1b", "interleaved"]] = Field(min_length=1, max_length=3)
    source: str = Field(min_length=3, max_length=4000)

    _source = field_validator("source")(_real_source)


class SelectivePolicy(BaseModel):
    """What the stack's selective activation recomputation runs again, with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Literal["attention_core", "alternate_matmuls"]
    source: str = Field(min_length=3, max_length=4000)

    _source = field_validator("source")(_real_source)


class ZeroCap(BaseModel):
    """A ZeRO stage (0-3), with where it is documented."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: int = Field(strict=True, ge=0, le=3)
    source: str = Field(min_length=3, max_length=4000)

    _source = field_validator("source")(_real_source)


# The fused attention kernel a stack runs, with where that is documented.
FlashKernel = Cited[Literal["flash2", "flash3"]]
PipelineSplit = Cited[Literal["even", "cost_thresholds"]]
# The fewest micro-batches per step a stack's 1F1B engine runs: PP - 1, or PP.
PipelineFloor = Cited[Literal["pp_minus_1", "pp"]]
# Bytes per logit the loss moves over memory in its forward and its backward.
LogitTraffic = Cited[
    tuple[Annotated[float, Field(ge=0, le=1000)], Annotated[float, Field(ge=0, le=1000)]]
]


M = TypeVar("M", bound=BaseModel)
# A cited value a scenario may give bare (``--set software.pp_max_zero_stage=2``): it becomes
# {value, source: inline}; a profile file must give its source.
Inline = Annotated[M, BeforeValidator(bare_inline((int, str, list, tuple), "a value"))]
