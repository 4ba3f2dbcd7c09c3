"""Parallelism plan schema: DP/TP/PP/CP degrees, sharding, pipeline schedule, recompute, overlap."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

Degree = Annotated[int, Field(strict=True, ge=1, le=1 << 24)]
"""A parallelism degree."""


class GPipe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["gpipe"] = "gpipe"


class OneFOneB(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["1f1b"] = "1f1b"


class Interleaved(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["interleaved"] = "interleaved"
    virtual_stages: int = Field(
        default=2,
        strict=True,
        ge=2,
        le=512,
        description="model chunks per pipeline rank (one chunk is 1f1b)",
    )


def kind_shorthand(value: object) -> object:
    """``pp_schedule: interleaved`` for ``{kind: interleaved}``: a bare word where a mapping with
    a ``kind`` goes is that mapping (whose other fields are then checked as usual)."""
    return {"kind": value} if isinstance(value, str) else value


PipelineSchedule = Annotated[
    GPipe | OneFOneB | Interleaved,
    Field(discriminator="kind"),
    BeforeValidator(kind_shorthand),
]


class ZeroSharding(BaseModel):
    """DeepSpeed ZeRO (Rajbhandari et al. 2020): 1 optimizer state, 2 + gradients, 3 + weights."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["zero"] = "zero"
    # No default: {kind: zero} (or a bare --set ...sharding=zero) names no stage, and stage 0
    # (no sharding at all) would silently undo the sharding it replaces.
    stage: Literal[0, 1, 2, 3] = Field(
        description="0: none sharded (plain DP), 1: optimizer states, 2: + gradients, 3: + weights"
    )


class FSDPSharding(BaseModel):
    """PyTorch FSDP. full_shard ~ ZeRO-3, shard_grad_op ~ ZeRO-2, hybrid_shard shards within a
    group of ``shard_group`` ranks of DP×CP (default: those on one node) and replicates across."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["fsdp"] = "fsdp"
    strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard"] = "full_shard"
    shard_group: int | None = Field(default=None, strict=True, ge=1, le=1 << 24)


Sharding = Annotated[
    ZeroSharding | FSDPSharding, Field(discriminator="kind"), BeforeValidator(kind_shorthand)
]


class Overlap(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dp_grad: StrictBool = Field(
        default=True, description="overlap DP gradient buckets with backward"
    )
    param_gather: StrictBool = Field(default=True, description="prefetch ZeRO-3/FSDP all-gathers")
    tp_comm: StrictBool = Field(default=False, description="overlap TP collectives with GEMMs")
    tp_backward: StrictBool = Field(
        default=False,
        description="a column-parallel layer's backward collectives overlap its own GEMMs "
        "(Megatron's asynchronous TP backward); unset: as the software stack does",
    )
    pp_p2p: StrictBool = Field(default=True, description="pipeline sends run on their own stream")


class ParallelismSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dp: Degree | Literal["auto"] = Field(default="auto", description="'auto': GPUs / (TP·PP·CP)")
    tp: Degree = 1
    sequence_parallel: StrictBool = Field(default=False, description="Megatron SP with TP")
    pp: Degree = 1
    pp_schedule: PipelineSchedule = OneFOneB()
    stage_layers: list[Annotated[int, Field(strict=True, ge=0, le=4096)]] | None = Field(
        default=None,
        max_length=1 << 16,
        description="layers per pipeline stage (or per model chunk, stage by stage within each "
        "round of chunks) when uneven; sums to the layers; the first and last entries may be 0 "
        "(a chunk holding only the embedding, or only the output layer and loss)",
    )
    cp: Degree = Field(default=1, description="context parallelism over the sequence")
    sharding: Sharding = ZeroSharding(stage=0)
    recompute: Literal["none", "selective", "full"] = "none"
    dp_bucket_mb: float | None = Field(
        default=None,
        strict=True,
        ge=1e-3,
        le=1e6,
        description="DP gradient bucket size, MB; default: the software stack's (PyTorch DDP's "
        "25 MB where the stack names none)",
    )
    dp_bucket_copy: StrictBool = Field(
        default=False,
        description="copy gradients into DP buckets and back, with a second gradient buffer, "
        "as PyTorch DDP's default gradient_as_bucket_view=False does (plain DP, ZeRO stage 0; "
        "contiguous gradient buffers need none)",
    )
    offload_activation_layers: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=4096,
        description="layers whose saved activations go to host memory during the forward pass "
        "and come back before their backward (Megatron-Core cpu_offloading_num_layers; no "
        "pipeline parallelism or recomputation with it); needs the GPU's host_link_gbps",
    )
    overlap: Overlap = Overlap()

    @property
    def zero_stage(self) -> int:
        """Equivalent ZeRO stage of the sharding choice."""
        if isinstance(self.sharding, ZeroSharding):
            return self.sharding.stage
        return 2 if self.sharding.strategy == "shard_grad_op" else 3

    @property
    def virtual_stages(self) -> int:
        return self.pp_schedule.virtual_stages if isinstance(self.pp_schedule, Interleaved) else 1
