"""Turns pydantic validation errors into one :class:`~simulator.errors.UserError`: the file,
the field path as the user wrote it, and a hint (closest field names, allowed values)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import UserError, closest, colon_hint
from .scenario import Scenario


def _loc(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(str(item))
    return "".join(parts)


def _model_names() -> frozenset[str]:
    """The class names of every pydantic model defined so far: pydantic names a union member by
    its class in an error's location (a user's own key, Cluster or NODES, is not one of them).
    Not cached: a model module imported later (the sweep spec's AutoPlan) must count too."""
    names: set[str] = set()
    todo: list[type[BaseModel]] = [BaseModel]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__name__ not in names:
                names.add(sub.__name__)
                todo.append(sub)
    return frozenset(names)


# pydantic puts union-member and discriminator tags into the location; users never see those.
_TAGS = frozenset(
    {"str", "ProfileRef", "ModelPresetRef", "ModelSpec", "int", "function-after[_check()]", "[key]"}
)


def _is_tag(item: Any, names: frozenset[str]) -> bool:
    """Whether a location item is one of pydantic's tags; ``names``: :func:`_model_names`."""
    return isinstance(item, str) and (
        item in _TAGS
        or item.startswith("function-")
        or item.startswith("constrained-")
        or item.startswith("literal[")
        # a union member's class name (AutoPlan, PricingSpec...)
        or item in names
    )


# Fields that take a profile by name (``profile`` inside a slot names the slot's kind), for
# the message when they get something else: which kind of profile.
_PROFILE_SLOTS = {
    "gpu": "GPU",
    "fabric": "fabric",
    "storage": "storage",
    "software": "software",
    "profile": None,
}

_HINTS = {
    "extra_forbidden": "remove the field or fix its spelling",
    "missing": "add the field",
    "literal_error": "use one of the allowed values",
    "union_tag_invalid": "set 'kind' to one of the allowed values",
    "invalid_key": "write the field's name; YAML reads an unquoted true, no, on or a number as a "
    "value, so quote a key meant as text",
    "bool_type": "write true or false, without quotes",
}


# A profile slot left out: an example of what goes there.
_PROFILE_EXAMPLES = {
    "cluster.gpu": "h100-sxm-80gb",
    "cluster.fabric": "nvlink4-nvswitch",
    "cluster.storage": "local-nvme",
}


# Long names people write for the parallelism degrees (difflib would suggest the wrong field).
_SYNONYMS = {
    f"{word}_{suffix}": short
    for word, short in (("data", "dp"), ("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"))
    for suffix in ("parallel", "parallelism", "parallel_size", "model_parallel_size")
}


def validation_error(
    exc: ValidationError, file: str | None, prefix: str = "", root: Any = None
) -> UserError:
    """One message for a pydantic error (the first problem, and how many more there are).

    ``root`` is the model that was validated (default: the scenario), for field-name hints."""
    root = root or Scenario
    errors = exc.errors(include_url=False)

    # A field missing beside an unknown one that resembles it is that field misspelt: name the
    # misspelling (with its 'did you mean'), not the gap it leaves.
    missing_at: dict[tuple[Any, ...], list[str]] = {}
    for e in errors:
        if e["type"] == "missing" and e["loc"]:
            missing_at.setdefault(tuple(e["loc"][:-1]), []).append(str(e["loc"][-1]))

    def rank(e: Any) -> tuple[bool, bool, bool, int]:
        # Prefer the most specific error: unions report one error per member. A mapping without
        # `preset` is an inline architecture: report its problems, not the missing preset.
        ref_missing = e["type"] == "missing" and "ModelPresetRef" in e["loc"]
        typo = (
            e["type"] == "extra_forbidden"
            and bool(e["loc"])
            and bool(closest(str(e["loc"][-1]), missing_at.get(tuple(e["loc"][:-1]), [])))
        )
        return (e["type"] == "string_type", ref_missing, not typo, -len(e["loc"]))

    errors.sort(key=rank)
    err = errors[0]
    # the last item of an unknown or invalid key is the user's own key, never a union tag
    own_key = err["type"] in ("extra_forbidden", "invalid_key") and bool(err["loc"])
    loc, holder = _walk(tuple(err["loc"]), root, keep_last=own_key)
    if err["type"] == "invalid_key":
        loc = loc[:-1]
    path = _loc(((prefix,) if prefix else ()) + loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        name = str(loc[-1]) if loc else ""
        # (a name with control characters, a NUL from a script, shown escaped)
        msg = f"unknown field '{name if name.isprintable() else repr(name)[1:-1]}'"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "invalid_key":
        key = err.get("input", err["loc"][-1])
        shown = str(key).lower() if isinstance(key, bool) else repr(key)  # as YAML wrote it
        msg = f"the key {shown} is not a field name (a number or true/false, not a word)"
    elif err["type"] in ("model_type", "dict_type") and not isinstance(err.get("input"), dict):
        got = repr(err.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        expected = {
            "Sourced": "a number, or {value: NUMBER, source: TEXT}",
            "Flag": "true or false, or {value: BOOL, source: TEXT}",
            "NetworkSpec": "a network profile name, or {profile: NAME, nics_per_node: N, ...}",
            "PricingSpec": "a price profile name, or {profile: NAME, tier: ...}",
            "SelectivePolicy": "{value: attention_core or alternate_matmuls, source: TEXT}",
            "SoftmaxUpcast": "{value: scores_scaled, scores or output, source: TEXT}",
            "Schedules": "{value: [1f1b, interleaved, gpipe], source: TEXT}",
            "ZeroCap": "{value: 0 to 3, source: TEXT}",
        }.get((err.get("ctx") or {}).get("class_name", ""), "a mapping of fields")
        slot = path.rpartition(".")[2]
        if expected == "a mapping of fields" and slot in _PROFILE_SLOTS:
            kind = _PROFILE_SLOTS[slot] or path.split(".")[-2]
            expected = f"a {kind} profile name (or {{profile: NAME, ...}} to override its figures)"
        msg = f"expected {expected} here (got {got})"
    elif (
        "input" in err
        and err["type"] not in ("model_type", "dict_type")
        and not isinstance(err["input"], dict)
    ):
        got = repr(err["input"])
        msg = f"{msg} (got {got if len(got) <= 80 else got[:77] + '...'})"
    hint = _HINTS.get(err["type"], "fix the value")
    if err["type"] in ("union_tag_not_found", "union_tag_invalid"):
        given = err.get("input")
        tags = (err.get("ctx") or {}).get("expected_tags")
        msg = "gives no known kind" + (f" (kinds: {tags})" if tags else "")
        if isinstance(given, dict) and any(":" in str(k) for k in given):
            hint = (
                "put a space after each colon, {kind: zero, stage: 1}: YAML reads "
                "{kind:zero} as one key"
            )
        else:
            hint = "give its kind with its fields, e.g. {kind: ...} (clustersim schema)"
    elif err["type"] == "model_attributes_type":
        got = repr(err.get("input"))
        msg = f"expected a mapping of fields here (got {got[:80]})"
    if path.endswith("sharding") and err["type"] in ("model_attributes_type", "dict_type"):
        hint = "to shard nothing: {kind: zero, stage: 0}"
    if err["type"] == "missing" and path.endswith("sharding.stage"):
        hint = "give the ZeRO stage: {kind: zero, stage: 1} (0 shards nothing, 3 shards weights)"
    if err["type"] == "missing" and path in _PROFILE_EXAMPLES:
        hint = (
            f"add {path}: NAME, a profile name such as {_PROFILE_EXAMPLES[path]} "
            "(clustersim profiles lists them)"
        )
    if err["type"] == "value_error" and "must be divisible by" in msg:
        hint = "give values that divide: hidden a multiple of heads, heads of kv_heads"
    elif err["type"] in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        hint = "give a value in the allowed range"
    if "needs its source" in msg:
        hint = (
            f"write it as {{value: {err.get('input')!r}, source: '...'}}, saying where it is from"
        )
    elif "does not say where the figure comes from" in msg:
        hint = "write the datasheet, paper table or probe run the figure comes from"
    elif err["type"] == "string_pattern_mismatch" and path.endswith("name"):
        given = str(err.get("input", ""))
        if getattr(holder, "__name__", "") != "SweepSpec":  # a profile's name (a file's)
            msg = f"a profile name is lower-case letters, digits, '.', '_' and '-' (got {given!r})"
            fixed = re.sub(r"[^a-z0-9._-]+", "-", given.lower()).strip("-._")
            hint = f"use {fixed} (in the file's name and its name: field)" if fixed else hint
        else:  # a sweep's name: any case, and no file of that name
            msg = f"a name is letters, digits, '.', '_' and '-' (got {given!r})"
            fixed = re.sub(r"[^A-Za-z0-9._-]+", "-", given).strip("-._")
            hint = f"use {fixed}" if fixed else hint
    if isinstance(err.get("input"), bool) and err["type"] in ("literal_error", "string_type"):
        # YAML 1.1 reads no/yes/on/off (unquoted) as false/true
        hint = (
            "YAML reads an unquoted no, yes, on or off as false or true: quote the word "
            "('no') where a name is meant"
        )
        allowed = (err.get("ctx") or {}).get("expected")
        if err["type"] == "literal_error" and allowed:
            hint = f"write one of {allowed} ({hint})"
    if err["type"] == "extra_forbidden" and loc:
        fields = list(getattr(holder, "model_fields", {}))
        same = [f for f in fields if f.lower() == str(loc[-1]).lower()]  # only the case differs
        near = same or closest(str(loc[-1]), fields)
        synonym = _SYNONYMS.get(str(loc[-1]).lower())
        if synonym is not None and synonym in fields:
            near = [synonym]
        if ":" in str(loc[-1]):
            # YAML reads "layers:12" (no space after the colon) as one key
            hint = f"{colon_hint(str(loc[-1]))}, not '{loc[-1]}'"
        elif near:
            hint = f"did you mean '{near[0]}'?"
        elif (
            "kind" in fields
            and len(err["loc"]) >= 2
            and err["loc"][-2] == getattr(holder.model_fields["kind"], "default", None)
        ):
            # a field of another kind of a tagged union, left behind when the kind changed (a
            # --set of pp_schedule.kind=1f1b on a file that gives virtual_stages)
            hint = (
                f"'{loc[-1]}' is not a field of this kind: drop it, or, with --set, give the "
                f"whole mapping: --set '{path.rpartition('.')[0]}={{kind: ...}}'"
            )
        elif "profile" in fields:
            # {profile: NAME, ...} holds the slot's own settings; the profile's figures are
            # overridden inside the profile itself
            parent = path.rpartition(".")[0]
            hint = (
                f"a figure of the profile is set inside it: {parent}.profile.{loc[-1]} (an "
                "inline override); else fix the spelling"
            )
    # Other problems, not counting the other forms of the same union field failing (a model
    # given as a mapping is not also a wrong preset name).
    where, branch = _union_point(tuple(err["loc"]))
    others = [
        e
        for e in errors
        if not (
            branch is not None
            and _union_point(tuple(e["loc"]))[0] == where
            and _union_point(tuple(e["loc"]))[1] != branch
        )
    ]
    more = len({_loc(_walk(tuple(e["loc"]), root)[0]) for e in others}) - 1
    if more > 0:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return UserError(msg, file=file, path=path or None, hint=hint)


def _union_point(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
    """Where a union's member tag first appears in ``loc`` (the path before it) and the tag
    (None where the location has no union member)."""
    names = _model_names()
    for i, item in enumerate(loc):
        if _is_tag(item, names):
            return loc[:i], item
    return loc, None


def _walk(loc: tuple[Any, ...], root: Any, keep_last: bool = False) -> tuple[tuple[Any, ...], Any]:
    """``loc`` without pydantic's union-member and discriminator tags, and the model that holds
    its last field (for 'did you mean' hints; None where the schema has no model there). A
    union member's tag (``ModelSpec``, ``function-after[_check(), ModelSpec]``) picks that
    member as the model of the field before it."""
    out: list[Any] = []
    model: Any = root
    holder: Any = root
    members: list[type[BaseModel]] = []
    raw = list(loc)
    names = _model_names()
    i = 0
    while i < len(raw):
        item = raw[i]
        i += 1
        last = keep_last and i == len(raw)
        if not last and _is_tag(item, names):  # a union member's tag
            named = [m for m in members if isinstance(item, str) and m.__name__ in _names(item)]
            if named:
                model = named[-1]
            continue
        out.append(item)
        if isinstance(item, int):
            continue
        holder = model
        fields = getattr(model, "model_fields", {}) if model is not None else {}
        if item not in fields:
            model, members = None, []
            continue
        members = _models_in(fields[item].annotation)
        model = members[0] if members else None
        tagged = {_tag(m): m for m in members if _tag(m)}
        if len(tagged) > 1 and i < len(raw) and raw[i] in tagged:
            model = tagged[raw[i]]  # a discriminated union: skip the member's tag
            i += 1
    return tuple(out), holder


def _names(tag: str) -> set[str]:
    """The class names a union member's tag mentions (``function-after[_check(), ModelSpec]``
    names ModelSpec)."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tag))


def _models_in(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    found: list[type[BaseModel]] = []
    for arg in getattr(ann, "__args__", ()) or ():
        found += _models_in(arg)
    return found


def _tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    default = field.default if field is not None else None
    return default if isinstance(default, str) else None
