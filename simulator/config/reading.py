"""Reading scenario text: a YAML file within the loader's bounds, and ``--set`` overrides.

Every problem becomes one :class:`~simulator.errors.UserError` naming the file (and, for
``--set``, the override) and what to do.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError, colon_hint
from .yamlio import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    YamlDuplicateKey,
    YamlLimit,
    YamlTooLarge,
    check_text,
    load_text,
    read_file_text,
)


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = read_file_text(path, 4 * MAX_BYTES)  # past MAX_BYTES load_text says why
    except YamlLimit as exc:
        big = isinstance(exc, YamlTooLarge)
        raise UserError(
            f"refused: the file {exc}",
            file=str(path),
            hint="a scenario or sweep spec is a few kB of YAML: check the file given"
            if big
            else "give a YAML file",
        ) from None
    except OSError as exc:
        raise UserError(
            f"cannot read file: {exc.strerror}",
            file=str(path),
            hint="check the path and its permissions",
        ) from None
    except UnicodeDecodeError:
        raise UserError(
            "not a UTF-8 text file", file=str(path), hint="save the file as UTF-8 YAML"
        ) from None
    data = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise UserError(
            "the file must be a YAML mapping: a scenario (cluster:, model:, training:, ...) "
            "or a sweep spec (name:, base:, axes:)",
            file=str(path),
            hint="see scenarios/ and scenarios/sweeps/ for examples, or `clustersim schema`",
        )
    return data


def _glued_key(text: str, line: int) -> str | None:
    """A hint for "micro_batch:1" (no space after the colon): one scalar to YAML, not a key, so
    the block mapping around it breaks at or just before the line YAML names (0-based)."""
    lines = text.splitlines()
    for no in (line, line - 1):
        glued = (
            re.match(r"\s*([A-Za-z_][\w.]*):(\S.*)$", lines[no]) if 0 <= no < len(lines) else None
        )
        if glued and not glued.group(2).startswith(("/", "\\")):  # not a URL or a path
            return f"{colon_hint(glued.group(0).strip())} (line {no + 1})"
    return None


def parse_yaml(text: str, file: str | None) -> Any:
    """One YAML document within the loader's bounds, every string valid Unicode."""
    try:
        data = load_text(text)
        check_text(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if isinstance(exc, yaml.reader.ReaderError):
            # a character YAML refuses (a NUL, a control character): its line, not its offset
            pos = min(max(int(exc.position), 0), len(text))
            line = text.count("\n", 0, pos) + 1
            column = pos - (text.rfind("\n", 0, pos) + 1) + 1
            where = f" at line {line}, column {column}"
            c = exc.character
            shown = f"U+{c:04X}" if isinstance(c, int) else repr(c)
            problem = f"the character {shown} is not allowed ({exc.reason})"
        hint = (
            "YAML indents with spaces: replace the tab characters"
            if "'\\t'" in problem or "\t" in problem
            else "fix the YAML syntax"
        )
        if mark is not None and hint == "fix the YAML syntax":
            hint = _glued_key(text, mark.line) or hint
        raise UserError(f"not valid YAML{where}: {problem}", file=file, hint=hint) from None
    except YamlDuplicateKey as exc:
        raise UserError(f"not valid YAML: {exc}", file=file, hint="keep one of the two") from None
    except YamlLimit as exc:
        raise UserError(
            f"refused: the YAML {exc}",
            file=file,
            hint=f"a scenario is a few kB with a few levels of nesting; remove the anchors "
            f"and aliases that repeat content, or split the file (limits: {MAX_BYTES // 1000} "
            f"kB, {MAX_DEPTH} levels, {MAX_NODES:,} values)",
        ) from None
    except ValueError as exc:  # an impossible date (2024-13-45), a lone surrogate
        text = str(exc)
        if "surrogate" in text:
            raise UserError(f"not valid text: {text}", file=file, hint="fix the text") from None
        if "digits" in text and "integer" in text:
            # (Python refuses to read an integer of thousands of digits)
            raise UserError(
                "not valid YAML: a number of thousands of digits, which no setting takes",
                file=file,
                hint="write the number in the field's units (1.0e12 tokens, say)",
            ) from None
        if text.startswith(("invalid literal for int()", "could not convert string to float")):
            raise UserError(
                f"not valid YAML: a value tagged !!int or !!float is not a number ({text})",
                file=file,
                hint="give the number itself, or drop the tag",
            ) from None
        raise UserError(
            f"not valid YAML: {text}", file=file, hint="fix the value (dates are YYYY-MM-DD)"
        ) from None
    return data


def _default_software() -> str:
    from .scenario import Scenario

    return str(Scenario.model_fields["software"].default)


# Sections a bare word may stand for as their ``kind`` (config ``kind_shorthand``): a field
# set inside one after the word fills that kind.
KIND_WORD_PATHS = frozenset(
    {"parallelism.pp_schedule", "parallelism.sharding", "training.optimizer"}
)


def _set_path(item: str) -> str:
    return item.partition("=")[0].strip()


def override_order(sets: list[str]) -> list[str]:
    """The order ``PATH=VALUE`` overrides apply in: a whole section (a profile named, a
    mapping) before the fields inside it, so that naming a profile never undoes a field set
    beside it, whatever the order they were given in; and a ``...kind=`` item before the other
    fields of its mapping, which it starts afresh when the kind changes. Otherwise as given
    (the same path twice: the last wins)."""

    def key(item: str) -> tuple[int, bool]:
        path = _set_path(item)
        return path.count("."), not path.endswith(".kind")

    return sorted(sets, key=key)


def replaced_fields(data: dict[str, Any], sets: list[str]) -> list[str]:
    """Fields of ``data`` (the scenario as written) that an override replacing their whole
    section drops: ``--set cluster.gpu=h200`` on a file whose ``cluster.gpu`` also gives
    ``power_limit_w`` runs the H200 at its own TDP. One line each, saying how to keep them."""
    out: list[str] = []
    paths = [_set_path(it) for it in sets]
    for item, path in zip(sets, paths, strict=True):
        node: Any = data
        for k in path.split("."):
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        kept = {p[len(path) + 1 :].split(".")[0] for p in paths if p.startswith(path + ".")}
        try:
            value = load_text(item.partition("=")[2])
        except Exception:  # a value apply_sets keeps as text, or refuses itself
            value = ""
        if value is None:
            continue  # the section removed (`cluster.pricing=null`): nothing of it is wanted
        given = set(value) if isinstance(value, dict) else set()
        new_kind = value.get("kind") if isinstance(value, dict) else value
        if "kind" in node and new_kind != node["kind"]:
            continue  # another kind of thing: the old kind's fields have no place in it
        lost = [k for k in node if k not in ("profile", "preset") and k not in kept | given]
        named = value.get("profile") if isinstance(value, dict) else value
        if path == "cluster.pricing" and "tier" in lost and names_ownership_price(named):
            lost.remove("tier")  # an ownership price has no tier: nothing of it is lost
        if lost:
            shown = ", ".join(f"{k}: {_clipped(json.dumps(node[k]))}" for k in lost)
            # the example is pasted as is: the whole value, of the field shortest to give
            k = min(lost, key=lambda f: len(json.dumps(node[f])))
            out.append(
                f"{path}={_clipped(item.partition('=')[2].strip(), 60)} replaced the whole of "
                f"{path} as written, and with it {shown}; to keep a field, set it too (e.g. "
                f"--set '{path}.{k}={json.dumps(node[k])}')"
            )
    return out


def names_ownership_price(name: Any) -> bool:
    """Whether ``name`` is the name of an ownership price profile in the catalogue."""
    if not isinstance(name, str):
        return False
    from ..catalog import load_catalog  # the catalogue reads YAML: loaded only when asked

    prof = load_catalog(name).profiles.get(name)
    return getattr(prof, "kind", None) == "ownership_price"


def _clipped(text: str, width: int = 40) -> str:
    """``text`` whole, or cut visibly (an ellipsis) where longer than ``width``."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _get(data: Any, keys: list[str]) -> Any:
    """The value at ``keys`` in nested mappings: None where a key is absent, the value that is
    not a mapping where the path runs into one (a model preset's name, a number)."""
    for k in keys:
        if not isinstance(data, dict):
            return data
        data = data.get(k)
    return data


def apply_sets(data: dict[str, Any], sets: list[str], file: str | None) -> dict[str, Any]:
    """Apply ``PATH=VALUE`` overrides; VALUE is parsed as YAML (numbers, true, lists...)."""
    out = copy.deepcopy(data)
    for item in override_order(sets):
        if "=" not in item:
            raise UserError(f"--set '{item}' is not PATH=VALUE", hint="e.g. --set parallelism.tp=4")
        path, _, raw = item.partition("=")
        keys = [k.strip() for k in path.strip().split(".")]
        if not any(keys):
            raise UserError(f"--set '{item}' has an empty path", hint="e.g. --set cluster.nodes=4")
        if not all(keys):
            raise UserError(
                f"--set '{path.strip()}' has an empty part between dots",
                hint="e.g. --set parallelism.tp=4",
            )
        if any(k.isdigit() for k in keys):
            i = next(i for i, k in enumerate(keys) if k.isdigit())
            parent = _get(out, keys[:i])
            prefix = ".".join(keys[:i])
            if isinstance(parent, list) or parent is None:
                raise UserError(
                    f"--set '{path.strip()}': a list item cannot be set on its own",
                    hint=f"set the whole list, e.g. --set '{prefix}=[...]'"
                    if parent is not None
                    else "set the whole list, e.g. --set 'parallelism.stage_layers=[5,6,6,5]'",
                )
            raise UserError(
                f"--set '{path.strip()}': '{keys[i]}' is not a field name (a number names a "
                f"list item, and {prefix} is not a list here)",
                hint=f"set the field itself, e.g. --set {prefix}=VALUE",
            )
        try:
            value = load_text(raw)
        except YamlDuplicateKey as exc:
            raise UserError(f"--set '{path}': {exc}", hint="give each key once") from None
        except YamlLimit as exc:
            raise UserError(
                f"--set '{path.strip()}': its value is not a value a scenario holds ({exc})",
                file=file,
                path=path.strip(),
                hint="give the value itself, without aliases or deep nesting",
            ) from None
        except yaml.YAMLError as exc:
            if raw.strip()[:1] in ("{", "["):
                # a mapping or list the user meant to give: kept as text, it would be refused
                # later as an unknown profile or kind, far from the typo
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                shape = "{...}" if raw.strip()[0] == "{" else "[...]"
                raise UserError(
                    f"--set '{path.strip()}': {raw.strip()[:60]} is not valid YAML ({problem})",
                    file=file,
                    path=path.strip(),
                    hint="close every { and [ it opens, and quote the whole --set for the "
                    f"shell: --set '{path.strip()}={shape}'",
                ) from None
            value = raw  # free text that YAML cannot read as a value (a name with ': ')
        except ValueError:  # e.g. an impossible date
            value = raw
        try:
            check_text(value)
        except ValueError as exc:
            raise UserError(f"--set '{path}': {exc}", hint="give valid Unicode text") from None
        node: Any = out
        for depth, key in enumerate(keys[:-1]):
            nxt = node.get(key) if isinstance(node, dict) else None
            if nxt is None and depth == 0 and key == "software":
                nxt = _default_software()  # the stack a scenario without one runs
            if isinstance(nxt, str):
                # A profile or preset given by name: turn it into a reference with overrides;
                # a kind given by its word (pp_schedule: interleaved) into {kind: word}.
                at = keys[: depth + 1]
                ref_key = "preset" if at == ["model"] else "profile"
                if ".".join(at) in KIND_WORD_PATHS or (len(at) > 1 and at[-1] == "topology"):
                    ref_key = "kind"
                nxt = {ref_key: nxt}
            elif nxt is not None and not isinstance(nxt, dict):
                where = ".".join(keys[: depth + 1])
                raise UserError(
                    f"--set '{path.strip()}': {where} is {json.dumps(nxt, default=str)[:40]}, "
                    f"which has no field '{keys[depth + 1]}'",
                    file=file,
                    path=where,
                    hint=f"set {where} itself, e.g. --set {where}=...",
                )
            elif nxt is None:
                nxt = {}
            node[key] = nxt
            node = nxt
        if not isinstance(node, dict):
            raise UserError(f"--set '{item}': '{path}' is not inside a mapping", file=file)
        if keys[-1] == "kind" and len(keys) > 1 and node.get("kind") not in (None, value):
            # Another kind of thing (ZeRO instead of FSDP, a fat tree instead of rails): the
            # old kind's fields do not carry over; later --set items fill the new one.
            node.clear()
        node[keys[-1]] = value
    return out
