"""A profile file that starts from another: ``base: NAME`` takes every field of the profile
NAME (of the same kind, from the same profile folders) and the file's own fields over them, so
that a variant (a stack with one switch changed, a GPU at another memory size) is a few lines
that later corrections of its base reach. A figure given in the file replaces the base's whole
(its value and its source together); a section (``overlap``, ``efficiency``) is merged field by
field."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import UserError, closest

# bases of bases, at most this deep (a chain longer than this is a loop or a mistake)
MAX_DEPTH = 8


def merge_fields(
    base: dict[str, Any], own: dict[str, Any], file: str | None = None, path: str = ""
) -> dict[str, Any]:
    """``own`` over ``base``: sections merged field by field, a figure (value and source
    together), a name or a list replaced whole. A figure given without its value
    (``{source: ...}`` or ``{}``) would keep the base's number under the new source: refused,
    naming it (``path``: where ``own`` sits)."""
    out = dict(base)
    for key, value in own.items():
        old = out.get(key)
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, dict) and isinstance(old, dict) and "value" not in value:
            if "value" in old:
                raise UserError(
                    f"this override of a figure gives no value (got {value}): the profile's "
                    f"{old['value']!r} would be kept under it",
                    file=file,
                    path=where,
                    hint="give the figure whole, {value: NUMBER, source: 'where it comes "
                    "from'}, or leave the field out to keep the profile's",
                )
            out[key] = merge_fields(old, value, file, where)
        else:
            out[key] = value
    return out


def scale_usable_memory(
    base: dict[str, Any], data: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """A what-if GPU with another datasheet capacity exposes the same share of it: the base
    profile's usable memory scales with an overridden ``memory_gb`` unless that is given too
    (an inline override, or a profile file with ``base:``)."""
    usable, mem = base.get("memory_usable_gb"), base.get("memory_gb")
    if not (isinstance(usable, dict) and isinstance(mem, dict)) or "memory_usable_gb" in overrides:
        return
    new = data.get("memory_gb")
    new_value = new.get("value") if isinstance(new, dict) else new
    if "memory_gb" not in overrides or not isinstance(new_value, int | float):
        return
    try:
        float(new_value)
    except OverflowError:
        return  # the profile's own validation refuses it, naming the field
    share = usable["value"] / mem["value"]
    data["memory_usable_gb"] = {
        "value": usable["value"] * float(new_value) / mem["value"],
        "source": f"the base profile's usable share of memory_gb ({share:.4f}) applied to "
        "the overridden memory_gb",
    }


def with_base(
    data: Any,
    path: Path,
    find: Callable[[str, Path], Path | None],
    read: Callable[[Path], Any],
    names: Callable[[], list[str]],
    seen: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
) -> Any:
    """``data`` (a profile file's mapping) with its ``base`` merged under it; ``find`` gives a
    profile's file by name as the file ``path`` sees it (a file that names its own profile
    as its base starts from the one it replaces), ``read`` a file's mapping, ``names`` the
    profiles there are (for a suggestion)."""
    if not isinstance(data, dict) or "base" not in data:
        return data
    name = data.get("base")
    if not isinstance(name, str) or not name.strip():
        raise UserError(
            "expected a profile name",
            file=str(path),
            path="base",
            hint="give the name of the profile this one starts from, e.g. base: megatron-core",
        )
    own = {k: v for k, v in data.items() if k != "base"}
    chain = (*seen, str(data.get("name", path.stem)))
    files = (*files, os.path.realpath(path))
    found = find(name, path)
    if found is None:
        if name == path.stem:
            raise UserError(
                f"'{name}' names this profile itself, and no other profile of that name is "
                "there for it to start from (a local copy may start from the bundled one it "
                "replaces)",
                file=str(path),
                path="base",
                hint="name the profile this one starts from, or drop base:",
            )
        near = closest(name, names())
        raise UserError(
            f"no profile '{name}' to start from",
            file=str(path),
            path="base",
            hint=f"did you mean {', '.join(near)}?" if near else "see `clustersim profiles list`",
        )
    if os.path.realpath(found) in files:
        raise UserError(
            f"'{name}' leads back to this profile ({' -> '.join((*chain, name))})",
            file=str(path),
            path="base",
            hint="start the profiles from one that names no base",
        )
    if len(chain) > MAX_DEPTH:
        raise UserError(
            f"the chain of bases is more than {MAX_DEPTH} profiles deep "
            f"({' -> '.join((*chain, name))})",
            file=str(path),
            path="base",
            hint=f"start this profile from one at most {MAX_DEPTH} bases from a profile that "
            "names no base",
        )
    base = with_base(read(found), found, find, read, names, chain, files)
    if not isinstance(base, dict):
        raise UserError(f"'{name}' ({found}) is not a profile", file=str(path), path="base")
    if base.get("kind") != own.get("kind", base.get("kind")):
        raise UserError(
            f"'{name}' is a {base.get('kind')} profile, this one a {own.get('kind')}",
            file=str(path),
            path="base",
            hint="start from a profile of the same kind",
        )
    kept = {k: v for k, v in base.items() if k not in ("name", "display_name", "description")}
    merged = merge_fields(kept, own, str(path))
    scale_usable_memory(kept, merged, own)
    merged.setdefault("description", f"a variant of {name}")
    return merged


def read_profile_data(path: Path, shipped: bool) -> Any:
    """A profile file's mapping as YAML reads it; an exit-2 error naming the file otherwise."""
    import yaml

    from .config.yamlio import MAX_BYTES, YamlLimit, load_text, read_file_text

    try:
        return load_text(read_file_text(path, 4 * MAX_BYTES), shipped)
    except YamlLimit as exc:
        raise UserError(
            f"refused: the file {exc}", file=str(path), hint="fix or remove the profile file"
        ) from None
    except OSError as exc:  # a broken link, a file removed or unreadable
        why = "a link that leads to no file" if path.is_symlink() else exc.strerror
        raise UserError(
            f"cannot read the profile file: {why}",
            file=str(path),
            hint="fix or remove the profile file",
        ) from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: bad date, not UTF-8
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(
            f"not valid YAML{where}: {problem}", file=str(path), hint="fix the profile file"
        ) from None
