"""Finds and loads the hardware catalogue (``hardware_profiles/``) and bundled scenarios.

Profiles are searched, later entries winning on a name clash: the catalogue shipped with the
package, then ``./hardware_profiles`` under the working directory (where ``clustersim calibrate``
writes), then each folder in ``$CLUSTERSIM_PROFILE_PATH``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .config.hardware import _Profile
from .config.profiles import PROFILE_KINDS, AnyProfile
from .errors import UserError, closest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_ADAPTER: TypeAdapter[AnyProfile] = TypeAdapter(AnyProfile)


def _data_dir(name: str) -> Path:
    """A data folder installed beside the ``simulator`` package (wheel or editable). Found by
    path rather than by import, so a folder of the same name in the working directory cannot
    shadow it."""
    here = PACKAGE_ROOT / name
    if (here / "__init__.py").is_file():
        return here
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin:
        return Path(spec.origin).resolve().parent
    raise RuntimeError(f"clustersim's bundled {name}/ folder is missing from the installation")


def bundled_profiles_dir() -> Path:
    return _data_dir("hardware_profiles")


def bundled_scenarios_dir() -> Path:
    return _data_dir("scenarios")


def _env_dir(entry: str) -> bool:
    """Whether a ``$CLUSTERSIM_PROFILE_PATH`` entry is a folder; one the system cannot even look
    up (a name too long, a NUL) is refused naming the variable."""
    try:
        return Path(entry).is_dir()
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            f"an entry of {len(entry)} characters cannot be looked up: {why}",
            path="CLUSTERSIM_PROFILE_PATH",
            hint=f"give folders of profile YAML files (separated by '{os.pathsep}'), or unset it",
        ) from None


def check_profile_path() -> list[str]:
    """Refuse a ``$CLUSTERSIM_PROFILE_PATH`` entry that is a file (the CLI checks it once per
    command), and return a note for each entry that does not exist (yet: calibrate may be about
    to create it), so that a mistyped folder does not leave its profiles silently unused."""
    notes = []
    for extra in os.environ.get("CLUSTERSIM_PROFILE_PATH", "").split(os.pathsep):
        if not extra or _env_dir(extra):
            continue
        if Path(extra).exists():
            raise UserError(
                f"'{extra}' is a file, not a folder of profiles",
                path="CLUSTERSIM_PROFILE_PATH",
                hint="point it at folders of profile YAML files (separated by "
                f"'{os.pathsep}'), or unset it",
            )
        notes.append(
            f"CLUSTERSIM_PROFILE_PATH names '{extra}', which does not exist: no profiles are "
            "read from it"
        )
    return notes


def profile_dirs() -> tuple[Path, ...]:
    dirs = [bundled_profiles_dir()]
    local = Path.cwd() / "hardware_profiles"
    if local.is_dir():
        dirs.append(local.resolve())
    for extra in os.environ.get("CLUSTERSIM_PROFILE_PATH", "").split(os.pathsep):
        if extra and _env_dir(extra):
            dirs.append(Path(extra).resolve())
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return tuple(seen)


# Profile files sit in a profile folder, in a folder per kind (gpus/, calibrated/) or one more
# level down; a deeper search would let a folder such as / walk the whole disk.
_PROFILE_GLOBS = tuple(f"{'*/' * depth}*.{ext}" for depth in range(3) for ext in ("yaml", "yml"))


def _unread_file(name: str) -> tuple[Path, Path] | None:
    """A file named for profile ``name`` in a profile folder that the catalog does not read
    (one folder deeper than it looks, or ending in .YAML), and where it would be read."""
    wanted = {f"{name}.yaml", f"{name}.yml"}
    for d in profile_dirs():
        seen = set(profile_files(d))
        for depth in range(4):  # (no deeper: a profile folder of / must not walk the disk)
            for ext in ("[yY][aA][mM][lL]", "[yY][mM][lL]"):
                for p in sorted(d.glob("*/" * depth + f"*.{ext}")):
                    if p.name.lower() in wanted and p not in seen and p.is_file():
                        rel = p.relative_to(d).parts
                        return p, d.joinpath(*rel[: min(len(rel) - 1, 2)], f"{name}.yaml")
    return None


def profile_files(d: Path) -> list[Path]:
    """The profile files of folder ``d`` (YAML files up to two folders down), sorted."""
    return sorted({p for pattern in _PROFILE_GLOBS for p in d.glob(pattern)})


@dataclass
class Catalog:
    profiles: dict[str, _Profile] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    replaced: dict[str, Path] = field(default_factory=dict)
    """Profiles a later folder replaced, by name: the file that lost (see replacement_notes)."""
    clashes: dict[str, UserError] = field(default_factory=dict)
    """Later files that name a profile of another kind (the earlier one is kept), by stem."""
    broken: dict[str, UserError] = field(default_factory=dict)
    """Profile files that failed to load, by file stem: reported when that name is asked for,
    so one bad local file does not break every command."""

    def by_kind(self, *kinds: str) -> dict[str, _Profile]:
        return {n: p for n, p in self.profiles.items() if getattr(p, "kind", None) in kinds}

    def get(self, name: str, *kinds: str) -> _Profile:
        pool = self.by_kind(*kinds) if kinds else self.profiles
        if name in pool:
            return pool[name]
        if name in self.clashes:
            raise self.clashes[name]
        if name in self.broken:
            err = self.broken[name]
            where = f"{err.file}: {err.path}" if err.path else str(err.file)
            raise UserError(
                f"profile '{name}' could not be loaded: {where}: {err.message}",
                hint=err.hint or "fix or remove that profile file",
            )
        what = " or ".join(k.replace("_", " ") for k in kinds) if kinds else "hardware"
        other = self.profiles.get(name)
        if other is not None:
            kind = str(getattr(other, "kind", "")).replace("_", " ")
            raise UserError(
                f"'{name}' is a {kind} profile, not a {what} profile",
                hint=f"name a {what} profile here (`clustersim profiles list`)",
            )
        from .workload.presets import PRESETS

        if name in PRESETS:
            raise UserError(
                f"'{name}' is a model preset, not a {what} profile",
                hint=f"a scenario names it as model: {name} (`clustersim profiles list` shows "
                "the profiles)",
            )
        unread = _unread_file(name)
        if unread is not None:
            raise UserError(
                f"unknown {what} profile '{name}': {unread[0]} has that name but is not read "
                "(profile files are read up to two folders below a profile folder, ending "
                "in .yaml or .yml)",
                hint=f"move or rename it, e.g. to {unread[1]}",
            )
        near = closest(name, pool)
        hint = f"did you mean {', '.join(near)}?" if near else "see `clustersim profiles list`"
        if not near:
            hint += (
                " (profiles `calibrate --out-dir` wrote elsewhere are found through "
                "$CLUSTERSIM_PROFILE_PATH or a ./hardware_profiles folder)"
            )
        raise UserError(f"unknown {what} profile '{name}'", hint=hint)


def load_profile_file(path: Path) -> _Profile:
    from .profile_inherit import read_profile_data, with_base

    # (not calibrated/: `calibrate` writes there by default, and in a source checkout
    # ./hardware_profiles is the bundled folder)
    bundled = bundled_profiles_dir()
    shipped = path.is_relative_to(bundled) and not path.is_relative_to(bundled / "calibrated")
    data = read_profile_data(path, shipped)

    def find(name: str, asking: Path) -> Path | None:
        """The file that wins for that name (later folders first); for a file that starts
        from the profile it replaces (a local h100-sxm-80gb with base: h100-sxm-80gb), the
        next one of that name below it."""
        files = [p for d in reversed(profile_dirs()) for p in profile_files(d) if p.stem == name]
        if name != asking.stem:
            return files[0] if files else None
        me = os.path.realpath(asking)
        at = [i for i, p in enumerate(files) if os.path.realpath(p) == me]
        # (the same file reached through another folder, or a link to it, is not below it)
        below = [p for p in files[at[0] + 1 :] if os.path.realpath(p) != me] if at else []
        return below[0] if below else None

    def names() -> list[str]:  # a base is of the profile's kind: those of its folder first
        every = [p for d in profile_dirs() for p in profile_files(d)]
        alike = [p.stem for p in every if p.parent.name == path.parent.name]
        return alike or [p.stem for p in every]

    data = with_base(data, path, find, lambda p: read_profile_data(p, shipped), names)
    return validate_profile(data, str(path))


_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def validate_profile(data: Any, file: str) -> _Profile:
    """A profile mapping checked as a profile file's loading checks it (exit-2 error naming
    ``file`` and the field otherwise)."""
    # Validate against the kind's own class where the kind is known, so that error paths and
    # 'did you mean' hints are the profile's fields (not prefixed by the union's tag).
    if data is None:
        raise UserError(
            "the profile file is empty",
            file=file,
            hint="give its kind:, name:, display_name: and figures (`clustersim profiles show "
            "h100-sxm-80gb` shows a complete one), or remove the file",
        )
    kind = data.get("kind") if isinstance(data, dict) else None
    cls = PROFILE_KINDS.get(kind) if isinstance(kind, str) else None
    from .config.sourced import PROFILE_FILE

    context = {PROFILE_FILE: True}
    try:
        if cls is not None:
            return cls.model_validate(data, context=context)
        return _ADAPTER.validate_python(data, context=context)  # type: ignore[return-value]
    except ValidationError as exc:
        from .config.loading import validation_error

        fits = _kind_its_fields_fit(data, str(kind), exc) if cls is not None else None
        if fits is not None:
            raise UserError(
                f"the file says kind: {kind}, but its fields are a {fits} profile's",
                file=file,
                path="kind",
                hint=f"write kind: {fits}",
            ) from None
        raise validation_error(exc, file, root=cls or _Profile) from None


def _kind_its_fields_fit(data: dict[str, Any], kind: str, exc: ValidationError) -> str | None:
    """The one other kind whose fields are all of ``data``'s, where ``kind``'s model finds
    fields it does not know (a GPU file written kind: fabric); None otherwise."""
    if not any(e["type"] == "extra_forbidden" for e in exc.errors()):
        return None
    own = set(data) - {"kind", "base"}
    fit = [
        k
        for k, c in PROFILE_KINDS.items()
        if k != kind and own <= set(c.model_fields) and own & set(c.model_fields) - {"name"}
    ]
    return fit[0] if len(fit) == 1 else None


@lru_cache(maxsize=8)
def _load(dirs: tuple[Path, ...]) -> Catalog:
    return _load_files(dirs, None)


@lru_cache(maxsize=512)
def _load_named(dirs: tuple[Path, ...], name: str) -> Catalog:
    return _load_files(dirs, name)


def _load_files(dirs: tuple[Path, ...], only: str | None) -> Catalog:
    """The catalogue of every profile file in ``dirs``; with ``only``, of the files named for
    that profile alone: what the catalogue holds for a name depends on those files only (a
    profile's name is its file's), so a scenario reads the few profiles it names, not all."""
    cat = Catalog()
    for d in dirs:
        here: dict[str, Path] = {}  # this folder's file for each name
        # (.yml too: a profile a user names that way is not silently left out)
        for path in profile_files(d):
            if only is not None and path.stem != only:
                continue
            try:
                prof = load_profile_file(path)
                if prof.name != path.stem:
                    raise UserError(
                        f"profile name '{prof.name}' differs from the file name",
                        file=str(path),
                        path="name",
                        hint=f"rename the file to {prof.name}.yaml"
                        + (f" or set name: {path.stem}" if _NAME.match(path.stem) else ""),
                    )
            except UserError as err:
                cat.broken[path.stem] = err
                cat.profiles.pop(path.stem, None)
                continue
            had = cat.profiles.get(prof.name)
            if had is not None and had.kind != prof.kind:  # type: ignore[attr-defined]
                # One name, two kinds: a scenario names profiles without their kind, so the
                # later file would hide the earlier one wherever it is asked for. The earlier
                # stays; `profiles list` reports the clash.
                cat.clashes[prof.name] = UserError(
                    f"profile name '{prof.name}' is already the {had.kind} profile in "  # type: ignore[attr-defined]
                    f"{cat.files[prof.name]}; this {prof.kind} profile is ignored",  # type: ignore[attr-defined]
                    file=str(path),
                    path="name",
                    hint="give it another name (the file's and its name: field)",
                )
                continue
            twin = here.get(prof.name)
            if twin is not None and (prof.name in cat.broken or cat.profiles[prof.name] != prof):
                # Two different files in one profile folder (a stale copy in a subfolder, a
                # .yml beside the .yaml): which is meant cannot be told, and sorting order
                # would pick one silently. Neither is used until one goes.
                cat.broken[prof.name] = UserError(
                    f"two files in one profile folder name the profile '{prof.name}': "
                    f"{twin} and {path}",
                    file=str(path),
                    path="name",
                    hint="delete or rename one of them (the file's and its name: field)",
                )
                cat.profiles.pop(prof.name, None)
                continue
            here[prof.name] = path
            cat.broken.pop(prof.name, None)
            if prof.name in cat.profiles and cat.profiles[prof.name] != prof:
                # (an identical copy, as a checkout's own folder beside an installed package,
                # changes nothing and goes unannounced)
                cat.replaced.setdefault(prof.name, cat.files[prof.name])
            cat.profiles[prof.name] = prof
            cat.files[prof.name] = path
    return cat


def load_catalog(name: str | None = None) -> Catalog:
    """The catalogue from every profile folder (cached per set of folders); with ``name``, what
    it holds for that name alone (see :func:`get_profile`)."""
    if name is None:
        return _load(profile_dirs())
    return _load_named(profile_dirs(), name)


def get_profile(name: str, *kinds: str) -> _Profile:
    """The profile ``name`` of one of ``kinds``, reading only the files named for it; an unknown
    or broken one is reported from the whole catalogue (whose names the hint suggests)."""
    try:
        return load_catalog(name).get(name, *kinds)
    except UserError:
        return load_catalog().get(name, *kinds)


def replacement_notes(names: list[str]) -> list[str]:
    """A note for each of ``names`` read from a file that replaces another of the same name
    (``./hardware_profiles`` or ``$CLUSTERSIM_PROFILE_PATH`` over the bundled catalogue), so a
    stray local copy never changes a prediction unannounced."""
    out = []
    for n in dict.fromkeys(names):
        cat = load_catalog(n)
        if n in cat.replaced and n in cat.files:
            out.append(
                f"profile '{n}' is read from {cat.files[n]}, which replaces {cat.replaced[n]}"
            )
    return out


def bundled_scenarios() -> list[Path]:
    return sorted(bundled_scenarios_dir().glob("*.yaml"))
