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
keep: fastest                           # per cluster: fastest | cheapest | all (fastest:
                                        # the shortest step over goodput, restarts included)
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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config.reading import read_yaml
from ..config.validation import validation_error
from ..errors import UserError

AUTO_FIELDS = ("tp", "pp", "cp", "sharding", "micro_batch", "schedule", "recompute")
MAX_POINTS = 100_000

# The scenario fields each 'auto' choice sets (an axis may not set them too); enumerating TP,
# PP or CP also sets DP. (Sequence parallelism and a pipeline schedule from the base or an axis
# are kept where they apply.)
AUTO_PATHS: dict[str, tuple[str, ...]] = {
    "tp": ("parallelism.tp", "parallelism.dp"),
    "pp": ("parallelism.pp", "parallelism.dp"),
    "cp": ("parallelism.cp", "parallelism.dp"),
    "sharding": ("parallelism.sharding",),
    "micro_batch": ("training.micro_batch",),
    "schedule": ("parallelism.pp_schedule",),
    "recompute": ("parallelism.recompute",),
}


def _same(v: Any) -> Any:
    """A value as YAML means it: 1.0e11 and 100000000000 are the same number."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _same(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_same(x) for x in v]
    return v


def _overlap(a: str, b: str) -> bool:
    """Whether setting field path ``a`` and field path ``b`` touch the same field."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


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

    name: str = Field(
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the sweep's name (names its plots): letters, digits, '.', '_' and '-'",
    )
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
        default="fastest",
        description="which plan to keep per cluster when plans are enumerated: the fastest (the "
        "shortest step over goodput, as the days to train count it), the cheapest per token, or "
        "all",
    )

    @field_validator("axes")
    @classmethod
    def _one_key(cls, axes: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        seen: dict[str, int] = {}
        names: dict[str, int] = {}
        for i, ax in enumerate(axes):
            if len(ax) != 1:
                raise ValueError(f"axes[{i}] must have exactly one key (the path or axis name)")
            ((name, values),) = ax.items()
            if name in names:
                # each axis is one column of the output: a second of the same name would hide
                # the first's
                raise ValueError(
                    f"axes[{names[name]}] and axes[{i}] are both named '{name}': give each "
                    "axis its own name"
                )
            names[name] = i
            if not values:
                raise ValueError(f"axes[{i}] has no values")
            for v in values:
                odd = _not_plain(v)
                if odd is not None:
                    raise ValueError(
                        f"axes[{i}] value '{odd}' is a {type(odd).__name__}, not a number, "
                        "string, true/false, list or mapping: quote it if it is meant as text"
                    )
            texts = [json.dumps(_same(v), sort_keys=True, default=str) for v in values]
            for j, t in enumerate(texts):
                if t in texts[:j]:
                    raise ValueError(f"axes[{i}] repeats the value {t}: give each value once")
            for path in axis_paths(i, ax):
                for other, k in seen.items():
                    if k != i and _overlap(path, other):
                        raise ValueError(
                            f"axes[{k}] and axes[{i}] both set '{other}'"
                            + ("" if other == path else f" (as '{path}')")
                            + ": one axis per field"
                        )
                seen.setdefault(path, i)
        return axes

    @model_validator(mode="after")
    def _axes_leave_auto_fields_alone(self) -> SweepSpec:
        for i, ax in enumerate(self.axes):
            for path in axis_paths(i, ax):
                for f in self.auto():
                    if any(_overlap(path, q) for q in AUTO_PATHS[f]):
                        raise ValueError(
                            f"axes[{i}] sets '{path}', which parallelism.{f}: auto chooses for "
                            f"every point: drop the axis, or take {f} out of the sweep's "
                            "parallelism: auto"
                        )
        return self

    def auto(self) -> list[str]:
        return list(AUTO_FIELDS) if self.parallelism == "auto" else self.parallelism.fields()


def _not_plain(v: Any) -> Any:
    """The first part of an axis value that JSON cannot carry (a YAML date, binary or set),
    or None where it is all plain values."""
    if v is None or isinstance(v, str | bool | int | float):
        return None
    if isinstance(v, list):
        return next((o for o in map(_not_plain, v) if o is not None), None)
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return k
            odd = _not_plain(x)
            if odd is not None:
                return odd
        return None
    return v


def _scenario_fields() -> set[str]:
    from ..config.scenario import Scenario

    return set(Scenario.model_fields)


def _options(axis: dict[str, list[Any]], i: int = 0) -> tuple[str, list[dict[str, Any]]]:
    """An axis as (name, options): each option maps --set paths to values. A named axis (not a
    field path) has options that set field paths; an option of a field-path axis that is a
    mapping is that field's value (an inline profile, say)."""
    ((key, values),) = axis.items()
    fields = _scenario_fields()
    named = "." not in key and key not in fields
    out = []
    for j, v in enumerate(values):
        dotted = isinstance(v, dict) and [k for k in v if isinstance(k, str) and "." in k]
        if isinstance(v, dict) and v and (dotted or named):
            # a top-level field (model, software) is a path of one part
            plain = [str(k) for k in v if not (isinstance(k, str) and ("." in k or k in fields))]
            if plain:
                raise ValueError(
                    f"axes[{i}] '{key}' option {j} sets {', '.join(repr(k) for k in plain)}: "
                    "each key of a named axis's option is a field path, such as "
                    "cluster.pricing.tier"
                )
            out.append(dict(v))
        elif named:
            raise ValueError(
                f"axes[{i}] '{key}' is not a scenario field, so each of its options must map "
                "field paths to values, such as {cluster.nodes: 4, cluster.pricing.tier: spot}"
            )
        else:
            out.append({key: v})
    return key, out


def axis_paths(i: int, axis: dict[str, list[Any]]) -> list[str]:
    """Every field path the options of axis ``i`` set."""
    _, opts = _options(axis, i)
    return sorted({k for o in opts for k in o})


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
    if isinstance(data, dict) and "cluster" in data and "base" not in data:
        raise UserError(
            "this is a scenario (it has a cluster), not a sweep spec",
            file=str(p),
            hint="a sweep spec names its base scenario and axes: base: FILE, axes: [...]; "
            "run a scenario with clustersim simulate",
        )
    if isinstance(data, dict) and isinstance(data.get("axes"), dict) and data["axes"]:
        first = next(iter(data["axes"]))
        raise UserError(
            "axes is a list with one entry per axis, not a mapping",
            file=str(p),
            path="axes",
            hint=f"start each axis with a dash: axes: [{{{first}: [...]}}, ...], or in block "
            f"form '- {first}: [...]' under axes:",
        )
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, str(p), root=SweepSpec) from None
    if "\0" in spec.base:
        raise UserError(
            "the base scenario's path contains a NUL character",
            file=str(p),
            path="base",
            hint="give the path of the scenario file, relative to the spec",
        )
    base_path = (p.parent / spec.base).resolve()
    if not base_path.exists() and "/" not in spec.base and "\\" not in spec.base:
        # a bare name no file beside the spec has: a bundled scenario, as simulate takes one
        from ..catalog import bundled_scenarios_dir

        b, stem = bundled_scenarios_dir(), Path(spec.base).stem
        found = (b / spec.base, b / f"{spec.base}.yaml", b / f"{stem}.yaml")
        base_path = next((c.resolve() for c in found if c.is_file()), base_path)
    if not base_path.is_file():
        raise UserError(
            f"base scenario '{spec.base}' is a folder (looked at {base_path})"
            if base_path.is_dir()
            else f"base scenario '{spec.base}' is not a regular file (looked at {base_path})"
            if base_path.exists()
            else f"base scenario '{spec.base}' not found (looked for {base_path})",
            file=str(p),
            path="base",
            hint="give the scenario file's path relative to the sweep file, or a bundled "
            "scenario's name (clustersim simulate takes the same names)",
        )
    if base_path == p.resolve():
        raise UserError(
            "the sweep spec names itself as its base scenario",
            file=str(p),
            path="base",
            hint="give the scenario file the sweep varies",
        )
    base = read_yaml(base_path)
    if isinstance(base, dict) and "base" in base and "axes" in base and "cluster" not in base:
        raise UserError(
            f"base scenario '{spec.base}' is itself a sweep spec (base, axes), not a scenario",
            file=str(p),
            path="base",
            hint=f"name the scenario that sweep varies (its base: {base['base']!s:.200})",
        )
    from ..config.other_files import refuse_other_files

    refuse_other_files(base, str(base_path))  # a probe, a result, a trace, a profile
    _check_base(base, base_path, spec)
    return spec, base, base_path


def _check_base(base: Any, base_path: Path, spec: SweepSpec) -> None:
    """Faults of the base scenario no axis can mend, named in the base file before anything
    runs (they would otherwise fail every point and read as the axes' fault): not a mapping,
    a field the scenario format does not have (a typo), and a field's own fault (a value out
    of range, a section missing, a profile that does not exist) where no axis and no
    enumerated parallelism choice sets that field."""
    from ..config.loading import parse_scenario, resolve_dict

    if not isinstance(base, dict):
        raise UserError(
            "the base scenario is not a mapping of sections (name, cluster, model, ...)",
            file=str(base_path),
            hint="give the sweep a scenario file as its base",
        )

    def own_fault(err: UserError) -> bool:
        return err.path is not None and not set_by_points(spec, err.path)

    try:
        parse_scenario(base, str(base_path))
    except UserError as err:
        if "unknown field" in err.message or own_fault(err):
            raise
        return
    try:
        resolve_dict(base, file=str(base_path))
    except UserError as err:
        # (a fault between fields, such as a batch DP does not divide, is the points' own)
        named = "unknown" in err.message or "could not be loaded" in err.message
        if named and "profile" in err.message and own_fault(err):
            raise


def set_by_points(spec: SweepSpec, field: str) -> bool:
    """Whether the points set ``field`` (a field path), through an axis or an enumerated
    parallelism choice, rather than all take it from the base scenario."""
    mended = [p for i, a in enumerate(spec.axes) for p in axis_paths(i, a)]
    if spec.parallelism == "auto" or spec.parallelism.fields():
        mended += ["parallelism", "training.micro_batch"]
    return any(_overlap(field, m) for m in mended)


def points(spec: SweepSpec) -> list[Point]:
    axes = [_options(a, i) for i, a in enumerate(spec.axes)]
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


__all__ = [
    "AUTO_FIELDS",
    "AutoPlan",
    "Point",
    "SweepSpec",
    "axis_paths",
    "set_by_points",
    "load_spec",
    "points",
]
