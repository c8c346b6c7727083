"""Parquet in (sorted files, column projection, chunks of rows) and Parquet out (temp file + atomic rename)."""
from __future__ import annotations

import glob
import itertools
import os
import queue
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputError, OutputError

# Output row groups have a fixed number of rows so the file's bytes do not depend on --chunk-rows.
ROW_GROUP_ROWS = 1024
COMPRESSION = "zstd"
# Tables queued for the writer thread: one keeps computing and compressing busy at once while memory stays
# a few chunks. (Decoding the next chunk ahead on a thread was measured too: no faster on 2 cores, +360 MB.)
WRITE_QUEUE = 1


@dataclass(frozen=True)
class Chunk:
    """Rows ``[start, start + num_rows)`` of file ``file_index``; ``first_row`` is the dataset-wide index."""

    file_index: int
    path: str
    start: int
    first_row: int
    table: pa.Table


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
    sequence of rows."""

    def __init__(self, inputs: Sequence[str | os.PathLike]):
        if not inputs:
            raise InputError("DATASET", "no input given")
        files: list[Path] = []
        for raw in inputs:
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
        self.file_rows = [f.metadata.num_rows for f in self._files]
        self.num_rows = sum(self.file_rows)
        starts = [0, *itertools.accumulate(self.file_rows)]
        self.shards = [Shard(i, p, s, n) for i, (p, s, n) in enumerate(zip(self.paths, starts, self.file_rows))]

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

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        """``shard.chunks`` through the reader this dataset already holds."""
        return shard.chunks(columns, chunk_rows, self._files[shard.index])

    def locate(self, row: int) -> tuple[str, int]:
        """(file path, 0-based row within that file) of dataset-wide row ``row``."""
        for path, n in zip(self.paths, self.file_rows):
            if row < n:
                return path, row
            row -= n
        raise IndexError(row)


def default_output(inputs: Sequence[str | os.PathLike]) -> str:
    """``DATASET.adv.parquet`` beside a single input file; several inputs or a folder need ``-o``."""
    if len(inputs) != 1 or Path(inputs[0]).is_dir():
        raise OutputError("-o OUT.parquet is required when the dataset is a folder or several files")
    p = Path(inputs[0])
    return str(p.with_name(p.name.removesuffix(".parquet") + ".adv.parquet"))


def check_output_path(out: str, dataset: Dataset, option: str = "-o") -> None:
    """Refuse to write onto an input, into a missing folder, or into a folder we cannot write."""
    target = Path(out)
    for p in dataset.paths:
        if target.exists() and target.resolve() == Path(p).resolve():
            raise OutputError(f"{option} {out} is one of the inputs; rladv never writes onto its input")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{option} {out}: folder {folder} does not exist")
    if target.is_dir():
        raise OutputError(f"{option} {out} is a folder; give a file name")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{option} {out}: folder {folder} is not writable")


def writer_options(schema: pa.Schema) -> dict:
    """``ParquetWriter`` settings: zstd, and dictionary encoding only for columns that are not lists (labels
    such as ``uid``). Token values rarely repeat, so a dictionary is built and then dropped for every page;
    without it the writer is about a fifth faster and the file no larger."""
    return {"compression": COMPRESSION,
            "use_dictionary": [f.name for f in schema if not pa.types.is_list(f.type)]}


class AtomicParquetWriter:
    """Writes to a temporary file beside ``path`` and renames it over ``path`` only on ``commit()``.

    Rows are regrouped into row groups of exactly ``ROW_GROUP_ROWS`` rows (the last one shorter), so the
    bytes written depend only on the rows, not on how they were chunked. Encoding and compression run on a
    writer thread (pyarrow releases the GIL), overlapping the computation of the next chunk; ``write`` blocks
    while ``WRITE_QUEUE`` tables wait, and an error of the thread is raised by the next ``write`` or by
    ``commit``. ``abort()`` (or leaving the context with an exception) removes the temporary file and leaves
    any existing ``path`` untouched.
    """

    def __init__(self, path: str, schema: pa.Schema):
        self.path = path
        self.schema = schema
        folder = os.path.dirname(os.path.abspath(path))
        self._tmp = _temp_file(folder, ".parquet.tmp")
        self._writer = pq.ParquetWriter(self._tmp, schema, **writer_options(schema))
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._queue: queue.Queue = queue.Queue(maxsize=WRITE_QUEUE)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="rladv-write", daemon=True)
        self._thread.start()

    def write(self, table: pa.Table) -> None:
        self._raise_thread_error()
        self._queue.put(table)

    def _drain(self) -> None:
        while (table := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep taking tables so that ``write`` never blocks on a dead thread
            try:
                self._pending.append(table)
                self._pending_rows += table.num_rows
                while self._pending_rows >= ROW_GROUP_ROWS:
                    self._flush(ROW_GROUP_ROWS)
            except BaseException as err:
                self._error = err

    def _flush(self, rows: int) -> None:
        buffered = pa.concat_tables(self._pending)
        self._writer.write_table(buffered.slice(0, rows).combine_chunks(), row_group_size=rows)
        rest = buffered.slice(rows)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def _stop_thread(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise_thread_error(self) -> None:
        if self._error is not None:
            raise self._error

    def commit(self) -> None:
        self._stop_thread()
        self._raise_thread_error()
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._stop_thread()
            self._writer.close()
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def __enter__(self) -> "AtomicParquetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def _temp_file(folder: str, suffix: str) -> str:
    """A new empty ``.rladv-*`` file in ``folder`` with the mode a plain ``open`` would give (umask applied;
    ``mkstemp`` alone makes it 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=".rladv-", suffix=suffix, dir=folder)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return tmp


def write_json_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = _temp_file(os.path.dirname(os.path.abspath(path)), ".json.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        return self.chunks(columns, chunk_rows)

    def locate(self, row: int) -> tuple[str, int]:
        return self.paths[0], row
