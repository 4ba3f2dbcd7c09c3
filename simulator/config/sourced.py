"""Sourced figures, the building block of every profile: a number with where it comes from
(:class:`Sourced`, written ``{value, source}``), a sourced yes/no (:class:`Flag`), and the base
class of all profiles, which checks each figure against its physical range (:mod:`.bounds`).
A bare number or boolean is accepted where a scenario overrides a field inline; it is then
recorded as an inline override."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, Generic, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .bounds import check_figures, document_ranges

INLINE_SOURCE = "inline override in scenario"


# A profile file's source that says nothing of where the figure comes from.
_PLACEHOLDER = re.compile(
    r"\b(todo|tbd|tbc|fixme|xxx)\b|^\W*(n/?a|unknown|none|\?+|estimate|source)\W*$"
)
MIN_SOURCE_CHARS = 10


def _real_source(v: str, info: ValidationInfo) -> str:
    """In a profile file, a source names a datasheet, a paper table, a probe run or the
    reasoning behind an estimate: at least MIN_SOURCE_CHARS characters and two words, no
    placeholder."""
    if info.context and info.context.get(PROFILE_FILE):
        text = v.strip()
        # (two words at least: 'xxxxxxxxxxxx' or 'datasheet2024' names nothing one can find)
        words = len(re.findall(r"[^\W\d_]{2,}", text))
        if len(text) < MIN_SOURCE_CHARS or _PLACEHOLDER.search(text.lower()) or words < 2:
            raise ValueError(
                "the source does not say where the figure comes from: name the datasheet, "
                "paper table or probe run (or, for an estimate, 'estimate: ' and the reasoning)"
            )
    return v


class Sourced(BaseModel):
    """A number with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    value: float = Field(strict=True)
    source: str = Field(
        min_length=3, max_length=4000, description="datasheet, paper table or probe run"
    )
    note: str | None = Field(default=None, max_length=4000)

    _source = field_validator("source")(_real_source)

    def __float__(self) -> float:
        return float(self.value)


T = TypeVar("T")


class Cited(BaseModel, Generic[T]):
    """A value other than a figure (a count, a choice of kernel), with where it is
    documented: ``Cited[int]``, or a constrained type as its parameter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: T
    source: str = Field(min_length=3, max_length=4000)

    _source = field_validator("source")(_real_source)


PROFILE_FILE = "profile_file"
"""Validation context key: set while a profile file is read, where every figure must say
where it comes from (a bare number is an inline override only in a scenario)."""

NEEDS_SOURCE = (
    "a figure in a profile file needs its source: {value: ..., source: '...'} (a datasheet, "
    "a paper table or a probe run)"
)


def _coerce_sourced(v: Any, info: ValidationInfo) -> Any:
    if isinstance(v, bool):
        return v
    raw = v.get("value") if isinstance(v, dict) else v
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > sys.float_info.max:
        raise ValueError("the number is too large for a figure")
    if isinstance(v, int | float):
        if info.context and info.context.get(PROFILE_FILE):
            raise ValueError(NEEDS_SOURCE)
        return {"value": float(v), "source": INLINE_SOURCE}
    return v


Num = Annotated[Sourced, BeforeValidator(_coerce_sourced)]
"""A sourced figure; a bare number becomes an inline override."""


class Flag(BaseModel):
    """A yes/no property of a profile (a framework's switch, a fabric's protocol), with where
    it is documented."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: StrictBool
    source: str = Field(min_length=3)

    _source = field_validator("source")(_real_source)


def bare_inline(
    accepts: type | tuple[type, ...], what: str
) -> Callable[[Any, ValidationInfo], Any]:
    """A validator that takes a bare value of type ``accepts`` (or of one of a tuple of types:
    a ``--set`` or a scenario's inline override) as ``{value, source: inline}``; a profile file
    must give the source of ``what`` it states."""

    def coerce(v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, accepts):
            if info.context and info.context.get(PROFILE_FILE):
                raise ValueError(NEEDS_SOURCE.replace("a figure", what))
            return {"value": v, "source": INLINE_SOURCE}
        return v

    return coerce


SourcedFlag = Annotated[Flag, BeforeValidator(bare_inline(bool, "a yes/no"))]
"""A sourced yes/no; a bare true/false becomes an inline override."""


class _Profile(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, json_schema_extra=document_ranges
    )

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="name scenarios refer to")
    display_name: str = Field(max_length=200)
    description: str | None = Field(default=None, max_length=4000)

    @model_validator(mode="after")
    def _check_ranges(self) -> _Profile:
        check_figures(self)
        return self
