"""A progress bar per pass on a terminal (rich), for the commands that read a whole dataset."""
from __future__ import annotations


def _row_rate_column():
    """A progress column: the pass's rows per second (blank until rich has measured it)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RowRate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:,.0f} rows/s" if task.speed else "", style="progress.data.speed")

    return RowRate()


class progress:
    """A rich progress bar per pass (rows, rate, ETA) on a terminal; a no-op callback otherwise."""

    def __init__(self, console, enabled: bool):
        self.console, self.enabled, self.bar, self.tasks = console, enabled, None, {}

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("rows"), _row_rate_column(), TimeRemainingColumn(), console=self.console, transient=True)
        self.bar.start()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{stage} pass", total=total)
        self.bar.update(self.tasks[stage], completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
