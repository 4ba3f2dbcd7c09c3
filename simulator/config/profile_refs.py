"""A scenario's reference to a catalogue profile, resolved: the profile by name, with the
scenario's inline overrides merged over it field by field (a figure whole, with its value), or
a whole inline profile; each fault one :class:`~simulator.errors.UserError` naming the field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import UserError, colon_hint
from ..profile_inherit import merge_fields, scale_usable_memory
from .cluster import ProfileRef
from .validation import validation_error


def resolve_profile(
    ref: Any, cls: type[BaseModel], kinds: tuple[str, ...], file: str | None, path: str
) -> Any:
    from ..catalog import get_profile

    if isinstance(ref, str):
        ref = ProfileRef(profile=ref)
    overrides = dict(ref.model_extra or {})
    if "kind" in overrides and overrides["kind"] not in kinds:
        raise UserError(
            f"this slot takes a {' or '.join(kinds)} profile (got kind {overrides['kind']!r})",
            file=file,
            path=f"{path}.kind",
            hint="leave kind out (the slot sets it), or move the profile to its own slot",
        )
    if ref.profile is None:
        data = {"kind": kinds[0], **overrides}
    else:
        try:
            base = get_profile(ref.profile, *kinds)
        except UserError as err:
            raise err.located(file, f"{path}.profile" if overrides else path) from None
        if not overrides:
            return base
        if "kind" in overrides and overrides["kind"] != base.kind:  # type: ignore[attr-defined]
            raise UserError(
                f"profile '{ref.profile}' is a {base.kind} profile; kind cannot make it a "  # type: ignore[attr-defined]
                f"{overrides['kind']}",
                file=file,
                path=f"{path}.kind",
                hint="leave kind out, or name a profile of that kind",
            )
        dumped = base.model_dump(mode="json")
        data = merge_fields(dumped, overrides, file, path)
        scale_usable_memory(dumped, data, overrides)
        _one_bucket_rule(data, overrides)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        figure = _figure_given_in_parts(exc, data)
        if figure is not None:
            where, got = figure
            raise UserError(
                f"this figure is given whole, its value with its source (got {got})",
                file=file,
                path=f"{path}.{where}",
                hint=f"give {path}.{where} whole: {{value: ..., source: 'where it comes from'}}",
            ) from None
        problem = validation_error(exc, file, path, cls)
        first = problem.message.split(" ", 1)[0]
        if problem.path == path and _has_path(data, first):
            # A figure out of its range (checked on the whole profile): name the figure.
            problem = UserError(
                problem.message, file=problem.file, path=f"{path}.{first}", hint=problem.hint
            )
        colon = next((k for k in overrides if ":" in str(k)), None)
        if colon is not None:
            hint = f"{colon_hint(str(colon))}, not '{colon}'"
            problem = UserError(problem.message, file=problem.file, path=problem.path, hint=hint)
        elif ref.profile is None and any(e["type"] == "missing" for e in exc.errors()):
            # a mapping of a few fields meant as changes to a catalogue profile
            few = "".join(f", {k}: ..." for k in list(overrides)[:2] if k != "kind")
            hint = (
                f"to change a catalogue profile, name it: {{profile: NAME{few}}} (clustersim "
                "profiles lists them); without profile the mapping must be a whole profile"
            )
            problem = UserError(problem.message, file=problem.file, path=problem.path, hint=hint)
        raise problem from None


def _figure_given_in_parts(exc: ValidationError, data: Any) -> tuple[str, Any] | None:
    """Where a figure (``{value, source}``) was given as a mapping of other keys (``--set
    software.pp_schedules.x=1f1b``, a figure the base leaves out): its dotted path and what was
    given; ``None`` otherwise (the generic message then says "add the field value")."""
    errs = exc.errors()
    for e in errs:
        loc = e["loc"]
        if e["type"] != "missing" or not loc or loc[-1] != "value":
            continue
        stray = [
            x["loc"][-1]
            for x in errs
            if x["type"] == "extra_forbidden" and x["loc"][:-1] == loc[:-1]
        ]
        if stray:
            got = data
            for k in loc[:-1]:
                got = got.get(k) if isinstance(got, dict) else None
            return ".".join(str(k) for k in loc[:-1]), got
    return None


def _has_path(data: Any, dotted: str) -> bool:
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def _one_bucket_rule(data: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A software profile sizes its DP buckets one way: in MB or by Megatron-Core's rule in
    parameters. An override giving one drops the base profile's other."""
    rule = ("dp_bucket_params", "dp_bucket_params_per_dp_rank")
    if "dp_bucket_mb" in overrides and not any(k in overrides for k in rule):
        for k in rule:
            data.pop(k, None)
    elif any(k in overrides for k in rule) and "dp_bucket_mb" not in overrides:
        data.pop("dp_bucket_mb", None)


__all__ = ["resolve_profile"]
