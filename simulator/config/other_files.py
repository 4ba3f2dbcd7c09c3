"""Files given where a scenario belongs that are something else the user has: a sweep spec, a
hardware profile, or a file this tool wrote (a probe, a calibration record, a trace, a JSON
result; JSON is YAML, so each would otherwise be read as a scenario of unknown fields). Each is
named, with where it goes."""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from .profiles import PROFILE_KINDS

# Files the tool writes that a scenario argument may be given by mistake (JSON is YAML): what
# each is and where it goes.
_OUTPUTS = {
    "clustersim-probe": (
        "a probe file (clustersim probe --out)",
        "give it to clustersim calibrate PROBE --name NAME, then name NAME in a scenario",
    ),
    "clustersim-calibration": (
        "a calibration record (clustersim calibrate)",
        "a scenario names the calibrated profile (cluster.gpu: NAME); "
        "clustersim validate --profile NAME checks it",
    ),
}


def _clustersim_output(raw: Any) -> tuple[str, str] | None:
    """What a file this tool wrote is, where a scenario was expected (None if it is none)."""
    if not isinstance(raw, dict) or "cluster" in raw:
        return None
    fmt = raw.get("format")
    if isinstance(fmt, str) and fmt in _OUTPUTS:
        return _OUTPUTS[fmt]
    if "$defs" in raw or "$schema" in raw:
        return (
            "a JSON Schema (clustersim schema)",
            "point your editor's YAML support at it for completion; simulate takes a scenario",
        )
    if "traceEvents" in raw:
        return (
            "a timeline trace (simulate --trace)",
            "open it in Perfetto (ui.perfetto.dev); simulate takes a scenario YAML",
        )
    if "step_time_s" in raw and "breakdown_s" in raw:
        return (
            "a result (simulate --format json)",
            "give the scenario that made it (its 'file' field names it)",
        )
    return None


def refuse_other_files(raw: Any, file: str) -> None:
    """Refuse ``raw`` (read from ``file``) where it is not a scenario but one of the above."""
    if isinstance(raw, dict) and "base" in raw and "axes" in raw and "cluster" not in raw:
        raise UserError(
            "this is a sweep spec (base, axes), not a scenario",
            file=file,
            hint=f"run it with clustersim sweep {file}, or give a scenario file",
        )
    made_by = _clustersim_output(raw)
    if made_by is not None:
        raise UserError(f"this is {made_by[0]}, not a scenario", file=file, hint=made_by[1])
    if isinstance(raw, dict) and "cluster" not in raw and raw.get("kind") in PROFILE_KINDS:
        raise UserError(
            f"this is a {raw['kind']} profile (kind: {raw['kind']}), not a scenario",
            file=file,
            hint="a scenario names its profiles (cluster.gpu: NAME, ...); put the file in a "
            "profile folder (./hardware_profiles or CLUSTERSIM_PROFILE_PATH) and name it there",
        )
