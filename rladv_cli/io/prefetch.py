"""``rladv compute``'s input file, decoded while the executable is still loading its command line.

Before ``compute`` can parse its options, Python loads typer, pydantic and rladv's settings: about 0.15 s of one
core (docs/performance.md, "Start-up"), during which nothing is read. So the ``rladv`` executable first looks in
its arguments for the one Parquet file that ``compute`` reads (``start``) and begins decoding it on a thread, in
the chunks the run's read would decode (pyarrow decodes without holding the GIL, so on a second core). The
run's read (``ReadOnce``) takes those chunks (``claim``, then ``Prefetch.batches``) only where they are what it
would decode itself: the same file, unchanged since (its device, inode, size and modification time), in chunks
of the same size. Anything else (a folder, several files, another chunk size, ``--where``, ``--engine ray``, a
file that would not be kept in memory) leaves them unused, and the run reads as always. What ``start`` reads
from the arguments only decides whether this work is done early, never what a run computes; a file it cannot
decode is left to the run, which reports the problem.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# The defaults of ``Config.chunk_rows`` and ``Config.cache_mib`` (a test keeps them equal): the executable looks
# for its input before the settings are loaded.
CHUNK_ROWS = 512
CACHE_MIB = 512
# compute's options whose value is a Parquet file it writes, not one it reads
OUTPUT_OPTIONS = frozenset({"-o", "--output", "--groups-out", "--rows-out"})

_pending: list["Prefetch"] = []  # the one prefetch ``start`` began, until ``claim`` takes it


def decoded_bytes(f: "pq.ParquetFile") -> int:
    """About what a file's columns take decoded: the uncompressed size of its row groups, from the footer.
    (Column chunks' own metadata would be closer, but reading it from a corrupt footer can abort the
    process.) Dictionary-encoded columns decode larger; ``ReadOnce`` checks the real sizes as it goes."""
    return sum(f.metadata.row_group(g).total_byte_size for g in range(f.metadata.num_row_groups))


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells a file from its next version (``os.stat``/``os.fstat``): device, inode, size, modification
    time (ns)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Prefetch:
    """``path`` decoded on a thread in batches of ``chunk_rows`` rows, as ``Shard.chunks`` reads it, when it
    decodes to at most ``budget`` bytes (its footer's estimate, then the batches' own sizes: past it, what was
    decoded is dropped)."""

    def __init__(self, path: str, chunk_rows: int, budget: int):
        self.path, self.chunk_rows = path, chunk_rows
        self._identity: Optional[tuple[int, int, int, int]] = None
        self._batches: Optional[list[pa.RecordBatch]] = None
        self._thread = threading.Thread(target=self._decode, args=(budget,), name="rladv-prefetch", daemon=True)
        self._thread.start()

    def _decode(self, budget: int) -> None:
        import pyarrow.parquet as pq

        try:
            before = identity(os.stat(self.path))
            f = pq.ParquetFile(self.path, pre_buffer=False)  # as ``read.open_parquet`` opens it
            if decoded_bytes(f) > budget:
                return
            batches, held = [], 0
            for batch in f.iter_batches(batch_size=self.chunk_rows):
                held += batch.nbytes
                if held > budget:  # larger decoded than its footer said (dictionary-encoded columns)
                    return
                batches.append(batch)
            if identity(os.stat(self.path)) == before:  # not rewritten while it was decoded
                self._identity, self._batches = before, batches
        except Exception:  # noqa: BLE001 - the run's own read meets the problem and names it
            pass

    def batches(self, path: str, chunk_rows: int) -> Optional[Iterator["pa.RecordBatch"]]:
        """The decoded batches (once the thread is done), in order, when they are what reading ``path`` in chunks
        of ``chunk_rows`` rows gives now; else None. Handed out once, each let go of as it is taken: what the
        caller makes of a batch (a cast copy, say) does not sit in memory beside it."""
        self._thread.join()
        batches, self._batches = self._batches, None
        if batches is None or chunk_rows != self.chunk_rows:
            return None
        try:
            same = identity(os.stat(path)) == self._identity
        except OSError:
            return None
        return _taken(batches) if same else None


def _taken(batches: list["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    """``batches`` in order, each dropped from the list as it is yielded."""
    batches.reverse()
    while batches:
        yield batches.pop()


def start(argv: Sequence[str]) -> None:
    """Begin decoding the input of ``rladv ARGV`` when it is ``compute`` of one Parquet file that the run will
    keep in memory and read in this process (see the module's docstring)."""
    found = input_file(argv)
    if found is not None:
        import pyarrow.parquet  # noqa: F401  (here: an import on the thread would hold up the command line's)

        path, chunk_rows, cache_mib = found
        _pending[:] = [Prefetch(path, chunk_rows, cache_mib << 20)]


def input_file(argv: Sequence[str]) -> Optional[tuple[str, int, int]]:
    """``(path, chunk rows, cache MiB)`` when ``argv`` is ``compute`` with one existing ``.parquet`` file among
    its arguments (values of ``OUTPUT_OPTIONS`` aside), read in this process (no ``--where``, no ``--engine``
    other than ``local``) with a cache that is not 0, and no ``--help``; else None."""
    if not argv or argv[0] != "compute":
        return None
    files, chunk_rows, cache_mib = [], CHUNK_ROWS, CACHE_MIB
    args = iter(argv[1:])
    for arg in args:
        name, eq, value = arg.partition("=")
        if name.startswith("-") and not eq and name in (*OUTPUT_OPTIONS, "--where", "--engine", "--chunk-rows",
                                                         "--cache-mib"):
            value = next(args, "")
        if name in ("--where", "--help", "-h") or (name == "--engine" and value != "local"):
            return None
        if name in ("--chunk-rows", "--cache-mib"):
            if not value.isdigit() or int(value) >= 1 << 31:  # not a value the settings take
                return None
            chunk_rows, cache_mib = (int(value), cache_mib) if name == "--chunk-rows" else (chunk_rows, int(value))
        elif not arg.startswith("-") and arg.endswith(".parquet") and os.path.isfile(arg):
            files.append(arg)
    if len(files) != 1 or chunk_rows == 0 or cache_mib == 0:
        return None
    return files[0], chunk_rows, cache_mib


def claim(paths: Sequence[str]) -> Optional[Prefetch]:
    """The prefetch ``start`` began, when the dataset of ``paths`` is its one file; taken either way, so a
    later read never meets it."""
    prefetch = _pending.pop() if _pending else None
    if prefetch is None or len(paths) != 1:
        return None
    try:
        return prefetch if os.path.samefile(paths[0], prefetch.path) else None
    except OSError:
        return None
