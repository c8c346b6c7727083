"""One ``rladv compute --engine ray`` run as a timeline of the driver and of every worker, in seconds from the
start of this process (stderr; one machine, so the processes share a clock).

    python bench/ray_timeline.py compute DIR --engine ray --ray-address HOST:PORT --ray-workers 1 -o OUT [...]

The command runs in this process as the ``rladv`` executable runs it (``cli.main``), with hooks on rladv's own
functions; a hook whose function is gone fails at once. Driver: ``import ray``, ``ray.init``, the actors
requested (``ray_engine.RayWorkers``), each pass's calls submitted and each shard's result received, the actors
stopped, Ray left. Between the actors' request and the first pass the driver imports torch and builds the run;
between passes it merges and reduces. Workers (a subclass of ``ray_worker.ShardWorker`` that notes times into
``$TMPDIR/rladv-timeline``, emptied when this script starts): the process started, the run begun (by a worker
kept from an earlier run, with ``--ray-keep-workers``), its shards' decoding begun and done, the passes imported,
each call begun and done with the seconds it waited for chunks ("read"), and the write pass's ``settle`` (its
shards' files finished). With ``$RLADV_TIMELINE_JSON`` set, the events are also written there as JSON
(``[seconds, who, what]``, in time order), for ``bench/ray_scaling.py``.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

START = time.time()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hooks import wrap  # noqa: E402  (bench/, this script's folder)
from rladv_cli.__main__ import set_environment  # noqa: E402

set_environment()  # as the executable does, before pyarrow and ray load
from rladv_cli import cli  # noqa: E402
from rladv_cli.io import read  # noqa: E402
from rladv_cli.pipeline import ray_engine, ray_worker  # noqa: E402

FOLDER = Path(tempfile.gettempdir()) / "rladv-timeline"  # the workers note into it (a kept worker outlives a run)
shutil.rmtree(FOLDER, ignore_errors=True)
events: list[tuple[float, str, str]] = []


def note(what: str) -> None:
    events.append((time.time() - START, "driver", what))


def process_start() -> float:
    """This process's start, seconds since the epoch (Linux: its age from /proc, to 10 ms)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


class TimedWorker(ray_worker.ShardWorker):
    """``ShardWorker`` noting its times, seconds since the epoch, into ``FOLDER/<pid>.jsonl``."""

    folder = str(FOLDER)

    def _note(self, what: str, at: float | None = None) -> None:
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps([at or time.time(), f"worker {os.getpid()}", what]) + "\n")

    def __init__(self):
        self._note("process started", process_start())
        self._note("actor constructed")
        reading = read.ReadOnce._read

        def timed(once, dataset):
            self._note("decoding its shards begins")
            try:
                return reading(once, dataset)
            finally:
                self._note("decoding its shards done")

        read.ReadOnce._read = timed
        super().__init__()

    def begin(self, refs):
        kept = " (a kept worker, up since an earlier run)" if self._watch is not None else ""
        self._note(f"run begins: {len(self._plan(refs)[1].shards)} shards{kept}")
        super().begin(refs)
        self._note("the passes imported")

    def run(self, stage, refs, shard, given):
        self._note(f"{stage} shard {shard.index} begins")
        packed = super().run(stage, refs, shard, given)
        result = ray_worker.unpack(packed)
        waited = getattr(result, "seconds", {}).get("read", 0.0)
        self._note(f"{stage} shard {shard.index} done (waited {waited:.3f} s for chunks)")
        return packed

    def settle(self, refs, items):
        self._note("settle begins")
        try:
            return super().settle(refs, items)
        finally:
            self._note("settle done")


def hook_driver() -> None:
    wrap(ray_engine, "_import_ray", "import ray begins", "import ray done", note)
    wrap(ray_engine, "_init", "ray.init begins", "ray.init done", note)
    wrap(ray_engine.RayWorkers, "__init__", None, "actors requested (the driver builds the run next)", note)
    wrap(ray_engine.RayWorkers, "close", None, "actors stopped", note)
    calling = ray_engine.RayWorkers.__call__

    def passes(self, stage, work, items, known):
        note(f"{stage} pass begins")
        ray = self.ray
        getting = ray.get

        def got(ref, *args, **kwargs):
            value = getting(ref, *args, **kwargs)
            note(f"{stage}: a shard's result received")
            return value

        ray.get = got
        try:
            return calling(self, stage, work, items, known)
        finally:
            ray.get = getting
            note(f"{stage} pass done")

    ray_engine.RayWorkers.__call__ = passes
    ray_worker.ShardWorker = TimedWorker


def report() -> None:
    note("exit")
    for path in FOLDER.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            at, who, what = json.loads(line)
            events.append((at - START, who, what))
    shutil.rmtree(FOLDER, ignore_errors=True)
    events.sort()
    for t, who, what in events:
        print(f"{t:7.3f} s  {who:>14}  {what}", file=sys.stderr)
    if os.environ.get("RLADV_TIMELINE_JSON"):
        Path(os.environ["RLADV_TIMELINE_JSON"]).write_text(json.dumps(events))


hook_driver()
atexit.register(report)
sys.argv = ["rladv", *sys.argv[1:]]
cli.main()
