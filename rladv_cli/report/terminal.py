"""Tables for the terminal: rich's, whose cells fold onto another line instead of ending in an ellipsis when the
terminal is narrow, so that a number is never shown cut (``-7.451e…`` for ``-7.451e-08``)."""
from __future__ import annotations

from rich.table import Table as RichTable


class Table(RichTable):
    """``rich.table.Table`` whose columns, declared or made by ``add_row``, fold what does not fit."""

    def add_column(self, *args, overflow: str = "fold", **kwargs) -> None:
        super().add_column(*args, overflow=overflow, **kwargs)

    def add_row(self, *renderables, **kwargs) -> None:
        while len(self.columns) < len(renderables):
            self.add_column()
        super().add_row(*renderables, **kwargs)
