"""Parquet in (sorted files, column projection, chunks of rows) and Parquet out (temp file + atomic rename)."""
from __future__ import annotations

import collections
import dataclasses
import glob
import itertools
import os
import signal
import stat
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TERMINATION_SIGNALS, InputError, OutputError
from .parquet_join import RowGroupJoiner, split_file

# Output row groups have a fixed number of rows so the file's bytes do not depend on --chunk-rows. It is the
# default --chunk-rows, so by default each chunk is one row group: written without regrouping copies, and the
# writer's last row group (encoded after the computation ends) is small. 1024 cost 0.2-0.3 s at 20M tokens.
ROW_GROUP_ROWS = 512
COMPRESSION = "zstd"
# Threads encoding and compressing output row groups at once (each holds one row group's input and output):
# pyarrow's writer alone is single-threaded, and at 20M tokens it is most of the run.
ENCODERS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
# Chunks a ``ReadOnce`` thread may decode ahead of the pass that takes them once it keeps nothing.
READ_AHEAD = 2


# ``validation.check_chunk``'s signature: (table, path, first row within the file) -> None or InputError
Check = Callable[[pa.Table, str, int], None]


@dataclass(frozen=True)
class Chunk:
    """Rows ``[start, start + num_rows)`` of file ``file_index``; ``first_row`` is the dataset-wide index."""

    file_index: int
    path: str
    start: int
    first_row: int
    table: pa.Table
    checked: bool = False  # every contract column in it passed the row checks already (``ReadOnce``)


@dataclass(frozen=True)
class Shard:
    """File ``index`` of a dataset: its rows are the dataset's rows ``[first_row, first_row + num_rows)``.
    Plain data, so it travels to other processes; ``chunks`` opens the file where it runs."""

    index: int
    path: str
    first_row: int
    num_rows: int

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int,
               file: pq.ParquetFile | None = None) -> Iterator[Chunk]:
        """Yield chunks of at most ``chunk_rows`` rows holding only ``columns`` (all when None)."""
        f = file if file is not None else open_parquet(self.path)
        start = 0
        try:
            for rb in f.iter_batches(batch_size=chunk_rows, columns=list(columns) if columns is not None else None):
                yield Chunk(self.index, self.path, start, self.first_row + start, pa.Table.from_batches([rb]))
                start += rb.num_rows
        except (pa.ArrowException, OSError) as err:
            raise InputError(self.path, f"cannot be read past row {start} ({str(err).splitlines()[0]})") from None
        if start != self.num_rows:
            raise InputError(self.path, f"holds {start} readable rows but its footer says {self.num_rows}; "
                                        "the file is truncated or corrupt")


def open_parquet(path: str) -> pq.ParquetFile:
    """A Parquet file's reader, refusing unreadable files and repeated column names."""
    try:
        # no pre-buffering: with it, iterating batches keeps every column chunk read so far (the whole
        # compressed file by the end) and is three times slower here
        f = pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as err:
        raise InputError(path, f"not a readable Parquet file ({str(err).splitlines()[0]})") from None
    names = f.schema_arrow.names
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise InputError(path, "appears twice; column names must be unique", column=twice)
    return f


class Dataset:
    """One Parquet file, several files, folders of ``*.parquet`` or glob patterns (each sorted), read as one
    sequence of rows. ``inputs`` is one path or pattern, or a sequence of them (kept as given in ``inputs``)."""

    def __init__(self, inputs: str | os.PathLike | Sequence[str | os.PathLike]):
        inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
        self.inputs = inputs
        if not inputs:
            raise InputError("DATASET", "no input given")
        files: list[Path] = []
        for raw in inputs:
            if not os.fspath(raw):  # Path("") would be the current folder
                raise InputError("''", "an empty path; give a Parquet file, a folder or a glob pattern")
            p = Path(raw)
            if p.is_dir():
                found = sorted(q for q in p.glob("*.parquet") if q.is_file())
                if not found:
                    raise InputError(str(p), "folder holds no *.parquet file")
                files.extend(found)
            elif p.is_file():
                files.append(p)
            elif glob.has_magic(str(raw)):
                found = sorted(Path(q) for q in glob.glob(str(raw)) if Path(q).is_file())
                if not found:
                    raise InputError(str(p), "the pattern matches no file")
                files.extend(found)
            elif p.exists():
                raise InputError(str(p), f"is {_kind_of(p)}, not a regular file; give a Parquet file or a folder")
            else:
                raise InputError(str(p), "no such file or folder")
        seen = set()
        for p in files:
            if p.resolve() in seen:
                raise InputError(str(p), "is given twice; each file of a dataset is read once")
            seen.add(p.resolve())
        self.paths = [str(p) for p in files]
        self._files = [open_parquet(p) for p in self.paths]
        self.schema = self._files[0].schema_arrow
        for path, f in zip(self.paths[1:], self._files[1:]):
            self._check_same_schema(path, f.schema_arrow)
        # the files agree on types; a column that may hold nulls in any of them may in the dataset
        nullable = {field.name for f in self._files for field in f.schema_arrow if field.nullable}
        self.schema = pa.schema([field.with_nullable(True) if field.name in nullable else field for field in self.schema],
                                metadata=self.schema.metadata)
        self.file_rows = [f.metadata.num_rows for f in self._files]
        self.num_rows = sum(self.file_rows)
        starts = [0, *itertools.accumulate(self.file_rows)]
        self.shards = [Shard(i, p, s, n) for i, (p, s, n) in enumerate(zip(self.paths, starts, self.file_rows))]
        self._once: ReadOnce | None = None

    def _check_same_schema(self, path: str, schema: pa.Schema) -> None:
        if schema.names != self.schema.names:
            raise InputError(
                path, f"columns {schema.names} differ from {self.paths[0]}'s {self.schema.names}; all files of a dataset need the same columns"
            )
        for field in schema:
            expected = self.schema.field(field.name).type
            if field.type != expected:
                raise InputError(path, f"type {field.type} differs from {self.paths[0]}'s {expected}", column=field.name)

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        """Yield chunks of at most ``chunk_rows`` rows holding only ``columns`` (all when None), in file order;
        a chunk never spans two files."""
        for shard in self.shards:
            yield from self.shard_chunks(shard, columns, chunk_rows)

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        """``shard.chunks`` through the reader this dataset already holds, or from ``read_once``'s chunks
        (``last``: no later pass reads this shard, so kept chunks are dropped as they are taken)."""
        kept = self._once.shard_chunks(shard, chunk_rows, last) if self._once is not None else None
        if kept is None:
            return shard.chunks(columns, chunk_rows, self._files[shard.index])
        if columns is None:
            return kept
        return (Chunk(c.file_index, c.path, c.start, c.first_row, c.table.select(list(columns)), c.checked)
                for c in kept)

    def read_once(self, chunk_rows: int, budget: int, check: Check,
                  writer: "AtomicParquetWriter | None" = None) -> "ReadOnce | None":
        """When the dataset's decoded columns should fit ``budget`` bytes, start decoding (and ``check``ing)
        every chunk on a thread; ``shard_chunks`` calls with the same ``chunk_rows`` take them from there (see
        ``ReadOnce``), and ``writer`` gets them as they are kept (``AtomicParquetWriter.carry``). Close it
        when the run ends. None (every pass reads the files) when the dataset looks larger."""
        if sum(_decoded_bytes(f) for f in self._files) > budget:
            return None
        self._once = ReadOnce(self, chunk_rows, budget, check, writer)
        return self._once

    def locate(self, row: int) -> tuple[str, int]:
        """(file path, 0-based row within that file) of dataset-wide row ``row``."""
        for path, n in zip(self.paths, self.file_rows):
            if row < n:
                return path, row
            row -= n
        raise IndexError(row)


def _kind_of(path: Path) -> str:
    """What a path that is neither a regular file nor a folder is, in words."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "not readable"
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def _decoded_bytes(f: pq.ParquetFile) -> int:
    """About what a file's columns take decoded: the uncompressed size of its row groups, from the footer.
    (Column chunks' own metadata would be closer, but reading it from a corrupt footer can abort the
    process.) Dictionary-encoded columns decode larger; ``ReadOnce`` checks the real sizes as it goes."""
    return sum(f.metadata.row_group(g).total_byte_size for g in range(f.metadata.num_row_groups))


class ReadOnce:
    """A dataset's chunks, every column, decoded once on a background thread in dataset order.

    The thread starts before the caller needs the data (``compute_file`` starts it before importing torch),
    so decoding, and the row checks of every column (``check``), overlap start-up. While the decoded chunks
    fit ``budget`` bytes they are all kept, and every pass takes them from memory instead of reading the
    files again. Past the budget, the kept chunks are
    dropped and the thread only reads ahead of the first pass (``READ_AHEAD`` chunks, each handed out once);
    later passes read the files themselves (``shard_chunks`` returns None). Memory stays within the budget
    plus a few chunks, whatever the dataset's size. A read error is raised where the pass reaches it.
    ``writer`` receives every chunk as it is kept, in dataset order, and ``None`` once all were; when the
    chunks are dropped, it drops what it took from them (``AtomicParquetWriter.carry``, ``drop_carried``):
    memory is short then.
    """

    def __init__(self, dataset: Dataset, chunk_rows: int, budget: int, check: Check,
                 writer: "AtomicParquetWriter | None" = None):
        self.chunk_rows, self.budget, self._check, self._writer = chunk_rows, budget, check, writer
        self._kept_bytes = 0
        self._chunks: list[Chunk | None] = []  # in dataset order; None once handed out and not kept
        self._keep = True
        self._taken = 0  # chunks the first pass has taken
        self._dropped: set[int] = set()  # shards whose kept chunks a last pass took
        self._done = False
        self._closed = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(dataset,), name="rladv-read", daemon=True)
        self._thread.start()

    def _read(self, dataset: Dataset) -> None:
        try:
            for shard in dataset.shards:  # the thread opens the files itself: readers are not shared
                for chunk in shard.chunks(None, self.chunk_rows):
                    if not self._put(self._checked(chunk)):
                        return
                    self._carried(chunk.table)
            self._carried(None)
        except BaseException as err:
            with self._cond:
                self._error = err
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _carried(self, table: pa.Table | None) -> None:
        """Hand the writer the chunk just kept (``None``: the end), as long as every chunk so far was kept."""
        if self._writer is not None and self._keep:
            self._writer.carry(table)

    def _checked(self, chunk: Chunk) -> Chunk:
        """The chunk marked ``checked`` when all its columns pass ``check``. A chunk that fails stays unmarked:
        the pass that reads it checks it again and raises the error where it always did."""
        try:
            self._check(chunk.table, chunk.path, chunk.start)
        except Exception:  # noqa: BLE001 - raised again, in its place, by the pass that checks this chunk
            return chunk
        return dataclasses.replace(chunk, checked=True)

    def _put(self, chunk: Chunk) -> bool:
        """Append one chunk, dropping what is kept when it would pass the budget; False once closed."""
        with self._cond:
            size = chunk.table.nbytes
            if self._keep and self._kept_bytes + size > self.budget:
                self._keep = False
                self._kept_bytes = 0
                for i in range(self._taken):
                    self._chunks[i] = None
                if self._writer is not None:
                    self._writer.drop_carried()
            while not self._keep and len(self._chunks) - self._taken >= READ_AHEAD and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            if self._keep:
                self._kept_bytes += size
            self._chunks.append(chunk)
            self._cond.notify_all()
            return True

    @property
    def kept(self) -> bool:
        """Every chunk was read and kept in memory."""
        with self._cond:
            return self._done and self._keep and self._error is None

    def shard_chunks(self, shard: Shard, chunk_rows: int, last: bool = False) -> Iterator[Chunk] | None:
        """The chunks of ``shard``: while the first pass runs, as the thread decodes them; afterwards from
        memory when all were kept (``last``: dropping each as it is taken, to make room for the output);
        None when the caller has to read the file (another chunk size, the dataset did not fit, or its
        chunks were dropped)."""
        if chunk_rows != self.chunk_rows:
            return None
        with self._cond:
            first_pass = self._taken < len(self._chunks) or not self._done or self._error is not None
            if not first_pass and (not self._keep or shard.index in self._dropped):
                return None
            if last and not first_pass:
                self._dropped.add(shard.index)
        return self._first_pass(shard) if first_pass else self._from_memory(shard, drop=last)

    def _first_pass(self, shard: Shard) -> Iterator[Chunk]:
        while True:
            with self._cond:
                while self._taken == len(self._chunks) and not self._done:
                    self._cond.wait()
                if self._taken == len(self._chunks):
                    if self._error is not None:
                        raise self._error
                    return
                chunk = self._chunks[self._taken]
                if chunk.file_index != shard.index:
                    return
                if not self._keep:
                    self._chunks[self._taken] = None
                self._taken += 1
                self._cond.notify_all()
            yield chunk

    def _from_memory(self, shard: Shard, drop: bool) -> Iterator[Chunk]:
        for i, chunk in enumerate(self._chunks):
            if chunk is not None and chunk.file_index == shard.index:
                if drop:
                    self._chunks[i] = None
                yield chunk

    def close(self) -> None:
        """Stop the thread and drop every chunk."""
        with self._cond:
            self._closed = True
            self._chunks = []
            self._cond.notify_all()
        self._thread.join()


def default_output(inputs: Sequence[str | os.PathLike]) -> str:
    """``DATASET.adv.parquet`` beside a single input file; several inputs, a folder or a glob pattern need ``-o``."""
    if len(inputs) != 1 or not Path(inputs[0]).is_file():
        raise OutputError("-o OUT.parquet is required when the dataset is a folder, a glob pattern or several files")
    p = Path(inputs[0])
    return str(p.with_name(p.name.removesuffix(".parquet") + ".adv.parquet"))


def check_output_path(out: str, inputs: Sequence[str | os.PathLike], option: str = "-o") -> None:
    """Refuse to write onto one of the ``inputs``, a folder, a FIFO or device, into a missing folder, or into a
    folder we cannot write."""
    target = Path(out)
    for p in inputs:
        if target.exists() and target.resolve() == Path(p).resolve():
            raise OutputError(f"{option} {out} is one of the inputs; rladv never writes onto its input")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{option} {out}: folder {folder} does not exist")
    if target.is_dir():
        raise OutputError(f"{option} {out} is a folder; give a file name")
    if target.exists() and not target.is_file():
        raise OutputError(f"{option} {out} is not a regular file (a FIFO, device or socket); rladv writes a file "
                          "beside it and renames it over the path, which would replace it")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{option} {out}: folder {folder} is not writable")


def writer_options(schema: pa.Schema) -> dict:
    """``ParquetWriter`` settings: zstd, and dictionary encoding and min/max statistics only for columns that
    are not lists (labels such as ``uid``, scalar scores). Token values rarely repeat, so a dictionary is built
    and then dropped for every page; and query engines filter row groups on top-level columns, not on list
    elements. Without both the writer is about a third faster (1.73 -> 1.01 s for 20M tokens of output) and
    the file no larger."""
    scalar = [f.name for f in schema if not pa.types.is_list(f.type)]
    return {"compression": COMPRESSION, "use_dictionary": scalar, "write_statistics": scalar}


def output_schema(schema: pa.Schema, with_is_weights: bool) -> pa.Schema:
    """Input columns in their order (rewritten masks as int8 lists), then the added columns (CONTRACT §3)."""
    added = computed_columns(with_is_weights)
    fields = [pa.field(f.name, added.pop(f.name)) if f.name in added else f for f in schema]
    return pa.schema(fields + [pa.field(name, t) for name, t in added.items()], metadata=schema.metadata)


def computed_columns(with_is_weights: bool) -> dict[str, pa.DataType]:
    """The output columns rladv computes, with their types; every other output column is an input column
    carried over unchanged."""
    f32, i8 = pa.list_(pa.float32()), pa.list_(pa.int8())
    added = {"token_level_rewards": f32, "response_mask": i8, "loss_mask": i8, "advantages": f32, "returns": f32}
    return {**added, "rollout_is_weights": f32} if with_is_weights else added


class _RowGroups:
    """Tables of consecutive rows in, tables of ``ROW_GROUP_ROWS`` rows out (and the rest, when flushed), so
    the row groups depend only on the rows, not on how they arrived."""

    def __init__(self) -> None:
        self._pending: list[pa.Table] = []
        self._rows = 0
        self.count = 0  # row groups handed out so far

    def add(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._rows += table.num_rows

    def take(self, flush: bool = False) -> Iterator[pa.Table]:
        """Every whole row group held, then (``flush``) the rows left."""
        while self._rows >= ROW_GROUP_ROWS or (flush and self._rows):
            buffered = pa.concat_tables(self._pending)
            rows = min(self._rows, ROW_GROUP_ROWS)
            rest = buffered.slice(rows)
            self._pending, self._rows = ([rest] if rest.num_rows else []), rest.num_rows
            self.count += 1
            yield buffered.slice(0, rows)

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


class AtomicParquetWriter:
    """Writes to a temporary file beside ``path`` and renames it over ``path`` only on ``commit()``.

    Rows are regrouped into row groups of exactly ``ROW_GROUP_ROWS`` rows (the last one shorter), so the
    bytes written depend only on the rows, not on how they were chunked. Each row group is encoded and
    compressed as a Parquet file of its own, in memory, on one of ``ENCODERS`` threads (pyarrow releases the
    GIL) while the caller computes the next chunk, and appended to the file in row order (``parquet_join``),
    which gives the bytes one ``ParquetWriter`` would write. ``write`` blocks while more than ``ENCODERS``
    row groups are in flight; an encoder's error is raised by a later ``write`` or by ``commit``. ``abort()``
    (or leaving the context with an exception) removes the temporary file and leaves any existing ``path``
    untouched.

    The ``carried`` columns (input columns the output holds unchanged) may arrive early, from row 0 on, through
    ``carry``: they are encoded as soon as a row group's worth is there (``compute_file`` hands them over as
    the input is decoded, while torch imports), and ``write`` then encodes only the other columns of that
    row group; ``append_columns`` puts the pages of both together, the same bytes again.
    """

    def __init__(self, path: str, schema: pa.Schema, carried: Sequence[str] = ()):
        self.path = path
        self.schema = schema
        self._options = writer_options(schema)
        self._finished = False
        self._encoders = ThreadPoolExecutor(ENCODERS, thread_name_prefix="rladv-encode")
        self._early = ThreadPoolExecutor(ENCODERS, thread_name_prefix="rladv-carry", initializer=_lowest_priority)
        self._file, self._tmp = None, None
        try:
            # a signal between the file's creation and its path being kept here would leave it behind
            with named_os_errors(path), signals_deferred():
                self._file, self._tmp = _temp_file(os.path.dirname(os.path.abspath(path)), ".parquet.tmp", "wb")
            self._joiner = RowGroupJoiner(self._file, split_file(self._encode(None))[1])
        except BaseException:
            self.abort()
            raise
        self._written = _RowGroups()
        self._in_flight: collections.deque[Future] = collections.deque()
        self._turn = threading.Event()  # set once the row groups before the next one are in the file
        self._turn.set()
        self._failed = False
        self._carried_names = [n for n in schema.names if n in set(carried)]
        self._carried_schema = pa.schema([schema.field(n) for n in self._carried_names], metadata=schema.metadata)
        self._computed_names = [n for n in schema.names if n not in set(carried)]
        self._carried: dict[int, _Carried] = {}  # by row group
        self._carry = _RowGroups()
        self._carrying = True

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
            self._early.submit(carried.early)

    def drop_carried(self) -> None:
        """Forget every carried row group (their encodings not started are skipped); all are encoded whole."""
        for carried in self._carried.values():
            carried.table = None
        self._carried.clear()
        self._carry.clear()
        self._carrying = False  # rows carried later would not line up with the rows written

    def write(self, table: pa.Table) -> None:
        if not table.schema.equals(self.schema):
            raise ValueError(f"table schema does not match the output's: {table.schema} vs {self.schema}")
        self._written.add(table)
        with named_os_errors(self.path):  # an encoder's failed write (a full disk) surfaces here
            for rows in self._written.take():
                self._submit(rows)

    def _submit(self, rows: pa.Table) -> None:
        turn, self._turn = self._turn, threading.Event()
        carried = self._carried.pop(self._written.count - 1, None)
        self._in_flight.append(self._encoders.submit(self._encode_and_append, rows, carried, turn, self._turn))
        while len(self._in_flight) > ENCODERS:
            self._in_flight.popleft().result()

    def _encode_and_append(self, rows: pa.Table, carried: _Carried | None, turn: threading.Event,
                           next_turn: threading.Event) -> None:
        """Encode a row group (the columns not carried, when the carried ones are encoded apart), wait for
        the ones before it, append it. Tasks start in order, so the one awaited is running or done; the
        thread that encoded a part also frees it."""
        try:
            if carried is None:
                part = self._encode(rows)
            else:
                if carried.num_rows != rows.num_rows:
                    raise RuntimeError(f"row group of {rows.num_rows} rows, carried columns of {carried.num_rows}")
                parts = [carried.part(), self._encode(rows.select(self._computed_names))]
            turn.wait()
            if self._failed:
                return
            if carried is None:
                self._joiner.append(part)
            else:
                self._joiner.append_columns(parts, self.schema.names)
        except BaseException:
            self._failed = True
            raise
        finally:
            next_turn.set()

    def _encode(self, rows: pa.Table | None) -> pa.Buffer:
        """One row group (none for ``None``) as a whole Parquet file in memory."""
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, self.schema if rows is None else rows.schema, **self._options) as writer:
            if rows is not None:
                writer.write_table(rows.combine_chunks(), row_group_size=rows.num_rows)
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
            self._joiner.finish()
            self._encoders.shutdown()
            self._early.shutdown(wait=False, cancel_futures=True)
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
            self._early.shutdown(wait=False, cancel_futures=True)
            self._encoders.shutdown(cancel_futures=True)
            try:
                if self._file is not None:
                    self._file.close()
            except OSError:  # flushing what is buffered fails as the write did (a full disk): the file goes anyway
                pass
        finally:
            if self._tmp is not None and os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def __enter__(self) -> "AtomicParquetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


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


class TableSource:
    """An in-memory Arrow table with the reading interface of ``Dataset`` (one 'file' named ``name``)."""

    def __init__(self, table: pa.Table, name: str = "<table>"):
        self.table = table
        self.paths = [name]
        self.schema = table.schema
        self.file_rows = [table.num_rows]
        self.num_rows = table.num_rows
        self.shards = [Shard(0, name, 0, table.num_rows)]

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        table = self.table.select(list(columns)) if columns is not None else self.table
        for start in range(0, table.num_rows, chunk_rows):
            yield Chunk(0, self.paths[0], start, start, table.slice(start, chunk_rows))

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        return self.chunks(columns, chunk_rows)

    def locate(self, row: int) -> tuple[str, int]:
        return self.paths[0], row
