"""Errors in a scenario loaded with ``--set`` overrides, said in the user's terms: which
override a faulty value came from (the file's own value would otherwise seem to be quoted)."""

from __future__ import annotations

import re

from ..errors import UserError


def blame_set(exc: UserError, sets: list[str]) -> UserError:
    """The error, saying so when the value at fault came from a ``--set`` rather than the file
    (whose own value the message would otherwise seem to quote)."""
    p = exc.path or ""
    if p.endswith(".source"):
        figure = p[: -len(".source")]
        for s in reversed(sets):
            if _key(s) == figure + ".value":
                value = s.split("=", 1)[1].strip()
                return UserError(
                    f"--set {_shown(s)} gives {figure} a value without a source",
                    file=exc.file,
                    path=exc.path,
                    hint=f"set the figure itself, --set {figure}={value}, which records it as "
                    f"an inline override; or give both, --set '{figure}={{value: {value}, "
                    f"source: ...}}'",
                )
    for s in reversed(sets):  # the last --set of a path is the one that took effect
        key = _key(s)
        # (or, for an unknown field, the section a --set created: --set CLUSTER.NODES=1)
        created = key.startswith(p + ".") and exc.message.startswith("unknown field")
        if key and (p == key or p.startswith((key + ".", key + "[")) or created):
            # a fault inside a profile file the --set named is that file's, not the --set's
            said = "names that profile" if "could not be loaded" in exc.message else None
            return UserError(
                f"{exc.message} (--set {_shown(s)} {said})"
                if said
                else f"{exc.message} (the value comes from --set {_shown(s)})",
                file=exc.file,
                path=exc.path,
                hint=exc.hint,
            )
    # A field judged against another of its section (global_batch by micro_batch): the
    # override beside it is what changed.
    section = p.rsplit(".", 1)[0] if "." in p else ""
    beside = [s for s in sets if section and _key(s).startswith(section + ".")]
    # the one whose field the message names ("4 nodes need a network": cluster.nodes), else
    # the last
    named = [
        s
        for s in beside
        if re.search(rf"\b{re.escape(_field(s))}\b", exc.message, re.I) or _quoted_value(s, exc)
    ]
    if beside:
        return _with_set(exc, (named or beside)[-1])
    # A field judged against one of another section (PP against the model's layers after
    # --set model.layers=3): the override of that one (or of the section holding it)
    judged = JUDGED_AGAINST.get(p, ())
    when = JUDGED_WHEN.get(p)
    if when is not None and when not in exc.message:
        judged = ()  # that field's own range or type: no other --set made it fail
    other = [s for s in sets if _key(s) and any(_within(f, _key(s)) for f in judged)]
    return _with_set(exc, other[-1]) if other else exc


def _quoted_value(item: str, exc: UserError) -> bool:
    """Whether the message quotes the value ``item`` sets (a profile's name: 'h100-pcie-80gb'
    has no NVLink), which names that override as the one at fault."""
    value = item.split("=", 1)[1].strip().strip("'\"") if "=" in item else ""
    return len(value) >= 3 and f"'{value}'" in exc.message


def _with_set(exc: UserError, item: str) -> UserError:
    """``exc`` naming the --set beside the field at fault that changed what it is judged by."""
    return UserError(
        f"{exc.message} (with --set {_shown(item)})", file=exc.file, path=exc.path, hint=exc.hint
    )


def _within(field: str, key: str) -> bool:
    """``field`` is the path ``key`` or lies inside it."""
    return field == key or field.startswith(key + ".")


# The fields of other sections an error at a path is judged against (config.layout_checks).
JUDGED_AGAINST: dict[str, tuple[str, ...]] = {
    "parallelism.pp": ("model.layers",),
    "parallelism.pp_schedule": ("model.layers",),
    "parallelism.stage_layers": ("model.layers",),
    "parallelism.offload_activation_layers": ("model.layers",),
    "parallelism.tp": ("model.heads", "model.kv_heads", "model.ffn", "model.vocab"),
    "parallelism.cp": ("training.seq_len",),
    "parallelism.sequence_parallel": ("training.seq_len",),
    # DP (the cluster's GPUs over TP·PP·CP) times the micro-batch must divide the global batch
    "training.global_batch": (
        "cluster.nodes",
        "cluster.gpus_per_node",
        "parallelism.tp",
        "parallelism.pp",
        "parallelism.cp",
    ),
    "run.tokens": ("training.global_batch", "training.seq_len"),
}
# Where a field is judged against others only by one check: the words of its message.
JUDGED_WHEN: dict[str, str] = {
    "training.global_batch": "not a multiple of",
    "run.tokens": "less than one step",
}


def _key(item: str) -> str:
    """The path a --set item sets (``cluster.nodes=4``: ``cluster.nodes``)."""
    return item.split("=", 1)[0].strip()


def _field(item: str) -> str:
    """The last name of a --set item's path (``cluster.nodes=4``: ``nodes``)."""
    return _key(item).rsplit(".", 1)[-1]


def _shown(item: str) -> str:
    """A --set item as a message quotes it: at most 120 characters."""
    return item if len(item) <= 120 else item[:117] + "..."


__all__ = ["blame_set"]
