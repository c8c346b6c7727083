"""One ``rladv compute`` run as a timeline: when each phase begins and ends, in seconds from the start of this
process (stderr).

    python bench/timeline.py compute --estimator gae DATA.parquet -o OUT.parquet [any rladv compute option]

The command runs in this process as the ``rladv`` executable runs it (``rladv_cli.__main__``: its settings, the
prefetch of its input, then ``cli.main``, exit included), with hooks on rladv's own functions that note the time:
  prefetch          the input file decoded before the command line loads (``io.prefetch``), begun and done
  import passes     the pipeline (and torch, on a GPU run) imported, begun and done (``api._pipeline_imported``)
  reading           the thread that decodes and checks the whole input (``io.read.ReadOnce``), begun and done
  carried columns   their early encoding (``write._Carried``): the first begun, the last done, and how many row
                    groups were encoded on the background threads and how many by their row group's own task
  copied columns    or, where they are copied from the input (``io.column_copy``), when the last row group's
                    chunks were handed to the joiner, and how many row groups were
  passes            each pass over the data, begun and done (``pipeline.Pipeline._map``)
  report            its numbers put together after the last pass (``build_report``), begun and done
  output            the last row group appended and the footer written (``parquet_join.RowGroupJoiner.finish``)
  committed         the output in place (``io.write.AtomicParquetWriter.commit``)
  exit              the exit handlers run; the process ends right after
So where a run waits (a GPU host's slow ``import torch``, a pass that cannot begin before the reading ends)
shows without a profiler. A hook whose function is gone fails at once, not silently.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hooks import wrap  # noqa: E402  (bench/, this script's folder)
from rladv_cli.__main__ import set_environment  # noqa: E402

events: list[tuple[float, str]] = []
carried = {"background": 0, "own task": 0}
lock = threading.Lock()


def note(what: str) -> None:
    with lock:
        events.append((time.perf_counter() - START, what))


set_environment()  # as the executable does, before pyarrow loads (its allocator is chosen then)
from rladv_cli.io import prefetch  # noqa: E402

wrap(prefetch.Prefetch, "_decode", "prefetch begins", "prefetch done", note)
prefetch.start(sys.argv[1:])  # as the executable does, before the command line loads
from rladv_cli import api, cli  # noqa: E402
from rladv_cli.io import column_copy, parquet_join, read, write  # noqa: E402


def hook_import() -> None:
    imported = api._pipeline_imported

    @contextmanager
    def timed(*args):
        note("import passes begins")
        with imported(*args) as pipeline:
            note("import passes done")
            stage_of = pipeline.Pipeline._map

            def mapped(self, map_shards, stage, *args):
                note(f"{stage} pass begins")
                try:
                    return stage_of(self, map_shards, stage, *args)
                finally:
                    note(f"{stage} pass done")

            pipeline.Pipeline._map = mapped
            wrap(pipeline, "build_report", "report begins", "report done", note)
            yield pipeline

    api._pipeline_imported = timed


def hook_carried() -> None:
    init = write._Carried.__init__

    def counted_init(self, table, encode):
        def encoded(rows):
            background = threading.current_thread().name.startswith("rladv-carry")
            with lock:
                carried["background" if background else "own task"] += 1
                first = sum(carried.values()) == 1
            if first:
                note("carried columns: first row group begins")
            part = encode(rows)
            note("carried columns: a row group done")
            return part

        init(self, table, encoded)

    write._Carried.__init__ = counted_init


def report() -> None:
    note("exit")
    done = [t for t, what in events if what == "carried columns: a row group done"]
    copied = [t for t, what in events if what == "copied columns: a row group"]
    lines = [(t, what) for t, what in events if what not in ("carried columns: a row group done",
                                                              "copied columns: a row group")]
    if done:
        lines.append((max(done), f"carried columns: last row group done ({carried['background']} on the background "
                                 f"threads, {carried['own task']} by their row group's task)"))
    if copied:
        lines.append((max(copied), f"copied columns: the last row group's chunks handed out ({len(copied)} row "
                                   "groups)"))
    for t, what in sorted(lines):
        print(f"{t:7.3f} s  {what}", file=sys.stderr)


hook_import()
hook_carried()
wrap(read.ReadOnce, "_read", "reading begins", "reading done", note)
wrap(column_copy.CopyPlan, "part", None, "copied columns: a row group", note)
wrap(parquet_join.RowGroupJoiner, "finish", None, "output: the last row group in, the footer written", note)
wrap(write.AtomicParquetWriter, "commit", None, "output committed", note)
atexit.register(report)
sys.argv = ["rladv", *sys.argv[1:]]
cli.main()
