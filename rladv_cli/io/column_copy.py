"""The carried columns copied from the input files byte for byte, instead of decoded, encoded and compressed
again (docs/performance.md, "Carried columns copied").

An output column that holds an input column unchanged (docs/contract.md §3) can take the input's column chunks
as they are when the output's row groups are the input's. ``plan`` checks, file by file, that this is safe;
``AtomicParquetWriter`` then writes row groups of the input's sizes, encodes only rladv's own columns, and joins
each row group from the input's chunks and its own (``parquet_join.Part``). Where ``plan`` says no, the output
is encoded whole as before, in 512-row groups. The decision depends only on the input files and the output's
columns, never on ``--chunk-rows``, ``--cache-mib`` or the engine, so neither do the output's bytes.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from .parquet_join import (_CHUNK_META_DATA, _FILE_NUM_ROWS, _FILE_ROW_GROUPS, _META_PATH, _ROW_GROUP_BYTES,
                           _ROW_GROUP_COLUMNS, _ROW_GROUP_NUM_ROWS, MAGIC, Part, Struct, chunk_range, decode_footer,
                           encode_footer, value)
from .prefetch import identity

# Writers whose column chunks are exactly the bytes [first page, + total_compressed_size), as the Parquet format
# says (Arrow C++ for pyarrow and pandas, polars, Rust's parquet); some older writers' are not, and readers
# correct for them. Other writers' files are encoded again.
EXACT_WRITERS = (b"parquet-cpp-arrow ", b"Polars", b"parquet-rs ")
# An output row group's own columns are held until its last row is computed, then encoded: row groups above
# this many bytes (uncompressed, all of the input's columns) are encoded again in 512-row groups instead.
MAX_ROW_GROUP_BYTES = 128 << 20
# Smaller row groups read slowly (each has its footer entries and pages): a file with any, its last one aside,
# is encoded again in 512-row groups.
MIN_ROW_GROUP_ROWS = 64

# parquet.thrift field ids, beside those parquet_join names
_SCHEMA, _CREATED_BY, _ENCRYPTION = 2, 6, 8
_ELEMENT_NAME, _ELEMENT_CHILDREN = 4, 5
_CHUNK_FILE_PATH, _CHUNK_ENCRYPTED = 1, (8, 9)
_CHUNK_PAGE_INDEXES = (4, 5, 6, 7)  # offset and column index: after the row groups, not copied along
_META_BLOOM_FILTER = (14, 15)


class _NotCopied(Exception):
    """A file whose chunks are not copied, and why."""


@dataclass
class _Source:
    """One input file: its descriptor, identity, and per row group the carried columns' chunks."""

    path: str
    fd: int
    identity: tuple[int, int, int, int]
    row_groups: list[tuple[int, list[Struct]]]  # (rows, ColumnChunk structs of the carried columns)


class CopyPlan:
    """The output's row groups (``sizes``: the input files' row groups, in order) and, for each, the carried
    columns' chunks in their input file (``part``, once per row group). ``close`` when done."""

    def __init__(self, sources: list[_Source]):
        self._sources = sources
        self._parts = [(s, rows, chunks) for s in sources for rows, chunks in s.row_groups]
        self.sizes = [rows for _, rows, _ in self._parts]

    def part(self, index: int) -> Part:
        source, rows, chunks = self._parts[index]
        return Part(chunks, rows, lambda start, end: _read(source, start, end),
                    copy_into=lambda fd, start, end: _copy(source, fd, start, end))

    def check_unchanged(self) -> None:
        """Raise ``InputError`` when an input file changed since ``plan`` opened it: the output would mix its
        old and new contents."""
        for source in self._sources:
            try:
                now = identity(os.stat(source.path))
            except OSError:
                now = None
            if now != source.identity or identity(os.fstat(source.fd)) != source.identity:
                raise InputError(source.path, "changed while rladv read it; nothing was written, run again")

    def close(self) -> None:
        for source in self._sources:
            os.close(source.fd)
        self._sources = []


def plan(paths: Sequence[str], footer: Struct, carried: Sequence[str], schema: pa.Schema) -> CopyPlan | None:
    """The plan to copy the ``carried`` columns (their names in the files) of ``paths`` (the output's rows are
    theirs, in order) into an output of ``schema`` whose footer (any file of that schema, e.g. one without rows)
    is ``footer``; None unless every file allows it: an exact writer (``EXACT_WRITERS``), no encryption, each
    carried column of the same Arrow type and the same Parquet schema as in the output, row groups of at least
    ``MIN_ROW_GROUP_ROWS`` rows (a file's last aside) and at most ``MAX_ROW_GROUP_BYTES``, chunks in the file."""
    if not paths or not carried or not hasattr(os, "pread"):  # positional reads: not on Windows
        return None
    wanted = _schema_trees(value(footer, _SCHEMA)[1])
    sources: list[_Source] = []
    try:
        for path in paths:
            sources.append(_source(os.fspath(path), {name: wanted[name] for name in carried}, schema))
    except (_NotCopied, OSError, ValueError, IndexError, KeyError, TypeError, RecursionError, struct.error,
            pa.ArrowException):
        CopyPlan(sources).close()
        return None
    return CopyPlan(sources)


def _source(path: str, wanted: dict[str, bytes], schema: pa.Schema) -> _Source:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        stamp = identity(os.fstat(fd))
        size = stamp[2]
        tail = os.pread(fd, 8, size - 8) if size >= 12 else b""
        if len(tail) != 8 or tail[4:] != MAGIC:
            raise _NotCopied("not a plain Parquet file")
        (length,) = struct.unpack("<I", tail[:4])
        if length > size - 12:
            raise _NotCopied("footer larger than the file")
        footer = decode_footer(os.pread(fd, length, size - 8 - length))
        created_by = value(footer, _CREATED_BY) or b""
        if not created_by.startswith(EXACT_WRITERS) or value(footer, _ENCRYPTION) is not None:
            raise _NotCopied(f"written by {created_by!r}")
        with os.fdopen(os.dup(fd), "rb") as f:
            arrow = pq.read_schema(f)
        trees = _schema_trees(value(footer, _SCHEMA)[1])
        for name, tree in wanted.items():
            if name not in arrow.names or trees.get(name) != tree:
                raise _NotCopied(f"column {name} is stored differently")
            given, out = arrow.field(name), schema.field(name)
            if given.type != out.type or given.nullable != out.nullable:
                raise _NotCopied(f"column {name} is {given.type}, the output's {out.type}")
        # a row group without rows (pyarrow writes one for an empty table) has nothing to give the output
        groups = [g for g in (value(footer, _FILE_ROW_GROUPS) or (None, []))[1] if value(g, _ROW_GROUP_NUM_ROWS)]
        row_groups = [_carried_chunks(g, wanted, size - 8 - length) for g in groups]
        rows = [n for n, _ in row_groups]
        if sum(rows) != value(footer, _FILE_NUM_ROWS) or any(n < MIN_ROW_GROUP_ROWS for n in rows[:-1]):
            raise _NotCopied(f"row groups of {rows} rows")
        return _Source(path, fd, stamp, row_groups)
    except BaseException:
        os.close(fd)
        raise


def _carried_chunks(group: Struct, wanted: dict[str, bytes], end: int) -> tuple[int, list[Struct]]:
    """A row group's rows and its carried columns' chunks, without the page indexes and bloom filters that point
    outside them."""
    if value(group, _ROW_GROUP_BYTES) > MAX_ROW_GROUP_BYTES:
        raise _NotCopied("a row group too large to hold")
    chunks, found = [], set()
    for chunk in value(group, _ROW_GROUP_COLUMNS)[1]:
        meta = value(chunk, _CHUNK_META_DATA)
        name = value(meta, _META_PATH)[1][0].decode() if meta is not None else None
        if name not in wanted:
            continue
        found.add(name)
        if any(f[0] == _CHUNK_FILE_PATH or f[0] in _CHUNK_ENCRYPTED for f in chunk):
            raise _NotCopied("a chunk in another file, or encrypted")
        start, stop = chunk_range(meta)
        if not len(MAGIC) <= start <= stop <= end:
            raise _NotCopied("a chunk outside the file's pages")
        meta[:] = [f for f in meta if f[0] not in _META_BLOOM_FILTER]
        chunks.append([f for f in chunk if f[0] not in _CHUNK_PAGE_INDEXES])
    if found != set(wanted):
        raise _NotCopied(f"a row group without the chunks of {sorted(set(wanted) - found)}")
    return value(group, _ROW_GROUP_NUM_ROWS), chunks


def _schema_trees(elements: list[Struct]) -> dict[str, bytes]:
    """Each top-level column's ``SchemaElement``s (its own and its descendants', depth first), encoded."""
    trees, i = {}, 1  # element 0 is the root
    while i < len(elements):
        end, open_ = i, 1
        while open_:
            open_ += (value(elements[end], _ELEMENT_CHILDREN) or 0) - 1
            end += 1
        trees[value(elements[i], _ELEMENT_NAME).decode()] = b"".join(encode_footer(e) for e in elements[i:end])
        i = end
    return trees


def _read(source: _Source, start: int, end: int) -> bytes:
    data = os.pread(source.fd, end - start, start)
    if len(data) != end - start:
        raise _shorter(source)
    return data


def _copy(source: _Source, fd: int, start: int, end: int) -> bool:
    """Append the bytes [start, end) of ``source`` to ``fd`` at its offset, copied by the kernel: a buffer in
    between would be fresh memory each time, whose page faults cost more than the copy. False when the system
    cannot (no ``copy_file_range``, or a file system that refuses it) and nothing was copied."""
    if not hasattr(os, "copy_file_range"):
        return False
    at = start
    while at < end:
        try:
            n = os.copy_file_range(source.fd, fd, end - at, at)
        except OSError:
            n = 0
        if n == 0:  # refused, or nothing copied (some file systems): the rest through a buffer
            if at == start:
                return False
            rest = memoryview(_read(source, at, end))
            while rest:
                rest = rest[os.write(fd, rest):]
            return True
        at += n
    return True


def _shorter(source: _Source) -> InputError:
    return InputError(source.path, "changed while rladv read it (shorter now); nothing was written, run again")
