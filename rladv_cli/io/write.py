"""Parquet out: a temporary file beside the target renamed over it (``AtomicParquetWriter``, row groups
encoded on several threads and joined byte-exactly, or joined to the carried columns' chunks copied from the
input, ``column_copy``), side files that appear with the output or not at all
(``SideFiles``), and signals deferred while the renames run (``signals_deferred``)."""
from __future__ import annotations

import collections
import os
import signal
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..config.flags import named
from ..contract.columns import list_offsets
from ..errors import TERMINATION_SIGNALS, OutputError
from . import column_copy
from .parquet_join import RowGroupJoiner, split_file

# Output row groups have a fixed number of rows so the file's bytes do not depend on --chunk-rows. It is the
# default --chunk-rows, so by default each chunk is one row group: written without regrouping copies, and the
# writer's last row group (encoded after the computation ends) is small. 1024 cost 0.2-0.3 s at 20M tokens.
ROW_GROUP_ROWS = 512
COMPRESSION = "zstd"
# Threads encoding and compressing output row groups at once (each holds one row group's input and output):
# pyarrow's writer alone is single-threaded, and at 20M tokens it is most of the run.
ENCODERS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def default_output(inputs: Sequence[str | os.PathLike]) -> str:
    """``DATASET.adv.parquet`` beside a single input file; several inputs, a folder or a glob pattern need ``-o``."""
    if len(inputs) != 1 or not Path(inputs[0]).is_file():
        raise OutputError("-o OUT.parquet is required when the dataset is a folder, a glob pattern or several files")
    p = Path(inputs[0])
    return str(p.with_name(p.name.removesuffix(".parquet") + ".adv.parquet"))


# names of formats a Parquet output is not, which a user may expect rladv to write from the name
NOT_PARQUET = (".csv", ".tsv", ".json", ".jsonl", ".ndjson", ".txt", ".html", ".htm", ".arrow", ".feather", ".ipc",
               ".xlsx", ".pt", ".pkl", ".npy", ".npz")


def check_output_path(out: str, inputs: Sequence[str | os.PathLike], option: str = "output",
                      parquet: bool = True) -> None:
    """Refuse stdout (``-``), a ``parquet`` output named as another format (``out.csv``), writing onto one of the
    ``inputs``, a folder, a FIFO or device, into a missing folder, or into a folder we cannot write. ``option``:
    the keyword that gave ``out`` (``config.flags.OUTPUTS``), which messages name as their reader gave it."""
    given = named(option, out)
    if out == "-":
        raise OutputError(f"{given}: this file is not written to stdout; give a file name")
    target = Path(out)
    for p in inputs:
        if target.exists() and target.resolve() == Path(p).resolve():
            raise OutputError(f"{given} is one of the inputs; rladv never writes onto its input")
    suffix = target.suffix.lower()
    if parquet and suffix in NOT_PARQUET:
        raise OutputError(f"{given}: rladv writes Parquet here, not {suffix[1:]}; give a .parquet name "
                          "(polars converts it: pl.read_parquet(PATH) then .write_csv, .write_json, ...)")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{given}: folder {folder} does not exist")
    if target.is_dir():
        raise OutputError(f"{given} is a folder; give a file name")
    if target.exists() and not target.is_file():
        raise OutputError(f"{given} is not a regular file (a FIFO, device or socket); rladv writes a file "
                          "beside it and renames it over the path, which would replace it")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{given}: folder {folder} is not writable")


def writer_options(schema: pa.Schema) -> dict:
    """``ParquetWriter`` settings: zstd, and dictionary encoding and min/max statistics only for columns that
    are not lists (labels such as ``uid``, scalar scores). Token values rarely repeat, so a dictionary is built
    and then dropped for every page; and query engines filter row groups on top-level columns, not on list
    elements. Without both the writer is about a third faster (1.73 -> 1.01 s for 20M tokens of output) and
    the file no larger."""
    scalar = [f.name for f in schema if not pa.types.is_list(f.type)]
    return {"compression": COMPRESSION, "use_dictionary": scalar, "write_statistics": scalar}


# the key of the Parquet key-value metadata that marks a file rladv wrote (``io.read`` skips such files in a folder)
OUTPUT_MARK = b"rladv.output"


def marked(metadata: "dict | None", what: str) -> dict:
    """``metadata`` with rladv's mark: what the file is (``advantages``, ``compare``)."""
    return {**(metadata or {}), OUTPUT_MARK: what.encode()}


def output_schema(schema: pa.Schema, with_is_weights: bool, with_token_weight: bool = False) -> pa.Schema:
    """Input columns in their order (rewritten masks as int8 lists), then the added columns (docs/contract.md §3);
    the metadata marks the file as rladv's output."""
    added = computed_columns(with_is_weights, with_token_weight)
    fields = [pa.field(f.name, added.pop(f.name)) if f.name in added else f for f in schema]
    return pa.schema(fields + [pa.field(name, t) for name, t in added.items()],
                     metadata=marked(schema.metadata, "advantages"))


def computed_columns(with_is_weights: bool, with_token_weight: bool = False) -> dict[str, pa.DataType]:
    """The output columns rladv computes, with their types; every other output column is an input column
    carried over unchanged."""
    f32, i8 = pa.list_(pa.float32()), pa.list_(pa.int8())
    added = {"token_level_rewards": f32, "response_mask": i8, "loss_mask": i8, "advantages": f32, "returns": f32}
    if with_is_weights:
        added["rollout_is_weights"] = f32
    if with_token_weight:
        added["token_weight"] = f32
    return added


class _RowGroups:
    """Tables of consecutive rows in, tables of ``ROW_GROUP_ROWS`` rows out (and the rest, when flushed), so
    the row groups depend only on the rows, not on how they arrived; or, given ``sizes``, tables of exactly
    those numbers of rows in turn (any other total is an error)."""

    def __init__(self, sizes: Sequence[int] | None = None) -> None:
        self._sizes = sizes
        self._pending: list[pa.Table] = []
        self._rows = 0
        self.count = 0  # row groups handed out so far

    def add(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._rows += table.num_rows

    def take(self, flush: bool = False) -> Iterator[pa.Table]:
        """Every whole row group held, then (``flush``) the rows left."""
        while self._rows and (self._rows >= (size := self._next_size()) or flush):
            if self._rows < size and self._sizes is not None:
                raise RuntimeError(f"row group {self.count} of the input holds {size} rows, the output {self._rows}")
            buffered = pa.concat_tables(self._pending)
            rows = min(self._rows, size)
            rest = buffered.slice(rows)
            self._pending, self._rows = ([rest] if rest.num_rows else []), rest.num_rows
            self.count += 1
            yield buffered.slice(0, rows)

    def _next_size(self) -> int:
        if self._sizes is None:
            return ROW_GROUP_ROWS
        if self.count == len(self._sizes):
            raise RuntimeError(f"more rows written than the input's {sum(self._sizes)}")
        return self._sizes[self.count]

    def check_complete(self) -> None:
        """With ``sizes``: raise unless every row group was handed out."""
        if self._sizes is not None and self.count != len(self._sizes):
            raise RuntimeError(f"{sum(self._sizes[:self.count])} rows written, the input has {sum(self._sizes)}")

    def clear(self) -> None:
        self._pending, self._rows = [], 0


class _Carried:
    """One row group's carried columns, encoded by a background encoder (``early``) or, when the row group is
    written before that one is done, by the row group's own task (``part``), which never waits for it: the
    background encoders run at the lowest CPU priority, and waiting for one could take as long as the run."""

    def __init__(self, table: pa.Table, encode: Callable[[pa.Table], pa.Buffer]):
        self.table, self.num_rows, self._encode = table, table.num_rows, encode
        self._part: pa.Buffer | None = None
        self._claimed = threading.Lock()

    def early(self) -> None:
        table = self.table  # None once dropped
        if table is not None and self._claimed.acquire(blocking=False):
            self._part = self._encode(table)

    def part(self) -> pa.Buffer:
        if self._claimed.acquire(blocking=False):  # not started: encode it here
            self._part = self._encode(self.table)
        return self._part if self._part is not None else self._encode(self.table)


def _lowest_priority() -> None:
    """Run this thread at nice 19 (on Linux a priority is per thread), so that it takes only CPU time that
    nothing else wants. Elsewhere the thread keeps the process's priority."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:  # not allowed here (a seccomp profile): run as the others do
            pass


class _CarryPool:
    """The process's ``ENCODERS`` threads for carried columns, at the lowest priority, shared by every writer
    (a Ray worker holds one writer per shard: threads of their own would queue for the GIL beside its passes).
    Started on first use, and again in a forked child, which has none of its parent's threads."""

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def submit(self, task: Callable[[], None]) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(ENCODERS, thread_name_prefix="rladv-carry", initializer=_lowest_priority)
            return self._pool.submit(task)

    def _forget(self) -> None:
        self._pool, self._lock = None, threading.Lock()


_CARRY_POOL = _CarryPool()


class AtomicParquetWriter:
    """Writes to a temporary file beside ``path`` and renames it over ``path`` only on ``commit()``.

    Rows are regrouped into row groups of exactly ``ROW_GROUP_ROWS`` rows (the last one shorter), so the
    bytes written depend only on the rows, not on how they were chunked. Each row group is encoded and
    compressed as a Parquet file of its own, in memory, on one of ``ENCODERS`` threads (pyarrow releases the
    GIL) while the caller computes the next chunk, and appended to the file in row order (``parquet_join``),
    which gives the bytes one ``ParquetWriter`` would write handed the same row groups (in ``_in_pieces``'s
    slices). ``write`` blocks while more than ``ENCODERS`` row groups are in flight; an encoder's error is raised
    by a later ``write`` or by ``commit``. ``abort()`` (or leaving the context with an exception) removes the
    temporary file and leaves any existing ``path`` untouched.

    The ``carried`` columns (input columns the output holds unchanged) may arrive early, from row 0 on, through
    ``carry``: they are encoded as soon as a row group's worth is there (``io.read.ReadOnce`` hands them over
    as the input is decoded, or once it is), and ``write`` then encodes only the other columns of that
    row group; ``append_columns`` puts the pages of both together, the same bytes again.

    ``copy_from``: the input files whose rows the output holds, all of them in order. Where ``column_copy.plan``
    allows it, the row groups are the files' instead, the carried columns' chunks are copied from them byte for
    byte, ``carry`` is not needed, and ``write`` encodes only the other columns, each on an encoder of its own;
    the bytes then depend only on the files and the rows. At most two such row groups are in flight.
    """

    def __init__(self, path: str, schema: pa.Schema, carried: Sequence[str] = (), written: Sequence[str] = (),
                 copy_from: Sequence[str] = ()):
        self.path = path
        self.schema = schema
        # the names the file holds the columns under (the user's, ``--column``), in the schema's order
        self._file_names = list(written) or list(schema.names)
        self._file_schema = pa.schema([f.with_name(n) for f, n in zip(schema, self._file_names)],
                                      metadata=schema.metadata)  # no empty table: pyarrow would import pandas
        self._options = writer_options(self._file_schema)
        self._finished = False
        self._encoders = ThreadPoolExecutor(ENCODERS, thread_name_prefix="rladv-encode")
        self._joining = ThreadPoolExecutor(1, thread_name_prefix="rladv-join")  # with copied columns
        self._early: list[Future] = []  # the carried row groups' encodings, on ``_CARRY_POOL``
        self._file, self._tmp, self._copy = None, None, None
        self._replaces = os.path.exists(path)  # the rename will put the output over an existing file
        self._carried_names = [n for n in schema.names if n in set(carried)]
        try:
            # a signal between the file's creation and its path being kept here would leave it behind
            with named_os_errors(path), signals_deferred():
                self._file, self._tmp = _temp_file(os.path.dirname(os.path.abspath(path)), ".parquet.tmp", "wb")
            footer = split_file(self._encode(None))[1]
            self._joiner = RowGroupJoiner(self._file, footer)
            file_name = dict(zip(schema.names, self._file_names))
            self._copy = column_copy.plan(copy_from, footer, [file_name[n] for n in self._carried_names],
                                          self._file_schema)
        except BaseException:
            self.abort()
            raise
        self._written = _RowGroups(self._copy.sizes if self._copy is not None else None)
        self._in_flight: collections.deque[Future] = collections.deque()
        self._turn = threading.Event()  # set once the row groups before the next one are in the file
        self._turn.set()
        self._failed = False
        self._carried_schema = pa.schema([schema.field(n) for n in self._carried_names], metadata=schema.metadata)
        self._computed_names = [n for n in schema.names if n not in set(carried)]
        self._carried: dict[int, _Carried] = {}  # by row group
        self._carry = _RowGroups()
        self._carrying = self._copy is None

    def carry(self, table: pa.Table | None) -> None:
        """The next rows of the input (any columns, the carried ones among them); ``None`` after the last
        row. A row group is encoded once all its rows are here; rows never followed by ``None`` or by a whole
        row group's worth are written the usual way. Nothing is carried after ``drop_carried``."""
        if not self._carrying:
            return
        if table is not None:  # labelled with the output's fields, as ``write``'s tables are (files may differ)
            self._carry.add(pa.Table.from_arrays([table[n] for n in self._carried_names], schema=self._carried_schema))
        for rows in self._carry.take(flush=table is None):
            carried = _Carried(rows, self._encode)
            self._carried[self._carry.count - 1] = carried
            self._early.append(_CARRY_POOL.submit(carried.early))

    def drop_carried(self) -> None:
        """Forget every carried row group (their encodings not started are skipped); all are encoded whole."""
        for carried in self._carried.values():
            carried.table = None
        self._carried.clear()
        self._carry.clear()
        self._cancel_early()
        self._carrying = False  # rows carried later would not line up with the rows written

    def write(self, table: pa.Table) -> None:
        if not table.schema.equals(self.schema):
            raise ValueError(f"table schema does not match the output's: {table.schema} vs {self.schema}")
        self._written.add(table if self._copy is None else table.select(self._computed_names))
        with named_os_errors(self.path):  # an encoder's failed write (a full disk) surfaces here
            for rows in self._written.take():
                self._submit(rows)

    def _submit(self, rows: pa.Table) -> None:
        turn, self._turn = self._turn, threading.Event()
        index = self._written.count - 1
        if self._copy is None:
            carried = self._carried.pop(index, None)
            task = self._encoders.submit(self._append_in_turn, partial(self._encode_parts, rows, carried), turn,
                                         self._turn)
        else:  # each own column on an encoder, joined to the copied ones on the one joining thread, in order
            copied = self._copy.part(index)
            own = [self._encoders.submit(self._encode, rows.select([name])) for name in self._computed_names]
            task = self._joining.submit(self._append_in_turn, lambda: [copied, *(f.result() for f in own)], turn,
                                        self._turn)
        self._in_flight.append(task)
        # a copied row group may be large (the input's), and each in flight holds its rows
        while len(self._in_flight) > (ENCODERS if self._copy is None else 2):
            self._in_flight.popleft().result()

    def _encode_parts(self, rows: pa.Table, carried: _Carried | None) -> list[pa.Buffer]:
        """A row group as one part, or as its own columns and its carried ones encoded apart. This row group's
        own columns first: a carried part begun in the background meanwhile is then usually done, and not
        encoded a second time."""
        if carried is None:
            return [self._encode(rows)]
        if carried.num_rows != rows.num_rows:
            raise RuntimeError(f"row group of {rows.num_rows} rows, carried columns of {carried.num_rows}")
        own = self._encode(rows.select(self._computed_names))
        return [carried.part(), own]

    def _append_in_turn(self, parts: Callable[[], list], turn: threading.Event, next_turn: threading.Event) -> None:
        """Make a row group's ``parts``, wait for the ones before it, append it. Tasks start in order, so the
        one awaited is running or done; the thread that made the parts also frees them."""
        try:
            made = parts()
            turn.wait()
            if self._failed:
                return
            if len(made) == 1:
                self._joiner.append(made[0])
            else:
                self._joiner.append_columns(made, self._file_names)
            if self._replaces:
                self._file.flush()
                _start_writeback(self._file.fileno())
        except BaseException:
            self._failed = True
            raise
        finally:
            next_turn.set()

    def _renamed(self, rows: pa.Table) -> pa.Table:
        """``rows`` (any of the schema's columns) under the names the file holds them."""
        if self._file_names == self.schema.names:
            return rows
        name = dict(zip(self.schema.names, self._file_names))
        return rows.rename_columns([name[n] for n in rows.column_names])

    def _encode(self, rows: pa.Table | None) -> pa.Buffer:
        """One row group (none for ``None``) as a whole Parquet file in memory, under the written names."""
        table = None if rows is None else self._renamed(rows)
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, self._file_schema if table is None else table.schema, **self._options) as writer:
            if table is not None:
                writer.write_table(_in_pieces(table.combine_chunks()), row_group_size=table.num_rows)
        return sink.getvalue()

    def finish(self) -> None:
        """Write everything that is left and close the temporary file: all but the rename (``commit``)."""
        if self._finished:
            return
        with named_os_errors(self.path):
            for rows in self._written.take(flush=True):
                self._submit(rows)
            while self._in_flight:
                self._in_flight.popleft().result()
            if self._copy is not None:
                self._copy.check_unchanged()
                self._written.check_complete()
                self._copy.close()
            self._joiner.finish()
            self._encoders.shutdown()
            self._joining.shutdown()
            self._cancel_early()
            self._file.close()
        self._finished = True

    def commit(self) -> None:
        """``finish``, then rename the temporary file over ``path``."""
        self.finish()
        with named_os_errors(self.path):
            os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._failed = True
            self._cancel_early()
            self._encoders.shutdown(cancel_futures=True)
            self._joining.shutdown(cancel_futures=True)
            try:
                if self._file is not None:
                    self._file.close()
            except OSError:  # flushing what is buffered fails as the write did (a full disk): the file goes anyway
                pass
        finally:
            if self._copy is not None:
                self._copy.close()
            if self._tmp is not None and os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def _cancel_early(self) -> None:
        """Cancel the carried encodings not started (every row group is written: they are not needed)."""
        for job in self._early:
            job.cancel()
        self._early.clear()

    def __enter__(self) -> "AtomicParquetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


PIECE_VALUES = 1 << 15  # list values per slice handed to the writer (_in_pieces)


def _in_pieces(table: pa.Table) -> pa.Table:
    """``table`` (one chunk per column) as slices of about ``PIECE_VALUES`` list values each (whole rows; no
    copy). The writer builds a column's levels and pages a slice at a time, in buffers that stay that small and
    are used again, instead of buffers grown to the whole row group (memory new to the process each time,
    faulted in page by page). The cuts depend only on the table: the bytes still depend only on the rows."""
    values = max((int(list_offsets(c.chunk(0))[-1]) for c in table.columns
                  if c.num_chunks and (pa.types.is_list(c.type) or pa.types.is_large_list(c.type))), default=0)
    if values <= PIECE_VALUES:
        return table
    return pa.Table.from_batches(table.to_batches(max_chunksize=max(1, table.num_rows * PIECE_VALUES // values)),
                                 table.schema)


def _start_writeback(fd: int) -> None:
    """Have the kernel begin writing ``fd``'s dirty pages to disk, without waiting (Linux's
    ``sync_file_range``; elsewhere nothing). Renamed over an existing file, a new file's pages are written out
    by ext4 in the rename itself (``auto_da_alloc``): 0.15 s of a 20M-token run's very end, unless the writing
    began as the row groups landed (docs/performance.md, "Fewer copies")."""
    sync_file_range = _libc_sync_file_range()
    if sync_file_range:
        sync_file_range(fd, 0, 0, 2)  # from 0 to the end, SYNC_FILE_RANGE_WRITE; a failure changes nothing


@lru_cache(maxsize=1)
def _libc_sync_file_range():
    """``sync_file_range`` from the C library, or False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


def _temp_file(folder: str, suffix: str, mode: str) -> tuple[IO, str]:
    """A new empty ``.rladv-*`` file in ``folder``, open for writing in ``mode``, and its path; with the
    permissions a plain ``open`` would give (umask applied; ``mkstemp`` alone makes it 0600). It is written
    through ``mkstemp``'s own descriptor: reopening the path would truncate it, and ext4 writes a file that was
    truncated to disk when it is closed (``auto_da_alloc``), ~80 ms for 300 MB of output."""
    fd, tmp = tempfile.mkstemp(prefix=".rladv-", suffix=suffix, dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        f = open(fd, mode)
    except BaseException:
        try:
            os.close(fd)
        except OSError:  # ``open`` took the descriptor and closed it as it failed
            pass
        os.unlink(tmp)
        raise
    return f, tmp


@contextmanager
def named_os_errors(path: str) -> Iterator[None]:
    """An ``OSError`` raised inside (a full disk, a file-size limit) names ``path`` when it names no file (the
    failing write went to a temporary file, or to a descriptor): ``Error: PATH: No space left on device``."""
    try:
        yield
    except OSError as err:
        if err.errno is not None and err.filename is None:
            err.filename = os.fspath(path)
        raise


def write_json_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with SideFiles() as files:
        files.write(path, text)
        files.commit()


PARQUET_SIDE_FILES = ("groups_path", "rows_path")


def check_side_outputs(output: Optional[str], inputs: Sequence[str], side: "dict[str, object]") -> None:
    """The files a run writes beside ``output`` (``side``: keyword -> path or None, ``config.flags.OUTPUTS``) are
    writable, none is an input, and all of them name different files."""
    for option, path in side.items():
        if path is not None:
            check_output_path(str(path), inputs, option, parquet=option in PARQUET_SIDE_FILES)
    given = [os.path.abspath(p) for p in (output, *side.values()) if p is not None]
    twice = next((p for p in given if given.count(p) > 1), None)
    if twice is not None:
        given = ", ".join(named(o) for o in (["output"] if output is not None else []) + list(side))
        raise OutputError(f"{given} must name different files; {twice} is given twice")


class SideFiles:
    """Files (the JSON report, the HTML page, an exported reproducer) that appear with a run's output or not at
    all: ``write``
    puts each in a temporary file beside its target, ``commit`` renames them all over their targets (call it
    right after the output's own rename); leaving the context without ``commit`` (an error, a signal) removes
    every temporary file. An ``OSError`` names the target."""

    def __init__(self) -> None:
        self._staged: list[tuple[str, str]] = []  # (temporary file, target)

    def write(self, path: str | os.PathLike, data: str | bytes) -> None:
        """Stage ``data`` (text, or bytes written as they are) for ``path``."""
        path = os.fspath(path)
        suffix, mode = os.path.splitext(path)[1] + ".tmp", "wb" if isinstance(data, bytes) else "w"
        with named_os_errors(path):
            with signals_deferred():  # kept here as soon as it exists, so that ``discard`` finds it
                f, tmp = _temp_file(os.path.dirname(os.path.abspath(path)), suffix, mode)
                self._staged.append((tmp, path))
            with f:
                f.write(data)

    def commit(self) -> None:
        while self._staged:
            tmp, path = self._staged[0]
            with named_os_errors(path):
                os.replace(tmp, path)
            self._staged.pop(0)

    def discard(self) -> None:
        for tmp, _ in self._staged:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        self._staged = []

    def __enter__(self) -> "SideFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


_DEFERRED = (signal.SIGINT, *TERMINATION_SIGNALS)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP that arrive inside the block are acted on once it ends (by raising the first
    again to its own handler): a run's renames (output, report, HTML page) then happen all or none. Only in
    the main thread, where Python runs signal handlers; elsewhere, and for signals whose handler is not a
    Python function (ignored, default), the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved = {}
    for sig in _DEFERRED:
        handler = signal.getsignal(sig)
        if callable(handler):
            saved[sig] = handler
            signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if pending:
            signal.raise_signal(pending[0])
