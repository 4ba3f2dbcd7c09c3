"""Writing calibrated profiles (atomically) and the in-sample check of a calibration."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import UserError
from simulator.report.files import finite, write_atomic

from .fits import AlphaBeta


@dataclass
class Calibration:
    """A calibration: the profiles it writes, its sidecar (fits and the probe job) and its fits."""

    name: str
    gpu: dict[str, Any]
    fabric: dict[str, Any]
    network: dict[str, Any] | None
    storage: dict[str, Any]
    sidecar: dict[str, Any]
    fits: list[AlphaBeta]
    # profiles of an earlier calibration under this name that this one removed (see write)
    removed: list[Path] = field(default_factory=list)


def write(cal: Calibration, out_dir: str | Path, probe_file: str = "") -> list[Path]:
    """Write the calibration's profiles and sidecar into ``out_dir``, each atomically, after
    every profile has passed the checks a profile folder's loading applies: a calibration
    that would not load writes nothing (an earlier one under the same name stays whole). An
    earlier calibration's profile this one does not write is removed (``cal.removed``)."""
    profiles = [p for p in (cal.gpu, cal.fabric, cal.network, cal.storage) if p is not None]
    texts = [yaml.safe_dump(p, sort_keys=False, width=100, allow_unicode=True) for p in profiles]
    for prof in profiles:
        _loads(prof, probe_file)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    record = d / f"{cal.name}.calibration.json"
    earlier = _is_calibration(record)  # re-calibrating: its profiles are this name's to replace
    written = []
    for prof, text in zip(profiles, texts, strict=True):
        p = d / f"{prof['name']}.yaml"
        write_atomic(p, text)
        written.append(p)
    write_atomic(record, json.dumps(finite(cal.sidecar), indent=1, allow_nan=False))
    written.append(record)
    if earlier:
        # A profile the earlier calibration wrote and this one does not (a network, where the
        # new probe ran on one node) would outlive it: a scenario or `validate` naming it
        # would time half the cluster by another probe.
        kept = {prof["name"] for prof in profiles}
        for n, kind in own_profiles(cal.name).items():
            p = d / f"{n}.yaml"
            if n not in kept and p.is_file() and _kind_of(p) == kind:
                p.unlink()
                cal.removed.append(p)
    return written


def own_profiles(name: str) -> dict[str, str]:
    """The profiles a calibration named ``name`` may write, by name: their kinds."""
    return {
        name: "gpu",
        f"{name}-fabric": "fabric",
        f"{name}-network": "network",
        f"{name}-storage": "storage",
    }


def _loads(prof: dict[str, Any], probe_file: str) -> None:
    """Refuse a profile its folder could not load (a figure outside its range), naming it."""
    from simulator.catalog import validate_profile

    try:
        validate_profile(prof, f"{prof['name']}.yaml")
    except UserError as exc:
        raise UserError(
            f"the calibrated {prof.get('kind', '')} profile '{prof['name']}' would not "
            f"load ({exc.message}); nothing was written",
            file=probe_file or None,
            path=exc.path,
            hint="re-run `clustersim probe`; if the figure is a real measurement, "
            "this machine is outside what a profile describes",
        ) from None


MAX_NAME = 100


def check_name(name: str) -> None:
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise UserError(
            f"profile name '{name}' is not allowed",
            path="--name",
            hint="use lower-case letters, digits, '.', '_' and '-'",
        )
    if len(name) > MAX_NAME:
        # (the profiles' display names carry it beside the device's name, 200 characters in all)
        raise UserError(
            f"profile name of {len(name)} characters is too long (at most {MAX_NAME})",
            path="--name",
            hint="give a shorter name",
        )


def check_free(name: str, out_dir: str | Path) -> None:
    """The calibration writes NAME (a GPU), NAME-fabric, NAME-network and NAME-storage into
    ``out_dir``. Refuse names that another profile already has: a bundled one (never
    replaced), or one in any folder clustersim searches or in ``out_dir``, unless it is this
    calibration's own earlier file of the same kind (``out_dir`` holds NAME.calibration.json):
    re-calibrating under a name replaces it."""
    from simulator.catalog import bundled_profiles_dir, load_catalog, profile_files

    cat = load_catalog()
    target = Path(out_dir).resolve()
    bundled = bundled_profiles_dir().resolve()
    record = target / f"{name}.calibration.json"
    ours = _is_calibration(record)
    if record.is_file() and not ours:
        raise UserError(
            f"'{record}' exists and is not a calibration record; calibrating as '{name}' "
            "would replace it",
            path="--name",
            hint="pick another name for the calibration, or another --out-dir",
        )
    tree = profile_files(target) if target.is_dir() else []
    for n, kind in own_profiles(name).items():
        here = target / f"{n}.yaml"
        # Another file named for it anywhere in the folder (gpus/NAME.yaml, NAME.yml): the
        # folder would then hold two files for one name, and neither loads
        other = next((p for p in tree if p.stem == n and p != here), None)
        if other is not None:
            raise UserError(
                f"'{other}' is named for the profile '{n}' this calibration writes into "
                f"{target}: with both in one profile folder neither would load",
                path="--name",
                hint="pick another name for the calibration or another --out-dir, or move "
                "that file out of the folder",
            )
        prof = cat.profiles.get(n)
        if prof is not None:
            found, path = getattr(prof, "kind", None), cat.files[n].resolve()
        elif here.is_file():  # a folder clustersim does not search
            found, path = _kind_of(here), here
        else:
            continue
        if ours and found == kind and path.parent == target and bundled not in path.parents:
            continue
        raise UserError(
            f"a {found or 'hardware'} profile named '{n}' already exists ({path})",
            path="--name",
            hint="pick another name for the calibration",
        )


def _is_calibration(path: Path) -> bool:
    """Whether ``path`` is a calibration record this tool wrote (the only file of that name a
    re-calibration may replace)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == "clustersim-calibration"


def _kind_of(path: Path) -> str | None:
    """The ``kind`` a profile file declares (None if unreadable)."""
    from simulator.config.yamlio import load_text

    try:
        data = load_text(path.read_text())
    except ValueError:
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def in_sample(name: str, sidecar: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """Simulate the probe's own training job with the new profiles (same layout as the probe
    ran) and compare with the step time the probe measured; or, where it cannot be simulated
    (a figure of the probe the fits do not read), None and why. The profiles are written by
    then and load, so that is a warning, never a failure that leaves them half-reported."""
    try:
        return _in_sample(name, sidecar), None
    except (UserError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return None, exc.message if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"


def _in_sample(name: str, sidecar: dict[str, Any]) -> dict[str, Any] | None:
    from simulator.config.loading import resolve_dict
    from simulator.simulate import simulate

    from .scenario import job_scenario, probe_comm_overlaps

    tr = sidecar.get("train")
    if not tr:
        return None
    from simulator.catalog import _load

    _load.cache_clear()
    nodes = int(tr.get("nodes", 1))
    net = None
    if nodes > 1 and f"{name}-network" not in sidecar["profiles"]:
        return None
    ppn = int(tr["procs_per_node"])
    overlap = probe_comm_overlaps(sidecar, ppn * nodes if sidecar.get("hosts") == 1 else ppn)
    sc = job_scenario(
        name,
        tr["model"],
        ppn,
        nodes,
        net,
        overlap=overlap,
        stragglers=bool(sidecar.get("speed_variation")),
    )
    rs = resolve_dict(sc)
    pred = simulate(rs, scaling=False).metrics.step_time_s
    meas = tr["step_time_median_s"]
    return {
        "world_size": tr["world_size"],
        "nodes": nodes,
        "measured_s": meas,
        "predicted_s": pred,
        "error_pct": 100.0 * (pred - meas) / meas,
    }
