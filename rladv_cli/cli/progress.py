"""A progress bar per pass on a terminal (rich), for the commands that read a whole dataset."""
from __future__ import annotations

import os
import sys
from typing import Callable


def _row_rate_column():
    """A progress column: the pass's rows per second (blank until rich has measured it)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RowRate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:,.0f} rows/s" if task.speed else "", style="progress.data.speed")

    return RowRate()


def may_be_terminal() -> bool:
    """False where rich would not take stderr for a terminal either (not a tty, and neither ``TTY_COMPATIBLE=1``
    nor ``FORCE_COLOR`` says it is one), so that a piped or redirected run does not import rich before its
    input is read (docs/performance.md, "Start-up")."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        tty = False
    return tty or os.environ.get("TTY_COMPATIBLE") == "1" or bool(os.environ.get("FORCE_COLOR"))


class progress:
    """A rich progress bar per pass (rows, rate, ETA) where ``console()`` (called only when ``enabled``) makes
    a rich console on a terminal; a no-op callback otherwise."""

    def __init__(self, console: Callable[[], object], enabled: bool):
        self.console, self.enabled, self.bar, self.tasks = console, enabled, None, {}

    def __enter__(self):
        if not self.enabled:
            return None
        console = self.console()
        if not console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("rows"), _row_rate_column(), TimeRemainingColumn(), console=console, transient=True)
        self.bar.start()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{stage} pass", total=total)
        self.bar.update(self.tasks[stage], completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
