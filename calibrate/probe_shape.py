"""The shape of a probe file: each section the calibration reads has the type it expects, and
each row the fields the fits index. A damaged or hand-edited file (a section that is a string,
a row without its ``group``) is refused with the field's path, before any fit reads it. The
same for a calibration record, which :func:`load_sidecar` finds beside its GPU profile."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulator.errors import UserError

NUM = "number"
POS = "positive number"  # a measured size, rate or duration
INT = "integer"
STR = "string"
DICT = "mapping"
LIST = "list"
DTYPE = "dtype"  # a GPU profile's peak_tflops key
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

# Rows of the list sections: the fields every row must carry, with their types.
ROWS: dict[str, dict[str, str]] = {
    "collectives": {"op": STR, "group": STR, "group_size": INT, "bytes": POS, "time_s": POS},
    "matmul": {"dtype": DTYPE, "flops": POS, "tflops": POS, "time_s": POS},
    "memory": {"kind": STR, "bytes_moved": POS, "gbps": POS, "time_s": POS},
    "attention_curve": {"seq": POS, "tflops": POS, "time_s": POS},
    "job_ops_scaled": {"key": STR, "scale": POS, "time_s": POS},
}
# Mapping sections: the fields they must carry when present.
MAPPINGS: dict[str, dict[str, str]] = {
    "attention": {"seq": POS, "tflops": POS, "time_s": POS},
    "train": {
        "model": DICT,
        "step_time_median_s": POS,
        "world_size": INT,
        "nodes": INT,
        "procs_per_node": INT,
    },
    "storage": {"read_gbps": NUM, "write_gbps": NUM, "first_byte_s": NUM, "bytes": NUM},
    "speed_variation": {},
    "job_ops": {},
    "op_overhead": {"time_s": POS},
    "step_overhead": {"time_s": NUM},
    "train_speed_check": {},
    "train_sync_cost": {"median_s": NUM, "differences_s": LIST},
}
# Top-level figures.
SCALARS: dict[str, str] = {
    "world_size": INT,
    "nodes": INT,
    "procs_per_node": INT,
    "threads_per_process": INT,
    "cpu_count": INT,
    "memory_bytes": NUM,
    "devices": LIST,  # the device names the probe read (a list, one per device)
}
NULLABLE = ("cpu_count", "memory_bytes")
# The values a row's name field takes: the collectives the probe times (probe_base.COLLECTIVES)
# and its memory-bound kernels (probe_device); another is an edit the fits cannot place.
NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("collectives", "op"): (
        "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p",
    ),
    ("memory", "kind"): ("copy", "gelu+copy"),
}  # fmt: skip
TRAIN_MODEL = ("layers", "hidden", "heads", "vocab", "seq", "batch")


def _type_ok(v: Any, want: str) -> bool:
    if want == DTYPE:
        return v in DTYPES
    if want == STR:
        return isinstance(v, str)
    if want == DICT:
        return isinstance(v, dict)
    if want == LIST:
        return isinstance(v, list)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if want == INT:
        return float(v).is_integer() and v >= 1
    if want == POS:
        return math.isfinite(v) and v > 0
    return math.isfinite(v)


PROBE = ("probe file", "re-run `clustersim probe`; a probe file is not meant to be edited")
RECORD = (
    "calibration record",
    "re-run `clustersim calibrate` on the probe file; a record is not meant to be edited",
)


def _refuse(file: str, path: str, v: Any, want: str, kind: tuple[str, str] = PROBE) -> UserError:
    got = "missing" if v is _MISSING else f"{type(v).__name__} {_short(v)}"
    what = {
        INT: "a positive whole number",
        NUM: "a finite number",
        POS: "a finite number above 0",
        DTYPE: "one of " + ", ".join(DTYPES),
    }.get(want, f"a {want}")
    return UserError(
        f"{kind[0]} field should be {what} (got {got}): the file is damaged or was edited",
        file=file,
        path=path,
        hint=kind[1],
    )


def _edited(file: str, path: str, why: str) -> UserError:
    """A probe file field whose value the probe never writes: ``why``, then that the file is
    damaged or was edited."""
    return UserError(
        f"probe file field {why}: the file is damaged or was edited",
        file=file,
        path=path,
        hint=PROBE[1],
    )


_MISSING = object()


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_fields(
    row: dict[str, Any], fields: dict[str, str], file: str, at: str, kind: tuple[str, str] = PROBE
) -> None:
    for key, want in fields.items():
        v = row.get(key, _MISSING)
        if v is _MISSING or not _type_ok(v, want):
            raise _refuse(file, f"{at}.{key}", v, want, kind)


# The probe's training job is a small model sized to one GPU's memory (or a CPU's): no field
# of it comes near these, and a record past them would start a live run that cannot finish.
TRAIN_MODEL_MAX = {
    "layers": 1_000,
    "hidden": 65_536,
    "heads": 1_024,
    "vocab": 1_048_576,
    "seq": 1_048_576,
    "batch": 65_536,
}


def _check_model_size(model: dict[str, Any], file: str, at: str, kind: tuple[str, str]) -> None:
    for key, top in TRAIN_MODEL_MAX.items():
        v = model.get(key)
        if isinstance(v, int | float) and v > top:
            raise UserError(
                f"{kind[0]} field should be at most {top:,} (got {_short(v)}): the probe's "
                "training job is a small model; the file is damaged or was edited",
                file=file,
                path=f"{at}.{key}",
                hint=kind[1],
            )


def _check_blocks(v: Any, per_rank: bool, file: str, at: str) -> None:
    """Timed blocks of the speed check: per rank (a list per rank) or one list, each a
    non-empty list of positive seconds."""
    lists = v if per_rank and isinstance(v, list) else [v]
    if per_rank and (not isinstance(v, list) or not v):
        raise _refuse(file, at, v, "non-empty list of lists of seconds")
    for i, times in enumerate(lists):
        where = f"{at}[{i}]" if per_rank else at
        if not isinstance(times, list) or not times:
            raise _refuse(file, where, times, "non-empty list of seconds")
        for j, t in enumerate(times):
            if not _type_ok(t, POS):
                raise _refuse(file, f"{where}[{j}]", t, POS)


def check_shape(data: dict[str, Any], file: str) -> None:
    """Refuse (exit 2, with the field's path) a probe file whose sections or rows do not have
    the types the calibration reads. Absent sections are left to the caller's checks."""
    for key, want in SCALARS.items():
        if key in NULLABLE and data.get(key) is None:
            continue  # (os.cpu_count() may say it does not know)
        if key in data and not _type_ok(data[key], want):
            raise _refuse(file, key, data[key], want)
    world, ppn, nodes = (data.get(k, 0) for k in ("world_size", "procs_per_node", "nodes"))
    if all(_type_ok(v, INT) for v in (world, ppn, nodes)) and ppn * nodes != world:
        raise _edited(
            file, "procs_per_node", f"is {ppn!r} on {nodes!r} node(s), not world_size {world!r}"
        )
    for i, name in enumerate(data.get("devices") or []):
        if not isinstance(name, str) or not name.strip():
            raise _refuse(file, f"devices[{i}]", name, "device name (text)")
    for section, fields in ROWS.items():
        if section not in data or data[section] is None:
            continue
        rows = data[section]
        if not isinstance(rows, list):
            raise _refuse(file, section, rows, LIST)
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise _refuse(file, f"{section}[{i}]", row, DICT)
            _check_fields(row, fields, file, f"{section}[{i}]")
            for (sec, key), known in NAMES.items():
                if sec == section and row[key] not in known:
                    raise _edited(
                        file,
                        f"{section}[{i}].{key}",
                        f"is {row[key]!r}, which the probe never writes (one of "
                        f"{', '.join(known)})",
                    )
            if section != "collectives":
                continue
            world, n = data.get("world_size"), row["group_size"]
            at = f"collectives[{i}].group_size"
            if isinstance(world, int) and not isinstance(world, bool) and n > world:
                raise _edited(
                    file, at, f"is {n!r}, more ranks than the probe's world_size of {world}"
                )
            if n < 2:
                raise _edited(
                    file,
                    at,
                    f"should be 2 or more (got {n!r}): a collective runs over at least two ranks",
                )
    for section, fields in MAPPINGS.items():
        if section not in data or data[section] is None:
            continue
        block = data[section]
        if not isinstance(block, dict):
            raise _refuse(file, section, block, DICT)
        if block:  # an empty mapping is a phase that did not run
            _check_fields(block, fields, file, section)
    train = data.get("train") or {}
    model = train.get("model")
    if isinstance(model, dict):
        _check_fields(model, dict.fromkeys(TRAIN_MODEL, INT), file, "train.model")
        _check_model_size(model, file, "train.model", PROBE)
    times = train.get("step_times_s")
    if times is not None:
        _check_blocks(times, False, file, "train.step_times_s")
    sync = data.get("train_sync_cost") or {}
    for i, d in enumerate(sync.get("differences_s") or []):
        if not _type_ok(d, NUM):
            raise _refuse(file, f"train_sync_cost.differences_s[{i}]", d, NUM)
    step = train.get("step_time_median_s")
    if _type_ok(sync.get("median_s"), NUM) and _type_ok(step, POS) and sync["median_s"] > step:
        raise _edited(
            file,
            "train_sync_cost.median_s",
            f"is {sync['median_s']!r} s, longer than the training step it is part of ({step!r} s)",
        )
    for name, job in (data.get("job_ops") or {}).items():
        if not isinstance(job, dict):
            raise _refuse(file, f"job_ops.{name}", job, DICT)
        _check_fields(job, {"time_s": POS}, file, f"job_ops.{name}")
    for section in ("speed_variation", "train_speed_check"):
        block = data.get(section) or {}
        for key in ("block_times_s", "alone_block_times_s"):
            if key in block:
                _check_blocks(block[key], key == "block_times_s", file, f"{section}.{key}")
    st = data.get("storage") or {}
    for key in ("read_gbps", "write_gbps", "first_byte_s", "bytes"):
        v = st.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v <= 0:
            raise UserError(
                f"storage figure {v!r} is not positive: the file is damaged or was edited",
                file=file,
                path=f"storage.{key}",
                hint="re-run `clustersim probe`; a probe file is not meant to be edited",
            )


# A calibration record (NAME.calibration.json) as validate reads it.
SIDECAR_MAPPINGS: dict[str, dict[str, str]] = {
    "train": {"model": DICT},
    "compute_fit": {},
    "speed_variation": {},
}
SIDECAR_SCALARS: dict[str, str] = {
    "threads_per_process": INT,
    "procs_per_node": INT,
    "hosts": INT,
    "world_size": INT,
}


def check_sidecar(side: Any, file: str) -> None:
    """Refuse (exit 2, with the field's path) a calibration record whose parts validate reads
    do not have the types ``clustersim calibrate`` writes."""

    def refuse(path: str, v: Any, want: str) -> UserError:
        return _refuse(file, path, v, want, RECORD)

    if not isinstance(side, dict):
        raise refuse("(top level)", side, DICT)
    if side.get("format") != "clustersim-calibration" or side.get("version") != 1:
        raise UserError(
            f"not a calibration record this clustersim reads (format {side.get('format')!r}, "
            f"version {side.get('version')!r}; expected 'clustersim-calibration', 1)",
            file=file,
            path="format" if side.get("format") != "clustersim-calibration" else "version",
            hint="re-run `clustersim calibrate` on the probe file with this clustersim",
        )
    for key, want in SIDECAR_SCALARS.items():
        if side.get(key) is not None and not _type_ok(side[key], want):
            raise refuse(key, side[key], want)
    for section, fields in SIDECAR_MAPPINGS.items():
        block = side.get(section)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise refuse(section, block, DICT)
        _check_fields(block, fields, file, section, RECORD)
    if not isinstance(side.get("train"), dict):  # validate reruns the training job it holds
        raise refuse("train", side.get("train", _MISSING), DICT)
    model = side["train"].get("model") or {}
    _check_fields(model, dict.fromkeys(TRAIN_MODEL, INT), file, "train.model", RECORD)
    _check_model_size(model, file, "train.model", RECORD)
    fits = side.get("fits")
    if fits is not None:
        if not isinstance(fits, list):
            raise refuse("fits", fits, LIST)
        for i, f in enumerate(fits):
            if not isinstance(f, dict):
                raise refuse(f"fits[{i}]", f, DICT)
    # the figures validate's error bands read (after the live runs: checked before them)
    errs = [("compute_fit", side.get("compute_fit") or {})]
    errs += [(f"fits[{i}]", f) for i, f in enumerate(fits or [])]
    for at, block in errs:
        if block.get("rms_rel_err") is not None and not _type_ok(block["rms_rel_err"], NUM):
            raise refuse(f"{at}.rms_rel_err", block["rms_rel_err"], NUM)
    for key in ("compute_step_times_s", "compute_half_step_times_s"):
        steps = side["train"].get(key)
        if steps is not None and not (
            isinstance(steps, list) and all(isinstance(r, list) for r in steps)
        ):
            raise refuse(f"train.{key}", steps, "list of lists")
        for i, r in enumerate(steps or []):
            for j, t in enumerate(r):
                if not _type_ok(t, POS):
                    raise refuse(f"train.{key}[{i}][{j}]", t, POS)


def load_sidecar(profile: str) -> tuple[dict[str, Any], Path]:
    """The calibration record written beside GPU profile ``profile``, checked, and its path."""
    from simulator.catalog import _load, load_catalog

    _load.cache_clear()
    cat = load_catalog()
    if profile not in cat.profiles or getattr(cat.profiles[profile], "kind", "") != "gpu":
        cat.get(profile, "gpu")  # raises the usual 'unknown profile' error
    path = cat.files[profile].parent / f"{profile}.calibration.json"
    if not path.is_file():
        raise UserError(
            f"profile '{profile}' has no calibration record",
            file=str(path),
            hint="validate needs a profile written by `clustersim calibrate`",
        )
    try:
        side = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if not path.stat().st_size:
            why = "is empty"
        elif isinstance(exc, json.JSONDecodeError):
            why = f"is damaged (not valid JSON, line {exc.lineno}: {exc.msg})"
        else:
            why = f"cannot be read ({type(exc).__name__})"
        raise UserError(
            f"the calibration record of '{profile}' {why}",
            file=str(path),
            hint=f"move it away, then re-run clustersim calibrate on its probe file with --name "
            f"{profile}",
        ) from None
    check_sidecar(side, str(path))
    if not side.get("train"):
        raise UserError(
            f"calibration record of '{profile}' has no training job",
            file=str(path),
            hint="re-run the probe with its train phase, then calibrate",
        )
    return side, path
