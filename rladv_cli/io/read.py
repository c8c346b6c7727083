"""Parquet in: a dataset of one or more files read as one sequence of rows, in chunks of rows holding only
the columns a pass needs (``Dataset``), an in-memory table with the same interface (``TableSource``), and the
read-once cache that decodes a dataset on a background thread as the run starts (``ReadOnce``)."""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config.flags import named
from ..contract.columns import array_of, arrow_of, list_offsets, numpy_of
from ..contract.schema import COLUMNS as CONTRACT_COLUMNS
from ..errors import InputError
from .inputs import as_paths, conformed, dataset_files, unified_schema
from .prefetch import Prefetch, claim, decoded_bytes

if TYPE_CHECKING:  # the writer takes the chunks a ReadOnce keeps (it is never imported for reading)
    from .write import AtomicParquetWriter

# Chunks a ``ReadOnce`` thread may decode ahead of the pass that takes them once it keeps nothing.
READ_AHEAD = 2
# sys.setswitchinterval while a ReadOnce thread decodes beside the passes: the reading and encoding threads are
# in C most of the time but need the GIL back between calls, which at Python's default 5 ms they queue for
SWITCH_INTERVAL_S = 0.0005


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


# sequence-level data's mask: one actor position per row
ONE_POSITION = pa.field("response_mask", pa.list_(pa.int8()))


def _ones(rows: int) -> pa.Array:
    """``rows`` lists ``[1]`` (built from buffers: ``pa.array`` would import pandas)."""
    offsets = np.arange(rows + 1, dtype=np.int32)
    values = pa.Array.from_buffers(pa.int8(), rows, [None, pa.py_buffer(np.ones(rows, dtype=np.int8))])
    return pa.ListArray.from_arrays(pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(offsets)]), values)


# the columns rladv writes: a mapping may name them for the output alone
WRITTEN = ("token_level_rewards", "response_mask", "loss_mask", "advantages", "returns", "rollout_is_weights")


VERL_SCORES = "token_level_scores"  # verl's batch key for the reward model's token scores, the contract's rm_scores


def response_part(table: pa.Table) -> pa.Table:
    """verl's batch saved as it is (docs/dumps.md): ``attention_mask`` spans prompt and response ``[P + T]``;
    its last ``len(responses)`` positions are the response's padding marker and, with the file's own
    ``response_mask`` missing, its ``response_mask`` (verl's ``compute_response_mask``). ``table`` with
    ``attention_mask`` cut to that part and ``response_mask`` appended; a row whose mask is shorter than its
    response is left as it is (validation names it)."""
    mask, responses = array_of(table["attention_mask"]), array_of(table["responses"])
    if pa.types.is_fixed_size_list(mask.type):  # a padded [B, P + T] tensor saved with pyarrow
        mask = mask.cast(pa.list_(mask.type.value_field))
    width = numpy_of(pc.list_value_length(responses).fill_null(0)).astype(np.int64)  # a null row: validation names it
    offsets = list_offsets(mask)
    kept = np.minimum(width, np.diff(offsets))  # the response part's length per row
    start = offsets[1:] - kept
    if (start > offsets[:-1]).any():
        new = np.concatenate(([0], np.cumsum(kept)))
        index = np.repeat(start - new[:-1], kept) + np.arange(new[-1])
        mask = pa.ListArray.from_arrays(arrow_of(new.astype(np.int32), pa.int32()), mask.flatten().take(index))
        table = table.set_column(table.column_names.index("attention_mask"), "attention_mask", mask)
    return table.append_column(ONE_POSITION, mask.cast(ONE_POSITION.type))


@dataclass(frozen=True)
class ColumnNames:
    """How the files' columns are read as the contract's: ``pairs`` of (contract name, the column's name in
    the files; ``--column uid=prompt_id``), read under the contract's names and written back under the user's;
    and ``one_position``: sequence-level data (a ``score`` per row and no token lists, docs/contract.md §1), read
    with a ``response_mask`` of one position per row; and ``response_part``: verl's batch saved as it is, with
    ``responses`` and an ``attention_mask`` (over prompt and response) but no ``response_mask``, read as its
    response part (``response_part``, docs/dumps.md)."""

    pairs: tuple[tuple[str, str], ...] = ()
    one_position: bool = False
    response_part: bool = False  # verl's batch as saved: response_mask from attention_mask (``response_part``)

    @classmethod
    def of(cls, mapping: "Mapping[str, str] | None") -> "ColumnNames":
        return cls(tuple(sorted((mapping or {}).items())))

    def seeing(self, names: Sequence[str]) -> "ColumnNames":
        """These names, reading files whose columns (contract names) are ``names``: one position per row when
        they hold a ``score`` and no ``response_mask`` nor any other token list; verl's ``token_level_scores``
        read as ``rm_scores`` when the files hold neither score column (``--column`` needs not say so)."""
        token_lists = [n for n in names if n in CONTRACT_COLUMNS and CONTRACT_COLUMNS[n].token_aligned]
        one = "response_mask" not in names and "score" in names and not token_lists
        part = "response_mask" not in names and {"responses", "attention_mask"} <= set(names)
        pairs = self.pairs
        if VERL_SCORES in names and not {"rm_scores", "score"} & set(names):
            pairs = tuple(sorted((*pairs, ("rm_scores", VERL_SCORES))))
        return dataclasses.replace(self, one_position=one and not part, response_part=part, pairs=pairs)

    def file_columns(self, columns: Sequence[str]) -> list[str]:
        """The files' names of the contract's ``columns`` to read (the one-position mask is made, not read)."""
        made = self.one_position or self.response_part
        wanted = [self.in_file(c) for c in columns if not (made and c == "response_mask")]
        if self.response_part and {"response_mask", "attention_mask"} & set(columns):
            wanted += [self.in_file(c) for c in ("responses", "attention_mask") if self.in_file(c) not in wanted]
        return wanted or ([self.in_file("score")] if self.one_position else wanted)

    def in_file(self, name: str) -> str:
        """The files' name of contract column ``name``."""
        return dict(self.pairs).get(name, name)

    def written(self, names: Sequence[str]) -> list[str]:
        """The names ``names`` (the contract's) are written under."""
        return [self.in_file(n) for n in names]

    def read(self, table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
        """``table`` as read from a file, its mapped columns under the contract's names; with ``one_position``
        a ``response_mask`` of ``[1]`` per row (when ``columns``, the contract's names asked for, include it)."""
        if self.pairs:
            contract = {file: name for name, file in self.pairs}
            table = table.rename_columns([contract.get(n, n) for n in table.column_names])
        if self.one_position and (columns is None or "response_mask" in columns):
            table = table.append_column(ONE_POSITION, _ones(table.num_rows))
        if self.response_part and "attention_mask" in table.column_names:
            table = response_part(table)
        if columns is not None and (self.one_position or self.response_part):  # what was read only to make a mask
            table = table.select([n for n in table.column_names if n in columns])
        return table

    def read_schema(self, schema: pa.Schema) -> pa.Schema:
        """A file's ``schema``, its mapped columns under the contract's names (no table built: pyarrow would
        import pandas for an empty one), and the one-position mask with ``one_position``."""
        contract = {file: name for name, file in self.pairs}
        fields = [f.with_name(contract.get(f.name, f.name)) for f in schema]
        if self.one_position or self.response_part:
            fields.append(ONE_POSITION)
        return pa.schema(fields, metadata=schema.metadata)

    def check(self, path: str, names: Sequence[str]) -> None:
        """Every mapped column is in the file (``names``), but those rladv writes (``advantages=adv``), and no
        contract name is one of its other columns."""
        for name, file in self.pairs:
            if name != file and file not in names and name not in WRITTEN:
                close = difflib.get_close_matches(file, names, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise InputError(path, f"{named('columns')} {name}={file}: the file has no column {file}{hint}")
            if name != file and name in names:
                raise InputError(path, f"{named('columns')} {name}={file}: the file has a column {name} too; map one "
                                 "of them")


@dataclass(frozen=True)
class Shard:
    """File ``index`` of a dataset: its rows are the dataset's rows ``[first_row, first_row + num_rows)``.
    Plain data, so it travels to other processes; ``chunks`` opens the file where it runs."""

    index: int
    path: str
    first_row: int
    num_rows: int
    names: ColumnNames = ColumnNames()
    schema: "pa.Schema | None" = None  # the dataset's, when this file's columns differ from it only physically

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int, file: pq.ParquetFile | None = None,
               batches: Iterable[pa.RecordBatch] | None = None) -> Iterator[Chunk]:
        """Yield chunks of at most ``chunk_rows`` rows holding only ``columns`` (all when None; the contract's
        names), in the dataset's column order and types (``schema``); from ``batches`` when the file's
        batches of ``chunk_rows`` rows, every column, are decoded already (``io.prefetch``)."""
        if batches is None:
            f = file if file is not None else open_parquet(self.path)
            wanted = self.names.file_columns(columns) if columns is not None else None
            batches = f.iter_batches(batch_size=chunk_rows, columns=wanted)
        start = 0
        try:
            for rb in batches:
                table = as_lists(self.names.read(pa.Table.from_batches([rb]), columns))
                if self.schema is not None:
                    table = conformed(table, self.schema)
                yield Chunk(self.index, self.path, start, self.first_row + start, table)
                start += rb.num_rows
        except (pa.ArrowException, OSError) as err:
            raise InputError(self.path, f"cannot be read past row {start} ({str(err).splitlines()[0]})") from None
        if start != self.num_rows:
            raise InputError(self.path, f"holds {start} readable rows but its footer says {self.num_rows}; "
                                        "the file is truncated or corrupt")


def list_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every ``fixed_size_list`` contract column (a padded ``[B, T]`` tensor saved with pyarrow)
    as the list of its rows that rladv reads; its rows keep their ``T`` positions (padding marked by
    ``attention_mask``). Other columns are carried as they are."""
    def listed(f: pa.Field) -> bool:
        return pa.types.is_fixed_size_list(f.type) and f.name in CONTRACT_COLUMNS

    if not any(listed(f) for f in schema):
        return schema
    return pa.schema([f.with_type(pa.list_(f.type.value_field)) if listed(f) else f for f in schema],
                     metadata=schema.metadata)


def as_lists(table: pa.Table) -> pa.Table:
    """``table`` with its ``fixed_size_list`` columns cast to lists (``list_schema``): the same values."""
    schema = list_schema(table.schema)
    return table if schema is table.schema else table.cast(schema)


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


class RowSource:
    """What the passes read rows from: ``paths`` (the files, as messages name them), ``schema``, ``file_rows``
    (rows per file), ``num_rows``, ``shards`` (the units a pass is split into), and chunks of rows with their
    provenance (``Chunk``: file, row within it, dataset-wide row). ``Dataset`` reads files; ``TableSource`` holds
    a table in memory."""

    paths: list[str]
    schema: pa.Schema
    file_rows: list[int]
    num_rows: int
    shards: list[Shard]
    names: ColumnNames  # how the files' columns are read as the contract's
    filter: "object | None" = None  # the --where that chose these rows (``frames.Filter``), if any
    skipped: Sequence[str] = ()  # rladv outputs a folder or pattern held beside the data, left out (``io.inputs``)

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        """Chunks of at most ``chunk_rows`` rows holding only ``columns`` (all when None), in row order."""
        raise NotImplementedError

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        """The chunks of one shard (``last``: no later pass reads it)."""
        raise NotImplementedError

    def locate(self, row: int) -> tuple[str, int]:
        """(file path, 0-based row within that file) of dataset-wide row ``row``."""
        raise NotImplementedError

    def row_origins(self) -> tuple[np.ndarray, np.ndarray]:
        """``locate`` for every row at once: each row's file index and row within that file, ``(B,)`` int64 each."""
        counts = np.asarray(self.file_rows, dtype=np.int64)
        file_index = np.repeat(np.arange(counts.size), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return file_index, np.arange(int(counts.sum()), dtype=np.int64) - starts[file_index]


class Dataset(RowSource):
    """One Parquet file, several files, folders of ``*.parquet`` or glob patterns (each sorted), read as one
    sequence of rows. ``inputs`` is one path or pattern, or a sequence of them (kept as given in ``inputs``);
    ``columns`` maps contract names to the files' names of those columns (``ColumnNames``)."""

    def __init__(self, inputs: str | os.PathLike | Sequence[str | os.PathLike],
                 columns: "Mapping[str, str] | None" = None):
        inputs = as_paths(inputs)
        self.inputs = inputs
        files, skipped = dataset_files(inputs)
        self.skipped = [str(p) for p in skipped]  # rladv outputs found beside the data (``io.inputs``)
        self.paths = [str(p) for p in files]
        self._files = [open_parquet(p) for p in self.paths]
        self.names = ColumnNames.of(columns)
        self.names.check(self.paths[0], self._files[0].schema_arrow.names)
        self.names = self.names.seeing(self.names.read_schema(self._files[0].schema_arrow).names)
        schemas = [self._as_read(f.schema_arrow) for f in self._files]
        self.schema = unified_schema(self.paths, schemas, self.names.written)
        # a column that may hold nulls in any of the files may in the dataset
        nullable = {field.name for schema in schemas for field in schema if field.nullable}
        self.schema = pa.schema([field.with_nullable(True) if field.name in nullable else field for field in self.schema],
                                metadata=self.schema.metadata)
        self.file_rows = [f.metadata.num_rows for f in self._files]
        self.num_rows = sum(self.file_rows)
        starts = [0, *itertools.accumulate(self.file_rows)]
        differs = [not schema.equals(self.schema, check_metadata=False) for schema in schemas]
        self.shards = [Shard(i, p, s, n, self.names, self.schema if d else None) for i, (p, s, n, d) in
                       enumerate(zip(self.paths, starts, self.file_rows, differs))]
        self._once: ReadOnce | None = None

    def _as_read(self, schema: pa.Schema) -> pa.Schema:
        """A file's schema as rladv reads it: mapped columns under the contract's names, fixed-size contract
        lists as lists (so padded dumps of different widths form one dataset)."""
        return list_schema(self.names.read_schema(schema))

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        """Yield chunks of at most ``chunk_rows`` rows holding only ``columns`` (all when None), in file order;
        a chunk never spans two files."""
        for shard in self.shards:
            yield from self.shard_chunks(shard, columns, chunk_rows)

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        """``shard.chunks`` through the reader this dataset already holds, or from ``read_once``'s chunks
        (``last``: no later pass reads this shard, so kept chunks are dropped as they are taken)."""
        return _kept_or_read(self._once, shard, columns, chunk_rows, last, self._files[shard.index])

    def read_once(self, chunk_rows: int, budget: int, check: Check, writer: "AtomicParquetWriter | None" = None,
                  as_read: bool = False) -> "ReadOnce | None":
        """When the dataset's decoded columns should fit ``budget`` bytes, start decoding (and ``check``ing)
        every chunk on a thread; ``shard_chunks`` calls with the same ``chunk_rows`` take them from there (see
        ``ReadOnce``), and ``writer`` gets them (``AtomicParquetWriter.carry``) once all are kept, or with
        ``as_read`` as they are (``ReadOnce``). Close it when the run ends. None (every pass reads the files)
        when the dataset looks larger."""
        prefetched = claim(self.paths)
        if sum(decoded_bytes(f) for f in self._files) > budget:
            return None
        self._once = ReadOnce(self, chunk_rows, budget, check, (lambda shard: writer) if writer is not None else None,
                              as_read, prefetched)
        return self._once

    def locate(self, row: int) -> tuple[str, int]:
        """(file path, 0-based row within that file) of dataset-wide row ``row``."""
        for path, n in zip(self.paths, self.file_rows):
            if row < n:
                return path, row
            row -= n
        raise IndexError(row)


def _kept_or_read(once: "ReadOnce | None", shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                  last: bool, file: pq.ParquetFile | None = None) -> Iterator[Chunk]:
    """A shard's chunks from ``once`` when it holds them (``ReadOnce.shard_chunks``), else from its file."""
    kept = once.shard_chunks(shard, chunk_rows, last) if once is not None else None
    if kept is None:
        return shard.chunks(columns, chunk_rows, file)
    if columns is None:
        return kept
    return (Chunk(c.file_index, c.path, c.start, c.first_row, c.table.select(list(columns)), c.checked) for c in kept)


class ShardSet:
    """Some shards of a dataset, read where this process runs (a Ray worker holding them for a whole run):
    while their decoded columns should fit ``budget`` bytes, a ``ReadOnce`` decodes and ``check``s them on a
    thread from the start, and every pass takes them from memory (the first in the shards' order); else, or
    after ``read_files``, each pass reads the files. ``writer_of(shard)`` receives the shard's chunks once all
    are kept (``ReadOnce``: the worker runs on the CPU and imports no torch beside the decoding)."""

    def __init__(self, shards: Sequence[Shard], chunk_rows: int, budget: int, check: Check,
                 writer_of: "Callable[[Shard], AtomicParquetWriter | None] | None" = None):
        self.shards = list(shards)
        self.num_rows = sum(s.num_rows for s in self.shards)
        self._once: ReadOnce | None = None
        if budget > 0 and sum(decoded_bytes(open_parquet(s.path)) for s in self.shards) <= budget:
            self._once = ReadOnce(self, chunk_rows, budget, check, writer_of)

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        """As ``Dataset.shard_chunks``."""
        return _kept_or_read(self._once, shard, columns, chunk_rows, last)

    def read_files(self) -> None:
        """Stop keeping chunks: every later pass reads the files (after a pass failed part-way, a retry must
        not take up the kept chunks where the failed pass left them)."""
        if self._once is not None:
            self._once.close()
            self._once = None


class ReadOnce:
    """A dataset's chunks, every column, decoded once on a background thread in dataset order.

    The thread starts before the caller needs the data (``compute_file`` starts it before importing the
    passes), so decoding, and the row checks of every column (``check``), overlap start-up. While the decoded chunks
    fit ``budget`` bytes they are all kept, and every pass takes them from memory instead of reading the
    files again. Past the budget, the kept chunks are
    dropped and the thread only reads ahead of the first pass (``READ_AHEAD`` chunks, each handed out once);
    later passes read the files themselves (``shard_chunks`` returns None). Memory stays within the budget
    plus a few chunks, whatever the dataset's size. A read error is raised where the pass reaches it.
    ``writer_of(shard)`` names the writer that receives the shard's chunks (``AtomicParquetWriter.carry``), in
    dataset order, and ``None`` after the last chunk it gets, for their carried columns' early encoding (on
    threads at the lowest priority): with ``as_read``, as they are kept, for a process that meanwhile imports
    torch (a run that may use CUDA, docs/arrays.md), whose import leaves CPU idle; else once every chunk is
    decoded and kept (``_carry_kept``), since the encoders beside the decoding would slow it down. When the
    chunks are dropped, each writer drops what it took (``drop_carried``). ``prefetched``: the first file's
    batches, decoded since the executable started (``io.prefetch``), taken instead of decoding it again where
    they are what the thread would decode.
    """

    def __init__(self, dataset: "Dataset | ShardSet", chunk_rows: int, budget: int, check: Check,
                 writer_of: "Callable[[Shard], AtomicParquetWriter | None] | None" = None, as_read: bool = False,
                 prefetched: Prefetch | None = None):
        self.chunk_rows, self.budget, self._check, self._writer_of = chunk_rows, budget, check, writer_of
        self._prefetched = prefetched
        self._as_read = as_read  # hand chunks over as they are kept (``_read``)
        self._writers: list[AtomicParquetWriter] = []  # every writer handed chunks, in the order first handed
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

    def _read(self, dataset: "Dataset | ShardSet") -> None:
        try:
            decoded = self._decoded(dataset)
            if self._writer_of is not None and self._as_read:
                self._hand_over(decoded)
            else:
                for _ in decoded:
                    pass
                if self._writer_of is not None and self._keep:
                    self._carry_kept(dataset.shards)
        except BaseException as err:
            with self._cond:
                self._error = err
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _decoded(self, dataset: "Dataset | ShardSet") -> Iterator[tuple[Shard, pa.Table]]:
        """Decode, check and keep every chunk in dataset order, yielding each (its shard, its table) once kept;
        stops once closed."""
        for shard in dataset.shards:  # the thread opens the files itself: readers are not shared
            prefetched, self._prefetched = self._prefetched, None
            batches = prefetched.batches(shard.path, self.chunk_rows) if prefetched is not None else None
            for chunk in shard.chunks(None, self.chunk_rows, batches=batches):
                if not self._put(self._checked(chunk)):
                    return
                yield shard, chunk.table

    def _hand_over(self, chunks: Iterable[tuple[Shard, pa.Table]]) -> None:
        """Hand each chunk to its shard's writer (``writer_of``), in order, and ``None`` after each writer's last."""
        writer = None
        for shard, table in chunks:
            following = self._writer_of(shard)
            if following is not writer:
                self._carried(writer, None)
                writer = following
            self._carried(writer, table)
        self._carried(writer, None)

    def _carried(self, writer: "AtomicParquetWriter | None", table: pa.Table | None) -> None:
        """Hand ``writer`` the chunk just kept (``None``: its last), as long as every chunk so far was kept and
        the reading was not closed."""
        if writer is not None and self._keep and not self._closed:
            if writer not in self._writers:
                self._writers.append(writer)
            writer.carry(table)

    def _carry_kept(self, shards: Sequence[Shard]) -> None:
        """Hand every writer its shards' kept chunks (``_hand_over``) once all are decoded (before ``_done``: the
        first pass still waits for the last shard). Without a torch import beside the decoding (a run on the
        CPU, a Ray worker) the passes wait for it, and encoders at the lowest priority beside it slowed it down
        (a kept worker decoding 20M tokens on 2 cores beside the driver's torch import: 3.9-4.5 s with them,
        1.9-2.4 s without): they take the GIL between calls and may hold it while they wait for a CPU."""
        of_index = {shard.index: shard for shard in shards}
        self._hand_over((of_index[chunk.file_index], chunk.table) for chunk in self._chunks)

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
                for writer in self._writers:
                    writer.drop_carried()
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


class TableSource(RowSource):
    """An in-memory Arrow table read as a dataset: one 'file' named ``name``, or, with ``origin``, the rows of
    a dataset's files taken out of them (``Origin``), so that every message and report names each row's file
    and its row there. Chunks never span two files, nor a gap between rows of one file."""

    def __init__(self, table: pa.Table, name: str = "<table>", origin: "Origin | None" = None,
                 columns: "Mapping[str, str] | None" = None):
        self.names = ColumnNames.of(columns)
        self.names.check(name, table.column_names)
        self.names = self.names.seeing(self.names.read_schema(table.schema).names)
        table = as_lists(self.names.read(table))
        self.table, self.origin = table, origin
        self.schema = table.schema
        self.num_rows = table.num_rows
        if origin is None:
            self.paths, self.file_rows = [name], [table.num_rows]
        else:
            if len(origin.file_index) != table.num_rows:
                raise ValueError("origin: one (file, row) per row of the table")
            self.paths = list(origin.paths)
            self.file_rows = np.bincount(origin.file_index, minlength=len(self.paths)).tolist()
        self.shards = [Shard(0, name, 0, table.num_rows)]

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        table = self.table.select(list(columns)) if columns is not None else self.table
        for begin, end in self._runs():
            for start in range(begin, end, chunk_rows):
                rows = min(chunk_rows, end - start)
                index, at = self._where(start)
                yield Chunk(index, self.paths[index], at, start, table.slice(start, rows))

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        return self.chunks(columns, chunk_rows)

    def locate(self, row: int) -> tuple[str, int]:
        index, at = self._where(row)
        return self.paths[index], at

    def row_origins(self) -> tuple[np.ndarray, np.ndarray]:
        if self.origin is None:
            return super().row_origins()
        return self.origin.file_index.astype(np.int64), self.origin.file_row.astype(np.int64)

    def _where(self, row: int) -> tuple[int, int]:
        """(file index, row within that file) of table row ``row``."""
        if self.origin is None:
            return 0, row
        return int(self.origin.file_index[row]), int(self.origin.file_row[row])

    def _runs(self) -> list[tuple[int, int]]:
        """``[begin, end)`` ranges of table rows that are consecutive rows of one file."""
        n = self.num_rows
        if self.origin is None or n == 0:
            return [(0, n)]
        index, row = self.origin.file_index, self.origin.file_row
        breaks = np.flatnonzero((index[1:] != index[:-1]) | (row[1:] != row[:-1] + 1)) + 1
        bounds = [0, *breaks.tolist(), n]
        return list(zip(bounds[:-1], bounds[1:]))


@dataclass(frozen=True)
class Origin:
    """Where the rows of an in-memory table came from: the dataset's ``paths``, and per row its file's index
    in them and its row within that file (``(B,)`` int64 each)."""

    paths: tuple[str, ...]
    file_index: np.ndarray
    file_row: np.ndarray
