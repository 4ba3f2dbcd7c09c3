"""Safe, bounded YAML reading for scenarios, sweeps, profiles and ``--set`` values.

``yaml.safe_load`` refuses Python tags but not hostile shapes: a document of aliases that refer to
aliases expands to billions of nodes once it is copied or validated, and deep nesting exhausts
the interpreter's stack. This loader bounds the document's size, its nesting depth and the number
of nodes it expands to, each with a message saying which limit was hit. It also reads numbers the
way YAML 1.2 (and every user) does: ``1e11`` and ``1.0e11`` are floats, not strings.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
MAX_NODES = 200_000


class YamlLimit(ValueError):
    """The document is larger, deeper or expands further than a scenario reasonably does."""


class YamlTooLarge(YamlLimit):
    """The file itself is larger than a scenario reasonably is (not its nesting or aliases)."""


class YamlDuplicateKey(ValueError):
    """A mapping gives the same key twice; YAML says keys are unique, and PyYAML would keep the
    last one silently."""


_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with a depth bound and YAML 1.2 floats."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # type: ignore[override]
        if self.check_event(AliasEvent):
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlLimit(f"is nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1


# YAML 1.2 integers: decimal (a leading zero is no octal marker: 0100 is a hundred), 0o octal
# and 0x hex; YAML 1.1's 0100 (octal 64), 0b11 and sexagesimal 1:20 are not numbers.
_INT_12 = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+)$")


def _construct_int(loader: yaml.SafeLoader, node: Node) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")  # type: ignore[arg-type]
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


BoundedLoader.yaml_implicit_resolvers = {
    k: [
        (tag, rx)
        for tag, rx in v
        if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")
    ]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


_ShippedLoader: Any = None
if yaml.__with_libyaml__:  # (a PyYAML built without libyaml has no CSafeLoader)

    class _ShippedLoader(yaml.CSafeLoader):  # type: ignore[misc,no-redef]
        """libyaml's parser (some ten times faster) with the same tags as BoundedLoader, for
        the profile files clustersim ships: read at every start, and not a user's (whose
        files keep the depth-bounded Python composer, libyaml's recursing without a bound)."""

    _ShippedLoader.yaml_implicit_resolvers = BoundedLoader.yaml_implicit_resolvers
    _ShippedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _merged_keys_once(merged: SequenceNode) -> None:
    """``<<: [*a, *b]`` with a key in both: YAML's merge says the first mapping's value wins,
    and PyYAML (6.0) can take the last one's; refused rather than guessed."""
    first: dict[tuple[str, str], int] = {}
    for m in merged.value:
        if not isinstance(m, MappingNode):
            continue
        for k, _v in m.value:
            if not isinstance(k, ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                continue
            name = (k.tag, k.value)
            line = k.start_mark.line + 1
            if name in first and first[name] != line:
                raise YamlDuplicateKey(
                    f"the key '{k.value}' is given by two of the mappings merged with '<<' "
                    f"(lines {first[name]} and {line})"
                )
            first.setdefault(name, line)


def _expanded_size(root: Node) -> int:
    """Nodes the document expands to when every alias is copied out (memoised per node, so an
    alias bomb is measured without being expanded)."""
    memo: dict[int, int] = {}

    def size(node: Node, depth: int) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if depth > MAX_DEPTH:
            raise YamlLimit(f"is nested more than {MAX_DEPTH} levels deep (through aliases)")
        total = 1
        if isinstance(node, SequenceNode):
            for child in node.value:
                total += size(child, depth + 1)
        elif isinstance(node, MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                if isinstance(k, ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    line = k.start_mark.line + 1
                    name = (k.tag, k.value)  # `1:` (an int) and `'1':` (a string) differ
                    if name in seen:
                        raise YamlDuplicateKey(
                            f"the key '{k.value}' is given twice in one mapping (lines "
                            f"{seen[name]} and {line})"
                        )
                    seen[name] = line
                elif isinstance(k, ScalarNode) and isinstance(v, SequenceNode):
                    _merged_keys_once(v)
                total += size(k, depth + 1) + size(v, depth + 1)
        total = min(total, MAX_NODES + 1)
        memo[key] = total
        return total

    return size(root, 0)


def read_file_text(path: Path, limit: int = MAX_BYTES) -> str:
    """A regular file's text, read no further than ``limit`` bytes past which it is refused:
    a pipe would block for ever and a device never ends, so neither is opened. Raises
    :class:`YamlLimit` (not a regular file, too large), ``OSError`` and
    ``UnicodeDecodeError``."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise YamlLimit("is not a regular file (a folder, device, pipe or socket)")
    with open(path, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:  # (a limit past MAX_BYTES only lets load_text say more)
        raise YamlTooLarge(f"is larger than {min(limit, MAX_BYTES) // 1000:,} kB")
    return raw.decode("utf-8")


def load_text(text: str, shipped: bool = False) -> Any:
    """Parse one YAML document within the bounds; raises :class:`YamlLimit`,
    :class:`YamlDuplicateKey` or ``yaml.YAMLError``. ``shipped``: a file clustersim ships,
    parsed by libyaml without the alias and duplicate-key walk (its own files: a test reads
    every one through the bounded loader with the walk, test_catalogue)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlTooLarge(f"is larger than {MAX_BYTES // 1000:,} kB")
    loader = _ShippedLoader(text) if shipped and _ShippedLoader is not None else BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if not shipped and _expanded_size(node) > MAX_NODES:
            raise YamlLimit(f"expands through its aliases to more than {MAX_NODES:,} values")
        return loader.construct_document(node)
    except RecursionError:
        raise YamlLimit(f"is nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def check_text(data: Any) -> None:
    """Raise ValueError if any string in ``data`` is not valid Unicode (a lone surrogate from a
    ``"\\ud800"`` escape): it could be neither printed nor written as UTF-8."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"the text {item.encode('utf-8', 'backslashreplace').decode()[:60]!r} "
                    "holds a lone surrogate (not valid Unicode)"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "YamlLimit",
    "YamlTooLarge",
    "check_text",
    "load_text",
    "read_file_text",
]
