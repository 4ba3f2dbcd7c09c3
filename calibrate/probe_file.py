"""Reading a probe file for calibration: its format and version checked, a failed or
incomplete probe refused with one clear message naming what is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from simulator.config.yamlio import YamlLimit, read_file_text
from simulator.errors import UserError

from .probe import FORMAT, VERSION
from .probe_shape import check_shape

# A probe file holds a few hundred measurements: tens of kB. Anything far larger is not one.
PROBE_MAX_BYTES = 64_000_000

NEEDED = {
    "matmul": "compute (matmul)",
    "memory": "memory bandwidth",
    "collectives": "collectives",
    "train": "the training step",
}


def load_probe(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    file = str(path)
    try:
        text = read_file_text(p, PROBE_MAX_BYTES)
    except YamlLimit as exc:
        raise UserError(
            f"refused: the probe file {exc}",
            file=file,
            hint="give the JSON file `clustersim probe --out` wrote",
        ) from None
    except UnicodeDecodeError:
        raise UserError(
            "probe file is not UTF-8 text: it looks damaged (or is not a probe file)",
            file=file,
            hint="give the JSON file `clustersim probe --out` wrote",
        ) from None
    except OSError as exc:
        raise UserError(
            f"cannot read probe file: {exc.strerror}",
            file=file,
            hint="give the JSON file `clustersim probe --out` wrote",
        ) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError(
            "probe file is not valid JSON: it is nested too deeply to be a probe file",
            file=file,
            hint="give the JSON file `clustersim probe --out` wrote",
        ) from None
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):
            # (Python refuses to read an integer of thousands of digits: no measurement is one)
            raise UserError(
                "probe file holds a number too long to read (an integer of thousands of "
                "digits): no measurement is one",
                file=file,
                hint="give the JSON file `clustersim probe --out` wrote; a probe file is not "
                "meant to be edited",
            ) from None
        if exc.pos == 0 and re.match(r"\s*[A-Za-z_#-]", text):
            # not JSON from its first character: a YAML file (a scenario, say), not damage
            raise UserError(
                "this is not a probe file (it is not JSON: a scenario, a CSV or other text?)",
                file=file,
                hint="give the JSON file `clustersim probe --out` wrote; a scenario goes to "
                "`clustersim simulate`",
            ) from None
        raise UserError(
            f"probe file is not valid JSON (line {exc.lineno}: {exc.msg}); it "
            "looks truncated or damaged",
            file=file,
            hint="re-run `clustersim probe` (it writes atomically, so a probe "
            "that was stopped leaves a valid partial file)",
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UserError(
            f"not a clustersim probe file (format: {got!r}, expected '{FORMAT}')",
            file=file,
            path="format",
            hint="give the JSON file `clustersim probe --out` wrote",
        )
    version = data.get("version")
    if isinstance(version, bool) or version != VERSION:  # JSON true is no version (True == 1)
        raise UserError(
            f"probe file version {data.get('version')!r} is not supported "
            f"(this clustersim reads version {VERSION!r}, a whole number)",
            file=file,
            path="version",
            hint="re-run the probe with this version of clustersim",
        )
    check_shape(data, file)
    missing = [label for key, label in NEEDED.items() if not data.get(key)]
    coll = [r for r in data.get("collectives") or [] if r.get("group") == "intra"]
    if data.get("collectives") and len({r["bytes"] for r in coll if r["op"] == "all_reduce"}) < 2:
        missing.append("intra-node all-reduce at two or more message sizes")
    if missing:
        why = ""
        if isinstance(data.get("error"), dict):
            why = f" (the probe stopped: {data['error'].get('message')})"
        elif data.get("world_size", 2) < 2:
            why = " (the probe ran on one process: collectives need --nproc 2 or more)"
        raise UserError(
            f"probe file lacks {', '.join(missing)}{why}",
            file=file,
            hint="re-run `clustersim probe --nproc 2` (or more) to completion",
        )
    _check_timings(data, file)
    _check_train_times(data, file)
    return data


def _check_train_times(data: dict[str, Any], file: str) -> None:
    """Every time of the training-step section (``*_s``: a number, or lists of them per rank)
    is a positive number of seconds: calibrate fits the in-step factors from them and validate
    reruns the job; a string or a negative time gave 'in-step factor ±0.0%' and a record
    validate then refused."""
    import math

    train = data.get("train")
    if not isinstance(train, dict):
        return
    for key, value in train.items():
        if not key.endswith("_s"):
            continue
        stack: list[tuple[str, Any]] = [(f"train.{key}", value)]
        while stack:
            where, v = stack.pop()
            if isinstance(v, list) and key.endswith("times_s"):
                stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))
                continue
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or not 0 < v <= MAX_TIMING_S
            ):
                raise UserError(
                    f"the training step's time {v!r} is not a positive number of seconds",
                    file=file,
                    path=where,
                    hint="re-run `clustersim probe`; a probe file is not meant to be edited",
                )


# No probe timing lasts a day: the probe's whole run is budgeted in minutes.
MAX_TIMING_S = 86_400.0

# No probe buffer holds 10 TB: the largest it times are a few GiB.
MAX_PROBE_BYTES = 1e13

# Sections whose rows must carry every field checked (a row without one is damaged).
REQUIRED_FIELDS = {"job_ops_scaled"}


def _check_timings(data: dict[str, Any], file: str) -> None:
    """Every timing a fit uses is a positive, finite number of seconds (a hand-edited or
    damaged file would otherwise reach the least-squares fits)."""
    import math

    fields = {
        "attention_curve": ("time_s", "seq", "tflops"),
        "job_ops_scaled": ("time_s", "scale"),
        "collectives": ("time_s", "bytes", "bytes_moved"),
        "memory": ("time_s", "bytes", "bytes_moved"),
    }
    for section in (
        "collectives",
        "matmul",
        "memory",
        "attention",
        "attention_curve",
        "job_ops_scaled",
    ):
        rows = data.get(section) or []
        if not isinstance(rows, list):
            continue
        for i, row in enumerate(rows):
            for key in fields.get(section, ("time_s",)):
                t = row.get(key) if isinstance(row, dict) else None
                optional = section not in REQUIRED_FIELDS
                if t is None and isinstance(row, dict) and key not in row and optional:
                    continue
                if (
                    not isinstance(t, int | float)
                    or isinstance(t, bool)
                    or not math.isfinite(t)
                    or t <= 0
                    or (key == "time_s" and t > MAX_TIMING_S)
                    or (key.startswith("bytes") and t > MAX_PROBE_BYTES)
                ):
                    what = "timing" if key == "time_s" else key
                    unit = " of seconds" if key == "time_s" else ""
                    if isinstance(t, int | float) and key == "time_s" and t > MAX_TIMING_S:
                        unit += f" a probe could have measured (at most {MAX_TIMING_S:g} s)"
                    elif isinstance(t, int | float) and key.startswith("bytes") and t > 0:
                        unit = f" of bytes a probe could have moved (at most {MAX_PROBE_BYTES:g})"
                    raise UserError(
                        f"{what} {t!r} is not a positive number{unit}",
                        file=file,
                        path=f"{section}[{i}].{key}",
                        hint="re-run `clustersim probe`; a probe file is not meant to be edited",
                    )


# -- profiles ----------------------------------------------------------------------------------
