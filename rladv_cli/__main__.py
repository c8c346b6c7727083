"""The ``rladv`` executable, and ``python -m rladv_cli``.

Before it loads the command line (typer, pydantic, rich: about 0.2 s) it sets the process's settings
(``set_environment``) and, for ``compute`` of one Parquet file, begins decoding that file on a thread
(``io.prefetch``), so that the loading and the reading overlap.

Ctrl-C meanwhile (before ``cli.main`` is there to unwind a run) exits 130 at once, quietly, instead of printing a
KeyboardInterrupt traceback from inside an import: nothing has been written yet. A caller that ignores SIGINT
(``nohup``) keeps ignoring it.
"""
import os
import signal
import sys


def main() -> None:
    quiet = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if quiet:
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))
    set_environment()
    from .io import prefetch

    prefetch.start(sys.argv[1:])
    from .cli import main as run

    if quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run()


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


if __name__ == "__main__":
    main()
