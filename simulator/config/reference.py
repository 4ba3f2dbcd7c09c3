"""What a validation scenario reproduces: the published figure its accuracy is checked against
(``benchmarks/accuracy.py``), as the scenario file's ``reference`` states it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
    source: str = Field(min_length=3, max_length=2000)
    assumes: str | None = Field(
        default=None,
        max_length=2000,
        description="what the scenario assumes that the source does not state",
    )

    @model_validator(mode="after")
    def _one_figure(self) -> Reference:
        curve = self.metric == "busbw_gbps"
        if curve and (self.curve is None or self.value is not None):
            raise ValueError("a busbw_gbps reference gives a curve (a CSV file) and no value")
        if not curve and (self.value is None or self.curve is not None):
            raise ValueError(f"a {self.metric} reference gives a value and no curve")
        return self
