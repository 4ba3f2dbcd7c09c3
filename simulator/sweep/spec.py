"""Sweep specification: a base scenario and the axes to vary, validated like a scenario.

```yaml
name: llama3-70b-buy-or-rent
base: ../llama3-70b-64xh100.yaml        # relative to this file
axes:
  - cluster.nodes: [4, 8, 16]           # one field, its values (any --set path)
  - offer:                              # a named axis whose options set several fields
      - {cluster.pricing.profile: aws-p5-h100, cluster.pricing.tier: on_demand}
      - {cluster.pricing.profile: own-dgx-h100}
parallelism: {tp: auto, pp: auto}       # fields to enumerate for every point ('auto')
keep: fastest                           # per cluster: fastest | cheapest | all
```

Every point is the base with one option of every axis applied (their Cartesian product), in a
fixed order, so the same spec always gives the same points.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..config.reading import read_yaml
from ..config.validation import validation_error
from ..errors import UserError

AUTO_FIELDS = ("tp", "pp", "cp", "sharding", "micro_batch", "schedule", "recompute")
MAX_POINTS = 100_000


class AutoPlan(BaseModel):
    """Which parallelism choices to enumerate ('auto') instead of taking them from the base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: Literal["auto"] | None = None
    pp: Literal["auto"] | None = None
    cp: Literal["auto"] | None = None
    sharding: Literal["auto"] | None = None
    micro_batch: Literal["auto"] | None = None
    schedule: Literal["auto"] | None = None
    recompute: Literal["auto"] | None = None

    def fields(self) -> list[str]:
        return [f for f in AUTO_FIELDS if getattr(self, f) == "auto"]


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(max_length=200)
    description: str | None = Field(default=None, max_length=10_000)
    base: str = Field(max_length=1000, description="scenario file, relative to the spec")
    axes: list[dict[str, list[Any]]] = Field(
        default_factory=list,
        max_length=32,
        description="each item one axis: {PATH: [values]} or {NAME: [{PATH: value, ...}, ...]}",
    )
    parallelism: AutoPlan | Literal["auto"] = Field(
        default_factory=AutoPlan, description="'auto' enumerates every field"
    )
    keep: Literal["fastest", "cheapest", "all"] = Field(
        default="fastest", description="which plan to keep per cluster when plans are enumerated"
    )

    @field_validator("axes")
    @classmethod
    def _one_key(cls, axes: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for i, ax in enumerate(axes):
            if len(ax) != 1:
                raise ValueError(f"axes[{i}] must have exactly one key (the path or axis name)")
            (values,) = ax.values()
            if not values:
                raise ValueError(f"axes[{i}] has no values")
        return axes

    def auto(self) -> list[str]:
        return list(AUTO_FIELDS) if self.parallelism == "auto" else self.parallelism.fields()


def _options(axis: dict[str, list[Any]]) -> tuple[str, list[dict[str, Any]]]:
    """An axis as (name, options): each option maps --set paths to values."""
    ((key, values),) = axis.items()
    out = []
    for v in values:
        if isinstance(v, dict) and v and all(isinstance(k, str) and "." in k for k in v):
            out.append(dict(v))
        else:
            out.append({key: v})
    return key, out


def _set_expr(path: str, value: Any) -> str:
    return f"{path}={json.dumps(value)}"


class Point(BaseModel):
    """One cluster/configuration of the sweep: its axis choices as --set expressions."""

    model_config = ConfigDict(frozen=True)

    index: int
    labels: dict[str, str]
    sets: list[str]
    # What else decides the point's rows (the base scenario, the sweep's settings): a resumed
    # sweep reuses a finished point only when this matches too.
    salt: str = ""

    @property
    def key(self) -> str:
        return hashlib.sha1("\n".join([self.salt, *self.sets]).encode()).hexdigest()[:12]


def load_spec(path: str | Path) -> tuple[SweepSpec, dict[str, Any], Path]:
    """The spec, its base scenario as a mapping, and the base's path."""
    p = Path(path)
    data = read_yaml(p)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, str(p), root=SweepSpec) from None
    base_path = (p.parent / spec.base).resolve()
    if not base_path.is_file():
        raise UserError(
            f"base scenario '{spec.base}' not found (looked for {base_path})",
            file=str(p),
            path="base",
            hint="give the scenario's path relative to the sweep file",
        )
    return spec, read_yaml(base_path), base_path


def points(spec: SweepSpec) -> list[Point]:
    axes = [_options(a) for a in spec.axes]
    n = 1
    for _, opts in axes:
        n *= len(opts)
    if n > MAX_POINTS:
        raise UserError(
            f"the axes make {n:,} points, more than a sweep runs ({MAX_POINTS:,})",
            path="axes",
            hint="drop values, or split the sweep",
        )
    out = []
    for i, combo in enumerate(itertools.product(*(opts for _, opts in axes))):
        labels: dict[str, str] = {}
        sets: list[str] = []
        for (name, _), opt in zip(axes, combo, strict=True):
            labels[name] = ", ".join(
                json.dumps(v) if not isinstance(v, str) else v for v in opt.values()
            )
            sets += [_set_expr(k, v) for k, v in opt.items()]
        out.append(Point(index=i, labels=labels, sets=sets))
    return out


__all__ = ["AUTO_FIELDS", "AutoPlan", "Point", "SweepSpec", "load_spec", "points"]
