"""Finding the file a command names: a path as given, or a bundled scenario or sweep spec by
its name or by the README's path (``scenarios/NAME.yaml``) from another folder; each miss one
message saying what the name is (a sweep given as a scenario, a folder, a dangling link) and
what is close."""

from __future__ import annotations

from pathlib import Path

from .catalog import bundled_scenarios_dir
from .errors import UserError, closest


def _may_be_bundled(name: str, folder: tuple[str, ...]) -> bool:
    """Whether a path that is not there may name a bundled file: a bare name, or a path in the
    bundled layout (``scenarios/NAME.yaml``, ``scenarios/sweeps/NAME.yaml``: the README's
    commands, run from another folder). A path into any other folder names the user's own file,
    so a typo in it must not silently run a bundled file of the same name."""
    if name.startswith(("./", ".\\")):
        return False  # the current folder named outright (a Path drops the leading ./)
    parts = Path(name).parent.parts
    return not parts or parts[-len(folder) :] == folder


def _not_empty(name: str, what: str, example: str) -> None:
    """An empty or blank argument (a shell variable that was never set) names no file: it is
    not the current folder."""
    if not name.strip():
        raise UserError(
            f"no {what} file given (the argument is {'empty' if not name else 'blank'})",
            hint=f"give a {what} YAML file, or a bundled one by name ({example})",
        )


def find_sweep(name: str) -> Path:
    """A sweep spec: the path as given, or a bundled sweep (``scenarios/sweeps/``) by file name
    or stem."""
    _not_empty(name, "sweep spec", "scale-up-vs-scale-out")
    p = Path(name)
    if p.exists() or not _may_be_bundled(name, ("scenarios", "sweeps")):
        return p
    bundled = bundled_scenarios_dir() / "sweeps"
    for cand in (bundled / p.name, bundled / f"{p.name}.yaml", bundled / f"{p.stem}.yaml"):
        if cand.is_file():
            return cand
    sweeps = [q.stem for q in sorted(bundled.glob("*.yaml"))]
    if (bundled.parent / f"{p.stem}.yaml").is_file():
        raise UserError(
            "is a bundled scenario, not a sweep spec",
            file=name,
            hint=f"run it with clustersim simulate {p.stem}, or give a sweep spec whose "
            f"base is it (bundled sweeps: {', '.join(sweeps)})",
        )
    near = closest(p.stem, sweeps)
    if near:
        raise UserError(
            "no such sweep spec file",
            file=name,
            hint=f"bundled sweeps that look close: {', '.join(near)}",
        )
    if not p.suffix:  # a bare name, as a bundled sweep is given: none is called that
        raise UserError(
            "no such sweep spec file",
            file=name,
            hint=f"check the path; the bundled sweeps are {', '.join(sweeps)}",
        )
    if not p.exists() and not p.is_symlink():
        raise UserError(
            "no such sweep spec file",
            file=name,
            hint=f"check the path; the bundled sweeps are {', '.join(sweeps)}",
        )
    return p


def find_scenario(name: str) -> Path:
    """A scenario file: the path as given, or a bundled scenario by file name or stem."""
    _not_empty(name, "scenario", "llama3-8b-8xh100")
    p = Path(name)
    if p.is_file():
        return p
    if p.exists():
        raise UserError(
            "is a folder, not a scenario file" if p.is_dir() else "is not a regular file",
            file=name,
            hint="give a scenario YAML file",
        )
    if p.is_symlink():
        raise UserError(
            "is a symbolic link to nothing readable (a file that is gone, or a link that "
            "loops back to itself)",
            file=name,
            hint="point the link at the scenario file, or give the file itself",
        )
    bundled = bundled_scenarios_dir()
    if p.parent.parts[-2:] == ("scenarios", "sweeps") and (bundled / "sweeps" / p.name).is_file():
        raise UserError(
            "is a bundled sweep spec, not a scenario",
            file=name,
            hint=f"run it with clustersim sweep {p.stem}",
        )
    if not _may_be_bundled(name, ("scenarios",)):
        same = bundled / f"{p.stem}.yaml"
        raise UserError(
            "no such scenario file",
            file=name,
            hint=f"check the path; for the bundled scenario of that name give just {p.stem}"
            if same.is_file()
            else "check the path",
        )
    for cand in (bundled / p.name, bundled / f"{p.name}.yaml", bundled / f"{p.stem}.yaml"):
        if cand.is_file():
            return cand
    if (bundled / "sweeps" / f"{p.stem}.yaml").is_file():
        raise UserError(
            "is a bundled sweep, not a scenario",
            file=name,
            hint=f"run it with clustersim sweep {p.stem}",
        )
    near = closest(p.stem, [q.stem for q in bundled.glob("*.yaml")])
    hint = f"bundled scenarios that look close: {', '.join(near)}" if near else None
    raise UserError("no such scenario file", file=name, hint=hint or "check the path")


__all__ = ["find_scenario", "find_sweep"]
