"""Checks of a sweep spec's axes against the scenario schema, before anything is written: a
field path that leaves the schema (:func:`unknown_field`), an axis value its field never
accepts (:func:`check_axis_values`), and fields of the base an axis drops
(:func:`dropped_by_axes`); and whether any point keeps a token budget
(:func:`tokens_reachable`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from ..errors import UserError
from .spec import SweepSpec, _options, _set_expr


def unknown_field(path: str) -> str | None:
    """Where ``path`` leaves the scenario's schema: None if every part names a field (or goes
    below a field that is no fixed model, such as an inline profile), else the first unknown
    part with the fields that were possible there."""
    import difflib
    import types
    import typing

    from pydantic import BaseModel

    from ..config.scenario import Scenario

    def models(ann: Any) -> list[type[BaseModel]] | None:
        """The model classes an annotation allows; None if it allows anything else too."""
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            return models(typing.get_args(ann)[0])
        if origin in (typing.Union, types.UnionType):
            out: list[type[BaseModel]] = []
            for a in typing.get_args(ann):
                if a is type(None):
                    continue
                sub = models(a)
                if sub is None:
                    return None
                out += sub
            return out
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return [ann]
        return None

    current: list[type[BaseModel]] | None = [Scenario]
    done: list[str] = []
    for part in path.split("."):
        if current is None:
            return None
        fields = {name: f for m in current for name, f in m.model_fields.items()}
        if part not in fields:
            near = difflib.get_close_matches(part, list(fields), n=1)
            where = ".".join(done) or "the scenario"
            if "profile" in fields and not near:
                # {profile: NAME, ...} holds the slot's own settings; the profile's figures
                # are overridden inside the profile itself
                return (
                    f"unknown field '{part}' in {where}: a figure of the profile is set inside "
                    f"it, as {where}.profile.{part} (an inline override)"
                )
            return f"unknown field '{part}' in {where}" + (
                f" (did you mean '{near[0]}'?)" if near else ""
            )
        done.append(part)
        current = models(fields[part].annotation)
    return None


# Pydantic error types that say a value is wrong in itself (its type, range or choice), so no
# other axis can make it valid; a missing or extra field may depend on another axis's choice.
_INTRINSIC = (
    "_type",
    "_parsing",
    "greater_than",
    "less_than",
    "literal_error",
    "enum",
    "finite_number",
    "too_long",
    "too_short",
    "multiple_of",
    "from_float",
)


def _own_figure(opt: dict[str, Any], err: UserError) -> bool:
    """Whether ``err`` is a figure out of range (or not a number) that an axis value sets, by its
    path or inside a section it gives whole (``cluster.gpu.power_limit_w: -5``, ``cluster.gpu:
    {profile: ..., memory_gb: -1}``): the value's own fault, whatever the other axes choose."""
    own = ("must be within", "gives no value", "expected a number")
    for field, value in opt.items():
        at = err.path or ""
        if at == field and any(t in err.message for t in own):
            return True  # the figure the axis sets itself (cluster.gpu.power_limit_w: -5)
        if not isinstance(value, dict) or not at.startswith(field + "."):
            continue
        inner = at[len(field) + 1 :].split(".")[0]
        if inner in value and any(t in err.message for t in own):
            return True
    return False


def check_axis_values(spec: SweepSpec, base: dict[str, Any], file: str) -> None:
    """Refuse an axis value its field never accepts (a string for a count, a count of 0), each
    tried alone on the base scenario, before anything is written: a point whose layout only
    fails to divide is a row of the sweep's answer, but a value of the wrong type is a typo."""
    from ..config.loading import resolve_dict
    from ..config.reading import apply_sets
    from ..config.scenario import Scenario

    for i, opt, sets in _option_sets(spec):
        which = ", ".join(opt)
        try:
            data = apply_sets(base, sets, file)
        except UserError as err:
            # A path that cannot be set (an empty part, a list item, a field inside a number)
            # is refused whatever the other axes choose.
            raise UserError(
                f"axis '{which}': {err.message.replace('--set ', '')}",
                file=file,
                path=f"axes[{i}]",
                hint=(err.hint or "").replace("--set ", "") or "give a scenario field path",
            ) from None
        try:
            Scenario.model_validate(data)
            resolve_dict(data)
        except UserError as err:
            # A profile or preset no catalogue has is a typo whatever the other axes say;
            # anything else (a layout that does not divide) may depend on them.
            if err.message.startswith("unknown ") and "'" in err.message:
                raise UserError(
                    f"axis '{which}': {err.message}",
                    file=file,
                    path=f"axes[{i}]",
                    hint=err.hint or "see `clustersim profiles list`",
                ) from None
            if _own_figure(opt, err):
                raise UserError(
                    f"axis '{which}': {err.message}",
                    file=file,
                    path=f"axes[{i}]",
                    hint="fix or drop the value (every point with it would be invalid)",
                ) from None
            continue  # a path the set machinery refuses is reported per point
        except ValidationError as exc:
            for e in exc.errors():
                loc = ".".join(str(x) for x in e["loc"])
                field = next((k for k in opt if loc == k or loc.startswith(k + ".")), None)
                if field and any(t in e["type"] for t in _INTRINSIC):
                    raise UserError(
                        f"axis '{field}' value {json.dumps(opt[field])[:80]}: {e['msg']}",
                        file=file,
                        path=f"axes[{i}]",
                        hint="fix or drop the value (every point with it would be invalid)",
                    ) from None


def dropped_by_axes(spec: SweepSpec, base: dict[str, Any]) -> list[str]:
    """Fields of the base scenario an axis option drops by replacing their whole section (a
    GPU named where the base gives its profile and a power limit): one line each, said once
    per axis, so that a sweep never runs without them unannounced."""
    from ..config.reading import replaced_fields

    out: list[str] = []
    for i, _, sets in _option_sets(spec):
        for line in replaced_fields(base, sets):
            if f"axes[{i}]: {line}" not in out:
                out.append(f"axes[{i}]: {line}")
    return out


def _option_sets(spec: SweepSpec) -> Iterator[tuple[int, dict[str, Any], list[str]]]:
    """Each axis option as (axis index, the option, its --set expressions)."""
    for i, axis in enumerate(spec.axes):
        for opt in _options(axis, i)[1]:
            yield i, opt, [_set_expr(k, v) for k, v in opt.items()]


def tokens_reachable(spec: SweepSpec, base: dict[str, Any]) -> bool:
    """Whether some point of the sweep has a token budget (run.tokens): the base scenario's,
    unless an axis option replaces the whole ``run`` section without one, or an axis's own."""

    def effect(opt: dict[str, Any]) -> bool | None:
        # (a section is set before the fields inside it, whatever the option's order)
        if "run.tokens" in opt:
            return opt["run.tokens"] is not None
        if "run" in opt:
            run = opt["run"]
            return isinstance(run, dict) and run.get("tokens") is not None
        return None

    states = {(base.get("run") or {}).get("tokens") is not None}
    for i, axis in enumerate(spec.axes):
        reached: set[bool] = set()
        for opt in _options(axis, i)[1]:
            e = effect(opt)
            reached |= states if e is None else {e}
        states = reached
    return True in states


__all__ = ["check_axis_values", "dropped_by_axes", "tokens_reachable", "unknown_field"]
