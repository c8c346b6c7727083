"""The ``rladv`` executable around the commands: its process settings, signals and exit code."""
from __future__ import annotations

import atexit
import os
import signal
import sys

from ..errors import TERMINATION_SIGNALS, Interrupted
from .commands import app


def main() -> None:
    """The ``rladv`` executable. Once torch is imported (a run that may use CUDA), finalising the interpreter
    (tearing down every module the process is about to drop anyway) takes about 0.45 s; so after the command
    the exit handlers run, the output streams are flushed, and the process leaves with ``os._exit`` and the
    command's code.
    (``app`` itself, as tests and embedders call it, exits normally.) The executable (``rladv_cli.__main__``)
    has set the process's settings before it came here."""
    _raise_on_termination()
    try:
        app(prog_name="rladv")
        code = 0
    except SystemExit as stop:
        code = stop.code
    except Interrupted as stop:  # SIGTERM / SIGHUP: every cleanup ran on the way out, as for SIGINT
        code = 128 + stop.signum
    if hasattr(signal, "pthread_sigmask"):  # the command is over: a late signal changes nothing (its files are
        signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION_SIGNALS)  # complete) and must not print from a handler
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), or a closed stream
            pass
    os._exit(code or 0)


def _raise_on_termination() -> None:
    """SIGTERM and SIGHUP raise ``Interrupted`` in the main thread, as SIGINT raises ``KeyboardInterrupt``: the
    run unwinds through its cleanups (temporary output, report and page removed) and the executable exits
    with ``128 + signal``. A further SIGTERM/SIGHUP is ignored meanwhile, so the cleanup is not cut short.
    Signals the caller set to be ignored (``nohup``) stay ignored."""

    def handler(signum, frame):
        for sig in TERMINATION_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    for sig in TERMINATION_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, handler)
