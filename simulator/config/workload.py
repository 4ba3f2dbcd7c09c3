"""Workload schema: the model architecture and the training set-up (batch, precision, optimizer)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

from .parallelism import kind_shorthand

MAX_LAYERS = 4096


class ModelSpec(BaseModel):
    """A decoder-only transformer.

    ``kv_heads`` below ``heads`` is grouped-query attention; ``mlp`` picks a SwiGLU (three
    matrices) or GELU (two matrices) feed-forward block. ``ffn_hidden`` defaults to 4·hidden for
    GELU and to Llama's 8/3·hidden rounded up to a multiple of 256 for SwiGLU.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(default="custom", max_length=200)
    layers: int = Field(strict=True, ge=1, le=MAX_LAYERS)
    hidden: int = Field(strict=True, ge=1, le=1 << 20)
    heads: int = Field(strict=True, ge=1, le=1 << 16)
    kv_heads: int | None = Field(
        default=None, strict=True, ge=1, le=1 << 16, description="GQA groups; none = heads"
    )
    ffn_hidden: int | None = Field(default=None, strict=True, ge=1, le=1 << 22)
    vocab: int = Field(strict=True, ge=1, le=1 << 24)
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    position: Literal["rope", "alibi", "learned"] = Field(
        default="rope",
        description="rope and alibi have no parameters (ALiBi's bias rides on the attention "
        "scores); learned adds a max_positions x hidden table",
    )
    max_positions: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=1 << 24,
        description="learned position table size; none = sequence length",
    )
    tied_embeddings: StrictBool = False
    linear_bias: StrictBool = Field(default=False, description="biases on the linear layers")
    dropout: StrictBool = Field(default=False, description="dropout masks kept for backward")
    parallel_residual: StrictBool = Field(
        default=False,
        description="attention and MLP read the same layer input and their outputs are summed "
        "before one tensor-parallel reduction (GPT-J, GPT-NeoX, PaLM, Falcon)",
    )
    published_params: float | None = Field(
        default=None, strict=True, gt=0, le=1e16, description="published parameter count"
    )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.n_kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be divisible by kv_heads ({self.n_kv_heads})"
            )
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def ffn(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        if self.mlp == "gelu":
            return 4 * self.hidden
        raw = int(8 * self.hidden / 3)
        return 256 * ((raw + 255) // 256)


class OptimizerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["adam", "adamw", "sgd", "adafactor"] = "adamw"
    master_weights_fp32: StrictBool = Field(
        default=True, description="mixed precision keeps an fp32 copy of the weights"
    )
    state_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="dtype of the optimizer's states (Adam's moments): bf16 halves them (Apex "
        "distributed Adam with dtype bf16, as NeMo's Nemotron-4 340B recipe sets)",
    )


class TrainingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    seq_len: int = Field(strict=True, ge=1, le=1 << 24, description="tokens per sequence")
    global_batch: int = Field(
        strict=True, ge=1, le=1 << 24, description="sequences per optimizer step"
    )
    micro_batch: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=1 << 20,
        description="sequences per micro-batch per replica",
    )
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = Field(
        default="bf16",
        description="bf16/fp16: mixed precision (16-bit weights and activations, fp32 master "
        "weights per optimizer.master_weights_fp32); fp8: fp8 GEMMs, 16-bit activations; fp32: "
        "everything in fp32 (weights, activations, gradients; no master copy), timed at the "
        "GPU's fp32 peak (as PyTorch without TF32)",
    )
    optimizer: Annotated[OptimizerSpec, BeforeValidator(kind_shorthand)] = OptimizerSpec()
    flash_attention: StrictBool | None = Field(
        default=None,
        description="fused attention: no s×s score matrix kept for backward (unset: the "
        "software stack's flash_attention, else true)",
    )
    grad_reduce_dtype: Literal["bf16", "fp32"] | None = Field(
        default=None,
        description="dtype of the DP gradient reduction and of the gradient buffer it reduces "
        "(bf16: the 16-bit training dtype; unset: the software stack's grad_reduce_fp32 under "
        "bf16/fp8, else 16-bit; fp32 training always reduces fp32)",
    )
    param_gather_dtype: Literal["bf16", "fp32", "fp8"] = Field(
        default="bf16",
        description="dtype of ZeRO/FSDP parameter all-gathers (FSDP MixedPrecision param_dtype; "
        "fp32 as Composer's 'DEFAULT' mixed precision, which casts under autocast; fp8: fp8 "
        "training under ZeRO-3/FSDP casts the linear layers' weight shards to float8 before "
        "gathering them, as torchtitan's enable_fsdp_float8_all_gather)",
    )
    memory_reserve_gb: float = Field(
        default=2.0,
        strict=True,
        ge=0,
        le=1e4,
        description="framework reserve per GPU: CUDA context (~0.5 GB), NCCL buffers and "
        "allocator fragmentation",
    )
    input_bytes_per_token: float = Field(
        default=4.0,
        strict=True,
        ge=0,
        le=1e6,
        description="bytes of input data read per token (e.g. int32 ids)",
    )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch
