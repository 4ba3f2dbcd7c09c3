"""What a validation scenario reproduces: the published figure its accuracy is checked against
(``benchmarks/accuracy.py``), as the scenario file's ``reference`` states it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GIB = 2**30


class MemoryFigure(BaseModel):
    """The peak memory per GPU a source reports for the run. PyTorch reports two peaks:
    ``allocated`` (``torch.cuda.max_memory_allocated``: live tensors) and ``reserved``
    (``max_memory_reserved``: what the caching allocator holds, cached free blocks included);
    ``device`` is the whole GPU as ``nvidia-smi`` shows it (CUDA context included)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    value: float = Field(gt=0, le=1e5, description="peak memory per GPU, in ``unit``")
    unit: Literal["GiB", "GB"] = "GiB"
    measures: Literal["allocated", "reserved", "device"] = Field(
        description="which peak the source reports"
    )
    source: str = Field(min_length=3, max_length=2000)

    @property
    def gb(self) -> float:
        """The figure in GB (1e9 bytes), the unit clustersim reports memory in."""
        return self.value * (GIB / 1e9 if self.unit == "GiB" else 1.0)


class Reference(BaseModel):
    """A published or measured figure this scenario reproduces (for accuracy checks): one value
    of a simulate metric, or, for a collective benchmark, a curve file of bus bandwidth by size."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    metric: Literal[
        "step_time_s",
        "hardware_tflops_per_gpu",
        "model_tflops_per_gpu",
        "tokens_per_s_per_gpu",
        "mfu",
        "busbw_gbps",
    ]
    value: float | None = Field(default=None, gt=0, le=1e12)
    curve: str | None = Field(
        default=None, max_length=300, description="CSV (message_bytes,busbw_gbps) beside the file"
    )
    collective: Literal["all_reduce", "all_gather", "reduce_scatter"] = "all_reduce"
    nccl_algo: Literal["ring", "tree", "nvls", "nvls_tree"] | None = Field(
        default=None,
        description="the algorithm a collective benchmark restricted NCCL to (NCCL_ALGO); "
        "none, or one that cannot run on the cluster: NCCL's own choice",
    )
    source: str = Field(min_length=3, max_length=2000)
    assumes: str | None = Field(
        default=None,
        max_length=2000,
        description="what the scenario assumes that the source does not state",
    )
    memory: MemoryFigure | None = Field(
        default=None, description="the peak memory per GPU the source reports for the run"
    )
    contradicted_by: str | None = Field(
        default=None,
        min_length=3,
        max_length=1000,
        description="what in the source's own data contradicts this figure (a disturbed "
        "measurement): the accuracy report lists the row apart, out of its set's summary",
    )

    @model_validator(mode="after")
    def _one_figure(self) -> Reference:
        curve = self.metric == "busbw_gbps"
        if curve and (self.curve is None or self.value is not None):
            raise ValueError("a busbw_gbps reference gives a curve (a CSV file) and no value")
        if not curve and (self.value is None or self.curve is not None):
            raise ValueError(f"a {self.metric} reference gives a value and no curve")
        if not curve and self.nccl_algo is not None:
            raise ValueError("nccl_algo belongs to a busbw_gbps reference (a collective benchmark)")
        if curve and self.contradicted_by is not None:
            raise ValueError("a busbw_gbps curve marks its contradicted points in its CSV")
        if curve and self.memory is not None:
            raise ValueError("a busbw_gbps reference (a collective benchmark) has no memory figure")
        return self
