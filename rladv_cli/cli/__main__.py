"""``python -m rladv_cli.cli [docs/cli.md]``: write the command-line reference (every command's --help) to the
file, or print it."""
import sys

import typer.main

from .commands import app
from .help import reference

text = reference(typer.main.get_command(app))
if len(sys.argv) > 1:
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write(text)
else:
    sys.stdout.write(text)
