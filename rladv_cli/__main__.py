"""The ``rladv`` executable, and ``python -m rladv_cli``.

Ctrl-C while Python loads the command line (typer and rich, about 0.2 s, before ``cli.main`` is there to
unwind a run) exits 130 at once, quietly, instead of printing a KeyboardInterrupt traceback from inside an
import: nothing has been read or written yet. A caller that ignores SIGINT (``nohup``) keeps ignoring it.
"""
import os
import signal


def main() -> None:
    quiet = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if quiet:
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))
    from .cli import main as run

    if quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run()


if __name__ == "__main__":
    main()
