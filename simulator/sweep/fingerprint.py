"""What decides a sweep point's rows besides its own axis values: the base scenario, the
sweep's settings, clustersim's code and the profiles the point names. A resumed sweep reuses a
finished row only where this fingerprint (each point's ``salt``) is unchanged, so a profile
edited (by `calibrate`, say) or a new version of the model makes the rows it decided stale,
and nothing else does: a profile only another point names, added to the spec, leaves the
rows of the points that do not name it reusable."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from .spec import Point, SweepSpec

# A name as it may appear inside a --set expression (a profile's name is its file's stem).
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def _strings(data: Any) -> set[str]:
    """Every string inside ``data`` (mappings' keys and values, lists), stripped."""
    if isinstance(data, str):
        return {data.strip()}
    if isinstance(data, dict):
        return set().union(*(_strings(k) | _strings(v) for k, v in data.items()))
    if isinstance(data, list | tuple):
        return set().union(*(_strings(v) for v in data))
    return set()


def _profile_digests() -> dict[str, str]:
    """A digest of each profile file on the search path by name (its stem), read from disk
    now: the catalogue is cached for the life of the process, and a file may have changed."""
    from ..catalog import profile_dirs, profile_files

    out: dict[str, str] = {}
    for d in profile_dirs():
        for f in profile_files(d):
            # (only regular files: reading a FIFO there would wait for ever; the catalogue
            # reports such a file where its name is asked for)
            if f.is_file():
                h = hashlib.sha1(str(f.relative_to(d)).encode())
                h.update(f.read_bytes())
                out.setdefault(f.stem, "")
                out[f.stem] = hashlib.sha1((out[f.stem] + h.hexdigest()).encode()).hexdigest()
    return out


def _code_digest() -> str:
    code = Path(__file__).resolve().parents[1]
    h = hashlib.sha1()
    for f in sorted(code.rglob("*.py")):
        h.update(str(f.relative_to(code)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _named(names: set[str], digests: dict[str, str]) -> str:
    from ..config.cluster import ClusterSpec
    from ..config.reading import _default_software

    # the profiles a scenario runs on without naming them: the default stack and storage
    defaults = {_default_software(), str(ClusterSpec.model_fields["storage"].default)}
    named = sorted((names | defaults) & digests.keys())
    return json.dumps([(n, digests[n]) for n in named])


def _settings(spec: SweepSpec, base: dict[str, Any]) -> str:
    dumped = spec.model_dump(mode="json")
    return json.dumps(
        {
            "base": base,
            "sweep": {k: v for k, v in dumped.items() if k not in ("axes", "base", "description")},
        },
        sort_keys=True,
        default=str,
    )


def point_salts(spec: SweepSpec, base: dict[str, Any], pts: list[Point]) -> list[str]:
    """Each point's fingerprint: the run's settings and code, and the profiles the base
    scenario and that point's own axis values name."""
    digests = _profile_digests()
    common = _settings(spec, base) + _code_digest()
    base_names = _strings(base)
    out = []
    for p in pts:
        names = base_names | {n for s in p.sets for n in _NAME.findall(s)}
        out.append(hashlib.sha1((common + _named(names, digests)).encode()).hexdigest())
    return out


__all__ = ["point_salts"]
