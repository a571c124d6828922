"""Progress with counts for the long commands (verify, archive add, rescore, corpus): a rich
progress bar with the counts on a terminal, transient, on standard error; nothing when the
output is not a terminal (a pipe or a file gets only the results)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["Progress"]


class Progress:
    """A rich progress bar on a terminal (nothing otherwise)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.progress: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar

            # The label, the bar, the counts ("120/1000", "120/?" while the total is not
            # known) and the time so far.
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self.progress = Bar(*columns, transient=True, console=Console(stderr=True))
            self.task = self.progress.add_task(label, total=None)
            self.progress.start()

    def update(self, done: int, total: int | None = None) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=total)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
