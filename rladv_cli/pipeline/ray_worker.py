"""The worker side of ``--engine ray`` (docs/ray.md, "How a run goes"): one ``ShardWorker`` actor per Ray worker
holds some of the dataset's shards for the whole run and runs every pass over them.

    created      starts decoding and checking its shards on a thread (``io.read.ShardSet``), and encoding their
                 carried columns into one staged output writer per shard, then imports torch and the passes
    each pass    ``run`` once per shard, in dataset order: the pass over the shard's chunks, from memory while
                 they fit the worker's share of ``--cache-mib``, else from the file; the write pass writes
                 ``staging/<name>`` through that shard's writer

So each shard is decoded once per run, as the local engine decodes its input once, and a pass costs one actor
call per shard. The data's errors (``RladvError``) are returned as values; any other exception is retried here,
after which the worker reads files (a failed pass may have taken kept chunks part-way); a worker that dies is
restarted by Ray (``max_restarts``), reads files from then on, and Ray resubmits its pending calls. Ray itself
is imported only inside the actor's methods.
"""
from __future__ import annotations

import os
import pickle
import sys
import zlib
from typing import Callable, Optional, Sequence

import pyarrow as pa

from ..contract import validation
from ..errors import RladvError
from ..io.read import SWITCH_INTERVAL_S, Shard, ShardSet
from ..io.write import AtomicParquetWriter

def run_shard(worker: "ShardWorker", stage: str, shard: Shard, given: dict, work, known):
    """One pass over one shard (the write pass into the shard's staged writer); the ``task`` a worker runs."""
    import torch

    torch.set_num_threads(work.plan.cfg.threads)
    if stage != "write":
        return work.run(stage, shard, given, known)
    with worker.writer(shard) as sink:
        result = work.run(stage, shard, given, known, sink.write)
        sink.commit()
    return result


class ShardWorker:
    """A Ray actor's state for one run: ``shards`` (in dataset order), their staged output files
    (``staging/<names[shard.index]>``, the output ``schema``, its ``carried`` input columns under the files'
    own ``written`` names), ``chunk_rows`` and ``budget`` bytes of decoded chunks to keep. ``task`` runs one
    pass over one shard (``run_shard``); ``retries``: further attempts of a call that raised."""

    def __init__(self, shards: Sequence[Shard], staging: str, names: dict[int, str], schema: pa.Schema,
                 carried: Sequence[str], written: Sequence[str], chunk_rows: int, budget: int,
                 task: Callable = run_shard, retries: int = 3):
        import ray

        self.staging, self.names, self.schema, self.written = staging, names, schema, written
        self.task, self.retries = task, retries
        self._values: dict[int, tuple[str, object]] = {}
        self._writers: dict[int, AtomicParquetWriter] = {}
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if ray.get_runtime_context().was_current_actor_reconstructed:  # its kept chunks and writers died with it
            self.source = ShardSet(shards, chunk_rows, 0, validation.check_chunk)
        else:
            self._writers = {s.index: AtomicParquetWriter(self._path(s), schema, carried, written) for s in shards}
            self.source = ShardSet(shards, chunk_rows, budget, validation.check_chunk, self._carrying)
        # while the shards are decoded: what every pass needs
        import torch  # noqa: F401

        from . import driver  # noqa: F401

    def _path(self, shard: Shard) -> str:
        return os.path.join(self.staging, self.names[shard.index])

    def _carrying(self, shard: Shard) -> Optional[AtomicParquetWriter]:
        return self._writers.get(shard.index)

    def writer(self, shard: Shard) -> AtomicParquetWriter:
        """The shard's staged writer: the one its carried columns went to, once; a plain one for a retry."""
        return self._writers.pop(shard.index, None) or AtomicParquetWriter(self._path(shard), self.schema,
                                                                          written=self.written)

    def started(self) -> None:
        """Returns once the constructor ran (its shards may still be decoding)."""

    def run(self, stage: str, refs: list, shard: Shard, given: dict) -> bytes:
        """``stage`` over ``shard`` with its per-row inputs ``given``; ``refs``: the run's ``ShardWork`` and what
        the earlier passes established, as Ray object references (fetched once each). The ``ShardResult``, or
        the data's ``RladvError``, pickled (``pack``)."""
        work, known = (self._value(slot, ref) for slot, ref in enumerate(refs))
        work = work.reading(self.source)
        for attempt in range(self.retries + 1):
            try:
                return pack(self.task(self, stage, shard, given, work, known))
            except RladvError as err:
                return pack(err)
            except Exception:
                self.source.read_files()
                writer = self._writers.pop(shard.index, None)
                if writer is not None:
                    writer.abort()
                if attempt == self.retries:
                    raise

    def _value(self, slot: int, ref):
        """The value of ``ref``, fetched once: slot 0 holds the run's work, slot 1 the latest pass's inputs."""
        import ray

        held = self._values.get(slot)
        if held is None or held[0] != ref.hex():
            held = self._values[slot] = (ref.hex(), ray.get(ref))
        return held[1]


def pack(value) -> bytes:
    """Pickled and compressed (fast): a result's value sketches are megabytes of mostly zero counts."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(data: bytes):
    return pickle.loads(zlib.decompress(data))
