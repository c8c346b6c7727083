"""The ``rladv`` command: a thin typer layer over the library, and the one place errors become exit codes.
``commands`` holds the commands, ``options`` the options they share, ``help`` the help text (80 columns,
panels, examples; docs/cli.md is generated from it), ``process`` the executable around them (signals, exit
codes), ``progress`` the progress bar."""
from .commands import app
from .process import main

__all__ = ["app", "main"]
