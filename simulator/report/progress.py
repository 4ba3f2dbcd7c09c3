"""Progress bars on stderr for long commands (probe, validate, full-mode simulation).

Transient: the bar disappears when the work ends, so only results stay on the terminal; on a
console that is not a terminal (a pipe, CI, a test) rich draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

Update = Callable[..., None]


@contextmanager
def progress_bar(console: Console, description: str, total: float) -> Iterator[Update]:
    """A bar of ``total`` units; yields ``update(completed, text=None, total=None)``."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)

        def update(completed: float, text: str | None = None, total: float | None = None) -> None:
            bar.update(task, completed=completed, description=text, total=total)

        yield update
