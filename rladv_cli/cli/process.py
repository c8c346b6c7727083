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
    (``app`` itself, as tests and embedders call it, exits normally.) The process's settings come first
    (``set_environment``)."""
    set_environment()
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


def set_environment() -> None:
    """The executable's process settings, unless the environment gives its own (each is read once, when its
    library loads, so they are set before anything imports numpy, pyarrow or ray; the bench timelines call this
    first too):
    - ``OPENBLAS_NUM_THREADS=1``: rladv makes no BLAS calls through numpy, whose OpenBLAS otherwise starts a
      thread per core that spins for ~0.1 s of CPU at start-up, while the input is read and the passes imported;
    - on Linux, ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` (pyarrow's Linux wheels ship it): with the default
      mimalloc, freed chunk buffers go back to the system and come back as fresh (zero-filled, often huge)
      pages, ~0.4 s of kernel time per 20M tokens; jemalloc reuses them (and peaks ~150 MB lower);
    - ``RAY_task_events_report_interval_ms=0`` (``--engine ray``): this process does not report its calls' state
      changes to Ray's task table (a cluster's workers still report theirs; the processes of the local cluster
      rladv starts inherit it), whose reporter held ``ray.shutdown`` 0.25 s at the end of every run
      (docs/ray.md, "How a run goes")."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.platform.startswith("linux"):
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    os.environ.setdefault("RAY_task_events_report_interval_ms", "0")


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
