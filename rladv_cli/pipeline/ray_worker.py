"""The worker side of ``--engine ray`` (docs/ray.md, "How a run goes"): a ``ShardWorker`` actor holds some of
the dataset's shards for a run (``Holding``, from the run's ``RunPlan``) and runs every pass over them.

    begin        starts decoding and checking the plan's shards on a thread (``io.read.ShardSet``), and
                 encoding their carried columns into one staged output writer per shard once they are all
                 decoded, then imports the passes (at once for a worker that already ran, which a kept worker
                 has); a worker runs on the CPU, on numpy, and never imports torch (docs/arrays.md)
    each pass    ``run`` once per shard, in dataset order: the pass over the shard's chunks, from memory while
                 they fit the worker's share of ``--cache-mib``, else from the file; the write pass writes
                 ``staging/<name>`` through that shard's writer, whose last row groups are encoded and the file
                 finished on a thread while the next shard's call computes
    settle       after the write pass: every shard of the worker is in its staged file (a shard whose file
                 failed, or went with a worker that died, is written again here)
    end          drops what the run held (a worker kept with ``--ray-keep-workers`` waits for the next run)

So each shard is decoded once per run, as the local engine decodes its input once, and a pass costs one actor
call per shard. The data's errors (``RladvError``) are returned as values; any other exception is retried here,
after which the worker reads files (a failed pass may have taken kept chunks part-way); a worker that dies is
restarted by Ray (``max_restarts``), holds nothing then, reads files from then on, and Ray resubmits its pending
calls. A kept worker stops itself once it has held no run for ``RunPlan.keep_s`` seconds. Ray itself is
imported only inside the actor's methods.
"""
from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Optional

import pyarrow as pa

from ..contract import validation
from ..errors import RladvError
from ..io.read import SWITCH_INTERVAL_S, Shard, ShardSet
from ..io.write import AtomicParquetWriter


def run_shard(held: "Holding", stage: str, shard: Shard, given: dict, work, known):
    """One pass over one shard; a plan's default ``task``. The write pass's rows go to the shard's staged writer,
    which ``held.finish`` commits on a thread (``Holding.settled`` says whether it did)."""
    if stage != "write":
        return work.run(stage, shard, given, known)
    with held.writer(shard) as sink:
        result = work.run(stage, shard, given, known, sink.write)
    held.finish(shard, sink)
    return result


@dataclass(frozen=True)
class RunPlan:
    """What a worker holds for one run: its ``shards`` (in dataset order), their staged output files
    (``staging/<names[shard.index]>``, the output ``schema``, its ``carried`` input columns under the files'
    own ``written`` names), ``chunk_rows`` and ``budget`` bytes of decoded chunks to keep; ``task`` runs one
    pass over one shard (``run_shard``), ``retries`` further attempts of a call that raised; ``keep_s``: how
    long the worker waits for another run once this one ended (0: it is stopped with the run)."""
    shards: tuple[Shard, ...]
    staging: str
    names: dict[int, str]
    schema: pa.Schema
    carried: tuple[str, ...]
    written: tuple[str, ...]
    chunk_rows: int
    budget: int
    task: Callable = run_shard
    retries: int = 3
    keep_s: float = 0.0


class Holding:
    """One run's state on a worker: its shards' source (decoded chunks while ``decode``, else the files) and
    one staged writer per shard, which already received the shard's carried columns while ``decode``."""

    def __init__(self, plan: RunPlan, decode: bool):
        self.plan = plan
        self.values: dict[int, tuple[str, object]] = {}  # slot -> (object reference, value), ``ShardWorker._value``
        self._writers: dict[int, AtomicParquetWriter] = {}
        self._finisher = ThreadPoolExecutor(1, thread_name_prefix="rladv-finish")
        self._finishing: dict[int, Future] = {}  # shard index -> its writer's commit
        self._latest: Optional[Future] = None
        if decode:
            self._writers = {s.index: AtomicParquetWriter(self.staged(s), plan.schema, plan.carried, plan.written,
                                                          [s.path]) for s in plan.shards}
            self.source = ShardSet(plan.shards, plan.chunk_rows, plan.budget, validation.check_chunk,
                                   self._carrying)
        else:
            self.source = ShardSet(plan.shards, plan.chunk_rows, 0, validation.check_chunk)

    def _carrying(self, shard: Shard) -> Optional[AtomicParquetWriter]:
        """The writer that takes the shard's carried columns as they are decoded (``ShardSet``'s ``writer_of``)."""
        return self._writers.get(shard.index)

    def staged(self, shard: Shard) -> str:
        return os.path.join(self.plan.staging, self.plan.names[shard.index])

    def writer(self, shard: Shard) -> AtomicParquetWriter:
        """The shard's staged writer: the one its carried columns went to, once; a plain one for a retry."""
        return self._writers.pop(shard.index, None) or AtomicParquetWriter(
            self.staged(shard), self.plan.schema, self.plan.carried, self.plan.written, [shard.path])

    def finish(self, shard: Shard, sink: AtomicParquetWriter) -> None:
        """Commit ``sink`` (the shard's rows all written) on the finishing thread, once the shard before it is
        finished: so the next shard computes while this one's last row groups are encoded, and at most one
        writer is finishing at a time."""
        if self._latest is not None:
            wait([self._latest])
        self._latest = self._finishing[shard.index] = self._finisher.submit(_commit, sink)

    def settled(self, shard: Shard) -> bool:
        """Whether the shard's staged file is there, once its commit (if this process began one) is done; a
        commit that failed is raised here, after ``failed``. (A worker restarted since the shard's write pass
        lost its commit: the file is not there.)"""
        finishing = self._finishing.pop(shard.index, None)
        if finishing is not None:
            try:
                finishing.result()
            except BaseException:
                self.failed(shard)
                raise
        return os.path.exists(self.staged(shard))

    def failed(self, shard: Shard) -> None:
        """After a call that raised: every later pass reads the files, and the shard's writer is dropped."""
        self.source.read_files()
        writer = self._writers.pop(shard.index, None)
        if writer is not None:
            writer.abort()

    def close(self) -> None:
        """At the run's end: the kept chunks and the writers no pass took are dropped."""
        self._finisher.shutdown()
        self.source.read_files()
        for writer in self._writers.values():
            writer.abort()
        self._writers.clear()


class ShardWorker:
    """A Ray actor that runs passes over the shards of the runs it holds (``Holding``, keyed by the object
    reference of the run's ``RunPlan``), one call at a time."""

    def __init__(self):
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        _jemalloc_pool()
        self._held: dict[str, Holding] = {}
        self._idle_since, self._keep_s, self._retiring = time.monotonic(), 0.0, False
        self._watch: Optional[threading.Thread] = None  # a kept worker's, from the end of its first run

    def begin(self, refs: list) -> None:
        """Hold the run of ``refs[0]`` (its ``RunPlan``): start decoding its shards, then import what every pass
        needs (while the shards are decoded). Returns once both began and the passes are imported."""
        key, plan = self._plan(refs)
        if key not in self._held:
            self._held[key] = Holding(plan, decode=True)
        from . import driver  # noqa: F401

    def run(self, stage: str, refs: list, shard: Shard, given: dict) -> bytes:
        """``stage`` over ``shard`` with its per-row inputs ``given``; ``refs``: the run's ``RunPlan``, its
        ``ShardWork`` and what the earlier passes established, as Ray object references (fetched once each).
        The ``ShardResult``, or the data's ``RladvError``, pickled (``pack``)."""
        held = self._holding(refs)
        work, known = self._inputs(held, refs)
        return pack(self._attempts(held, stage, shard, given, work, known))

    def settle(self, refs: list, items: list) -> bytes:
        """After the write pass (``refs`` as in ``run``): ``None`` once each of ``items`` (this worker's shards, with
        the object references of their write-pass inputs) is in its staged file. A shard whose commit failed, or
        whose file is not there, is written again, from its input file, as a call that raised is (``_attempts``).
        The data's ``RladvError``, if any. Pickled (``pack``)."""
        import ray

        held = self._holding(refs)
        for shard, given in items:
            try:
                if held.settled(shard):
                    continue
            except Exception:  # noqa: BLE001 - the commit failed: written again below
                pass
            held.source.read_files()  # the write pass took the kept chunks
            work, known = self._inputs(held, refs)
            result = self._attempts(held, "write", shard, ray.get(given), work, known, settle=True)
            if isinstance(result, RladvError):
                return pack(result)
        return pack(None)

    def _holding(self, refs: list) -> Holding:
        """What this worker holds for the run of ``refs[0]``; a restarted worker (what it held died with it)
        holds it anew, reading files."""
        key, plan = self._plan(refs)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = Holding(plan, decode=False)
        return held

    def _inputs(self, held: Holding, refs: list) -> tuple:
        """The run's ``ShardWork`` (reading the held shards) and what the earlier passes established."""
        work, known = (self._value(held, slot, ref) for slot, ref in enumerate(refs[1:]))
        return work.reading(held.source), known

    @staticmethod
    def _attempts(held: Holding, stage: str, shard: Shard, given: dict, work, known, settle: bool = False):
        """The plan's task over ``shard``, tried again after an exception (then reading files), ``retries`` times;
        the data's ``RladvError`` is returned. With ``settle``, the shard's file is committed before it returns."""
        for attempt in range(held.plan.retries + 1):
            try:
                result = held.plan.task(held, stage, shard, given, work, known)
                if settle and not held.settled(shard):
                    raise OSError(f"{held.staged(shard)}: not there after its commit")
                return result
            except RladvError as err:
                return err
            except Exception:
                held.failed(shard)
                if attempt == held.plan.retries:
                    raise

    def end(self, refs: list) -> None:
        """Drop what the run of ``refs[0]`` held; a worker holding no run stops itself after the plan's
        ``keep_s`` seconds, unless another run begins first."""
        key, plan = self._plan(refs)
        held = self._held.pop(key, None)
        if held is not None:
            held.close()
        if not self._held:
            if self._retiring:
                threading.Thread(target=self._stop, daemon=True).start()  # once this call returned
            pa.default_memory_pool().release_unused()
            self._idle_since, self._keep_s = time.monotonic(), plan.keep_s
            if self._watch is None and plan.keep_s > 0:
                self._watch = threading.Thread(target=self._stop_when_idle, daemon=True)
                self._watch.start()

    def retire(self) -> None:
        """Stop as soon as no run is held, not waiting ``keep_s`` (now, for a kept worker that waits): a run that
        wants kept workers of another shape asks, for their CPUs."""
        self._retiring = True
        if not self._held and self._watch is not None:
            threading.Thread(target=self._stop, daemon=True).start()

    def _stop_when_idle(self) -> None:
        """The kept worker's watch: once a second, whether it has held no run for the latest plan's ``keep_s``."""
        while self._held or time.monotonic() - self._idle_since < self._keep_s:
            time.sleep(min(self._keep_s, 1.0))
        self._stop()

    @staticmethod
    def _stop() -> None:
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def _plan(self, refs: list) -> tuple[str, RunPlan]:
        key = refs[0].hex()
        held = self._held.get(key)
        if held is not None:
            return key, held.plan
        import ray

        return key, ray.get(refs[0])

    @staticmethod
    def _value(held: Holding, slot: int, ref):
        """The value of ``ref``, fetched once per run: slot 0 holds the run's work, slot 1 the latest pass's
        inputs."""
        import ray

        value = held.values.get(slot)
        if value is None or value[0] != ref.hex():
            value = held.values[slot] = (ref.hex(), ray.get(ref))
        return value[1]


def _jemalloc_pool() -> None:
    """Arrow's buffers from jemalloc, as in the ``rladv`` executable (``cli.process.main``), unless the worker's
    environment names a pool (``ARROW_DEFAULT_MEMORY_POOL``): a Ray worker starts with the environment of the
    node's raylet, not the driver's. With pyarrow's default mimalloc, a kept worker idle for a few seconds
    decoded the next run's shards in 1.7 s instead of 0.9 s (docs/ray.md, "How a run goes")."""
    if sys.platform.startswith("linux") and "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without it
            pass


def _commit(sink: AtomicParquetWriter) -> None:
    try:
        sink.commit()
    except BaseException:
        sink.abort()
        raise


def pack(value) -> bytes:
    """Pickled and compressed (fast): a result's value sketches are megabytes of mostly zero counts."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(data: bytes):
    return pickle.loads(zlib.decompress(data))
