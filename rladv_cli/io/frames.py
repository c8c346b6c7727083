"""Frames as rows (docs/python-api.md, "Frames"): a polars ``DataFrame`` or a pyarrow ``Table`` held in memory,
a polars ``LazyFrame`` streamed chunk by chunk (its query runs once per pass, ``collect_batches``), results
handed back as polars frames over the same Arrow buffers, and ``--where``: a SQL predicate polars evaluates,
pushed into the Parquet scan (``open_rows``, the rows every command reads).

polars gives strings and lists Arrow's large types (64-bit offsets) and sometimes views; rladv reads and
writes the standard ones (32-bit offsets, lists' values named ``element``, as pyarrow reads a Parquet file), so a
frame and the file it was read from give the same output table. ``standard`` casts them (the offsets are
rewritten, the values shared).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from ..config.flags import named
from ..errors import ConfigError, InputError
from .inputs import standard_type
from .read import (
    Chunk,
    ColumnNames,
    Dataset,
    Origin,
    RowSource,
    Shard,
    TableSource,
    as_lists,
)

if TYPE_CHECKING:
    import polars as pl

LAZY_NAME = "<lazyframe>"
FRAME_NAME = "<frame>"
TABLE_NAME = "<table>"
PANDAS_NAME = "<pandas>"


def _polars():
    import polars as pl

    return pl


def is_polars(obj: Any) -> bool:
    """A polars ``DataFrame`` or ``LazyFrame`` (without importing polars when it is not loaded)."""
    pl = sys.modules.get("polars")
    return pl is not None and isinstance(obj, (pl.DataFrame, pl.LazyFrame))


def is_pandas(obj: Any) -> bool:
    """A pandas ``DataFrame`` (without importing pandas when it is not loaded)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def is_frame(obj: Any) -> bool:
    """Rows held by the caller rather than named by paths: an Arrow table, a polars or a pandas frame."""
    return isinstance(obj, pa.Table) or is_polars(obj) or is_pandas(obj)


def _from_pandas(frame: Any) -> pa.Table:
    """A pandas frame's columns as Arrow (its index dropped: rows are numbered by position), standard types."""
    try:
        return standard(pa.Table.from_pandas(frame, preserve_index=False))
    except (pa.ArrowException, ValueError, TypeError) as err:
        raise InputError(PANDAS_NAME, f"cannot be read as Arrow columns: {str(err).splitlines()[0]}") from None


def standard(table: pa.Table) -> pa.Table:
    """``table`` with large and view strings, binaries and lists as the standard types; a column whose offsets
    do not fit 32 bits stays as it is."""
    if all(str(standard_type(f.type)) == str(f.type) for f in table.schema):  # str: with the field names
        return table
    columns = []
    for f, col in zip(table.schema, table.columns):
        t = standard_type(f.type)
        try:
            columns.append(col if str(t) == str(f.type) else col.cast(t))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            columns.append(col)
    return pa.Table.from_arrays(columns, names=table.column_names, metadata=table.schema.metadata)


def to_polars(table: pa.Table) -> "pl.DataFrame":
    """``table`` as a polars DataFrame over the same value buffers (no rechunking)."""
    return _polars().from_arrow(table, rechunk=False)


def source_of(frame: Any, columns: Optional[Mapping[str, str]] = None) -> RowSource:
    """The rows of an Arrow table, a polars or pandas DataFrame (in memory) or a polars LazyFrame (streamed)."""
    if isinstance(frame, pa.Table):
        return TableSource(frame, TABLE_NAME, columns=columns)
    if is_pandas(frame):
        return TableSource(_from_pandas(frame), PANDAS_NAME, columns=columns)
    pl = _polars()
    if isinstance(frame, pl.LazyFrame):
        return LazySource(frame, columns=columns)
    if isinstance(frame, pl.DataFrame):
        return TableSource(standard(frame.to_arrow()), FRAME_NAME, columns=columns)
    raise TypeError(f"expected a pyarrow Table, a polars DataFrame or LazyFrame or a pandas DataFrame, "
                    f"got {type(frame).__name__}")


class LazySource(RowSource):
    """A polars ``LazyFrame`` read as one 'file' named ``name``: its schema from an empty result, its row count
    from ``select(len())``, and each pass's chunks from one streaming run of the query (``collect_batches``)
    cut to ``chunk_rows`` rows. A query that gives another number of rows in a later pass is an error."""

    def __init__(self, frame: "pl.LazyFrame", name: str = LAZY_NAME, columns: Optional[Mapping[str, str]] = None):
        pl = _polars()
        self._frame = frame
        self.names = ColumnNames.of(columns)
        try:
            empty = standard(frame.head(0).collect().to_arrow())
            self.num_rows = int(frame.select(pl.len()).collect().item())
        except pl.exceptions.PolarsError as err:
            raise InputError(name, f"the LazyFrame's query failed: {str(err).splitlines()[0]}") from None
        self.names.check(name, empty.column_names)
        self.names = self.names.seeing(self.names.read_schema(empty.schema).names)
        self.schema = as_lists(self.names.read(empty)).schema
        self.paths, self.file_rows = [name], [self.num_rows]
        self.shards = [Shard(0, name, 0, self.num_rows, self.names)]

    def chunks(self, columns: Sequence[str] | None, chunk_rows: int) -> Iterator[Chunk]:
        pl = _polars()
        query = self._frame if columns is None else self._frame.select(self.names.file_columns(columns))
        start = 0
        try:
            for table in _cut(query.collect_batches(chunk_size=chunk_rows), chunk_rows):
                yield Chunk(0, self.paths[0], start, start, as_lists(self.names.read(standard(table), columns)))
                start += table.num_rows
        except pl.exceptions.PolarsError as err:
            raise InputError(self.paths[0], f"the LazyFrame's query failed past row {start}: "
                             f"{str(err).splitlines()[0]}") from None
        if start != self.num_rows:
            raise InputError(self.paths[0], f"gave {start} rows in one pass and {self.num_rows} in the first; "
                             "rladv reads a LazyFrame once per pass, so its query must give the same rows each time")

    def shard_chunks(self, shard: Shard, columns: Sequence[str] | None, chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        return self.chunks(columns, chunk_rows)

    def locate(self, row: int) -> tuple[str, int]:
        return self.paths[0], row


def _cut(frames: Iterator["pl.DataFrame"], rows: int) -> Iterator[pa.Table]:
    """polars' batches as Arrow tables of exactly ``rows`` rows (the last may be shorter)."""
    held: list[pa.Table] = []
    n = 0
    for df in frames:
        t = df.to_arrow()
        while t.num_rows:
            take = min(rows - n, t.num_rows)
            held.append(t.slice(0, take))
            n += take
            t = t.slice(take)
            if n == rows:
                yield pa.concat_tables(held)
                held, n = [], 0
    if n:
        yield pa.concat_tables(held)


# ==================================================================================== --where
ROW_INDEX = "__rladv_file_row"


@dataclass(frozen=True)
class Filter:
    """A ``--where`` predicate and what it kept: ``rows_read`` of the dataset, ``rows_kept`` of them."""

    where: str
    rows_read: int
    rows_kept: int


def open_rows(inputs: Any, columns: Optional[Mapping[str, str]] = None, where: Optional[str] = None) -> RowSource:
    """The rows a command reads: files (``Dataset``) or a frame (``source_of``), only those ``where`` keeps."""
    framed = is_frame(inputs)
    if where is None:
        return source_of(inputs, columns) if framed else Dataset(inputs, columns=columns)
    if framed:
        return _filtered_frame(inputs, columns, where)
    return _filtered_files(Dataset(inputs, columns=columns), where)


# A predicate is over the input's own columns. A subquery could name a table function (read_csv, read_parquet,
# ...), and polars opens such a file while it parses the text, before any row is seen: SELECT and VALUES are
# refused anywhere, a query's other first words (FROM, WITH, TABLE) right after a parenthesis, and any call of a
# function named read_* or scan_*.
QUERY_WORDS = ("select", "values")
QUERY_STARTS = ("from", "with", "table")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _bare_words(text: str, backslash: bool) -> Iterator[tuple[str, str, str]]:
    """``text``'s words outside quoted literals and identifiers (``'...'``, ``"..."``, backquotes; a doubled
    quote continues them, and so does a backslash-escaped one when ``backslash``), each with the characters
    just before and just after it (spaces skipped)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            i += 1
            while i < n:
                if backslash and text[i] == "\\":
                    i += 2
                elif text[i] == c and text[i + 1:i + 2] == c:
                    i += 2
                elif text[i] == c:
                    break
                else:
                    i += 1
            i += 1
        elif (found := _WORD.match(text, i)) is not None:
            i = found.end()
            yield found.group(), text[:found.start()].rstrip()[-1:], text[i:].lstrip()[:1]
        else:
            i += 1


def refuse_queries(where: str) -> None:
    """Refuse a predicate that holds a subquery or calls a table function: it would read something other than
    the input. Quoted text is skipped under both quoting rules a SQL dialect may use (a doubled quote; a
    backslash too), and a word seen outside quotes under either is refused: no way of quoting hides one."""
    flag = named("where")
    for backslash in (False, True):
        for word, before, after in _bare_words(where, backslash):
            low = word.lower()
            if low in QUERY_WORDS or (low in QUERY_STARTS and before == "("):
                raise ConfigError(f"{flag} {where!r} holds a subquery ({word.upper()}); {flag} is a predicate over "
                                  "the input's own columns and reads nothing else")
            if after == "(" and low.startswith(("read_", "scan_")):
                raise ConfigError(f"{flag} {where!r} calls {word}, which reads a file; {flag} is a predicate "
                                  "over the input's own columns and reads nothing else")


def _predicate(where: str) -> "pl.Expr":
    pl = _polars()
    if not where.strip():
        raise ConfigError(f"{named('where')} is empty; give a SQL predicate, e.g. {named('where')} \"step >= 100\"")
    refuse_queries(where)
    try:
        return pl.sql_expr(where)
    except (pl.exceptions.PolarsError, ValueError) as err:
        raise ConfigError(f"{named('where')} {where!r} is not a SQL predicate polars reads: "
                          f"{str(err).splitlines()[0]}") from None


def _collect(query: "pl.LazyFrame", where: str, path: str, names: Sequence[str]) -> "pl.DataFrame":
    """``query`` run (streaming); a column the predicate names that the data lacks is a one-line error."""
    import difflib
    import re

    pl = _polars()
    try:
        return query.collect(engine="streaming")
    except pl.exceptions.ColumnNotFoundError as err:
        found = re.search(r'"([^"]+)"', str(err))
        name = found.group(1) if found else "?"
        close = difflib.get_close_matches(name, list(names), n=1)
        raise InputError(path, f"{named('where')} {where!r} names column {name}, which it lacks"
                         + (f" (did you mean {close[0]}?)" if close else "")) from None
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"{named('where')} {where!r} failed: {str(err).splitlines()[0]}") from None


def _filtered_files(ds: Dataset, where: str) -> TableSource:
    """The rows of ``ds``'s files that ``where`` keeps, in memory, each naming its file and its row there
    (``Origin``). polars pushes the predicate into each file's scan: rows it drops are never held."""
    pl = _polars()
    expr = _predicate(where)
    parts, file_index, file_row = [], [], []
    for i, path in enumerate(ds.paths):
        query = pl.scan_parquet(path).with_row_index(ROW_INDEX).filter(expr)
        kept = _collect(query, where, path, ds.names.written(ds.columns))
        file_row.append(kept[ROW_INDEX].to_numpy().astype(np.int64))
        file_index.append(np.full(kept.height, i, dtype=np.int64))
        parts.append(standard(kept.drop(ROW_INDEX).to_arrow()))
    table = pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
    _kept_some(table.num_rows, ds.paths[0], where, ds.num_rows)
    source = TableSource(table, ds.paths[0], Origin(tuple(ds.paths), np.concatenate(file_index),
                                                    np.concatenate(file_row)), dict(ds.names.pairs))
    source.filter = Filter(where, ds.num_rows, table.num_rows)
    source.skipped = ds.skipped
    return source


def _filtered_frame(frame: Any, columns: Optional[Mapping[str, str]], where: str) -> RowSource:
    """A frame's rows that ``where`` keeps: a LazyFrame stays lazy (its kept rows are numbered as the query
    gives them); a table or DataFrame keeps its rows' numbers (``Origin``)."""
    pl = _polars()
    expr = _predicate(where)
    if isinstance(frame, pl.LazyFrame):
        read = LazySource(frame, columns=columns).num_rows
        source = LazySource(frame.filter(expr), columns=columns)
        source.filter = Filter(where, read, source.num_rows)
        return source
    name = FRAME_NAME if isinstance(frame, pl.DataFrame) else PANDAS_NAME if is_pandas(frame) else TABLE_NAME
    df = frame if isinstance(frame, pl.DataFrame) else pl.from_arrow(
        _from_pandas(frame) if is_pandas(frame) else frame, rechunk=False)
    kept = _collect(df.lazy().with_row_index(ROW_INDEX).filter(expr), where, name, df.columns)
    _kept_some(kept.height, name, where, df.height)
    rows = kept[ROW_INDEX].to_numpy().astype(np.int64)
    source = TableSource(standard(kept.drop(ROW_INDEX).to_arrow()), name,
                         Origin((name,), np.zeros(rows.size, dtype=np.int64), rows), columns)
    source.filter = Filter(where, df.height, kept.height)
    return source


def _kept_some(kept: int, path: str, where: str, read: int) -> None:
    if kept == 0:
        raise InputError(path, f"{named('where')} {where!r} keeps none of its {read} rows")
