"""One Parquet file from row groups encoded apart, so that several can be encoded at once.

pyarrow's ``ParquetWriter`` encodes and compresses a file's row groups one after another on one thread, and
at 20M tokens that is most of a run. Here each row group is written by its own ``ParquetWriter`` as a whole
one-row-group file in memory (any number at a time, pyarrow releases the GIL), and ``RowGroupJoiner`` appends
them in order: the pages are copied as they are, and the footer, a Thrift compact-protocol ``FileMetaData``,
is rebuilt with the row groups of every part, their file offsets moved by where the part's pages landed. The
bytes are those one ``ParquetWriter`` writes for the same row groups (pyarrow writes no row-group ordinals
outside encrypted files; a test compares the bytes).

The Thrift codec is generic (field order, integer widths and list headers survive a decode/encode round
trip byte for byte); only the offset fields named below are interpreted.

``append_columns`` puts one row group together from several such files, each holding some of the columns of
the same rows (``io.AtomicParquetWriter`` encodes the input columns the output carries unchanged while the
input is read, and rladv's own columns later): a column chunk is one run of pages, so its bytes are copied and
only its offsets move.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Callable

MAGIC = b"PAR1"

# Thrift compact-protocol type codes.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_INTEGERS = (_I16, _I32, _I64)

# Field ids (parquet.thrift) of the absolute file offsets, by struct, and of the sizes a row group sums.
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_ROW_GROUP_COLUMNS, _ROW_GROUP_BYTES, _ROW_GROUP_NUM_ROWS, _ROW_GROUP_FILE_OFFSET, _ROW_GROUP_COMPRESSED = 1, 2, 3, 5, 6
_CHUNK_OFFSETS = (2, 4, 6)          # file_offset, offset_index_offset, column_index_offset
_CHUNK_META_DATA = 3
_CHUNK_OUTSIDE = (4, 6)             # page indexes: written after the row groups, not inside a column chunk
_META_PATH, _META_UNCOMPRESSED, _META_COMPRESSED = 3, 6, 7
_META_DATA_PAGE, _META_DICTIONARY_PAGE, _META_BLOOM_FILTER = 9, 11, 14
_META_OFFSETS = (9, 10, 11, 14)     # data, index and dictionary page offsets, bloom_filter_offset

# A struct is a list of [field id, type code, value]; a list or set is (element type, [values]); a map is
# (key type, value type, [(key, value)]). Booleans inside containers keep their one raw byte.
Struct = list


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def value(self, kind: int):
        if kind in _INTEGERS:
            n = self.varint()
            return (n >> 1) ^ -(n & 1)
        if kind in (_TRUE, _FALSE, _BYTE):  # a boolean outside a field header is one byte
            return self.byte()
        if kind == _DOUBLE:
            self.pos += 8
            return bytes(self.data[self.pos - 8:self.pos])
        if kind == _BINARY:
            n = self.varint()
            self.pos += n
            return bytes(self.data[self.pos - n:self.pos])
        if kind in (_LIST, _SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (element, [self.value(element) for _ in range(size)])
        if kind == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            return (types >> 4, types & 0x0F,
                    [(self.value(types >> 4), self.value(types & 0x0F)) for _ in range(size)])
        if kind == _STRUCT:
            return self.struct()
        raise ValueError(f"not a Parquet footer: Thrift type {kind} at byte {self.pos}")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while (head := self.byte()) != 0:
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.value(_I16)
            fields.append([last, kind, kind == _TRUE if kind in (_TRUE, _FALSE) else self.value(kind)])
        return fields


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_value(out: bytearray, kind: int, value) -> None:
    if kind in _INTEGERS:
        _varint(out, (value << 1) ^ (value >> 63))
    elif kind in (_TRUE, _FALSE, _BYTE):
        out.append(value & 0xFF)
    elif kind == _DOUBLE:
        out += value
    elif kind == _BINARY:
        _varint(out, len(value))
        out += value
    elif kind in (_LIST, _SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _varint(out, len(items))
        for item in items:
            _write_value(out, element, item)
    elif kind == _MAP:
        key, val, items = value
        _varint(out, len(items))
        if items:
            out.append(key << 4 | val)
        for k, v in items:
            _write_value(out, key, k)
            _write_value(out, val, v)
    elif isinstance(value, bytes):  # a struct encoded already (``RowGroupJoiner`` keeps row groups so)
        out += value
    else:
        _write_struct(out, value)


def _write_struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for field, kind, value in fields:
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        if 0 < field - last <= 15:
            out.append((field - last) << 4 | kind)
        else:
            out.append(kind)
            _write_value(out, _I16, field)
        last = field
        if kind not in (_TRUE, _FALSE):
            _write_value(out, kind, value)
    out.append(0)


def decode_footer(data: bytes) -> Struct:
    """A Thrift compact-protocol struct (a Parquet ``FileMetaData``) -> nested ``[field, type, value]`` lists."""
    reader = _Reader(data)
    fields = reader.struct()
    if reader.pos != len(data):
        raise ValueError(f"not a Parquet footer: {len(data) - reader.pos} bytes after the struct")
    return fields


def encode_footer(fields: Struct) -> bytes:
    """The inverse of ``decode_footer`` (any struct: a row group as well)."""
    out = bytearray()
    _write_struct(out, fields)
    return bytes(out)


def split_file(data) -> tuple[memoryview, Struct]:
    """A whole Parquet file's bytes -> (the bytes between the leading magic and the footer, the footer)."""
    view = memoryview(data).cast("B")  # pyarrow buffers export signed bytes
    if len(view) < 12 or view[:4] != MAGIC or view[-4:] != MAGIC:
        raise ValueError("not a Parquet file: no PAR1 magic at both ends")
    (length,) = struct.unpack("<I", view[-8:-4])
    end = len(view) - 8 - length
    if end < 4:
        raise ValueError(f"not a Parquet file: a footer of {length} bytes in {len(view)}")
    return view[4:end], decode_footer(view[end:-8])


def _field(fields: Struct, field_id: int) -> list | None:
    return next((f for f in fields if f[0] == field_id), None)


def value(fields: Struct, field_id: int):
    """The value of a struct's field ``field_id``, or None when the struct does not hold it."""
    field = _field(fields, field_id)
    return None if field is None else field[2]


def _shift(fields: Struct, field_ids: tuple[int, ...], by: int) -> None:
    """Move the offsets among ``field_ids`` by ``by``; 0 means 'none' (byte 0 holds the magic, not a page)."""
    for f in fields:
        if f[0] in field_ids and f[2] > 0:
            f[2] += by


def chunk_range(meta: Struct) -> tuple[int, int]:
    """A ``ColumnMetaData``'s pages as file offsets [start, end): from its first page (the dictionary page, when
    there is one before the data pages), ``total_compressed_size`` bytes, as readers read them."""
    start = _field(meta, _META_DATA_PAGE)[2]
    dictionary = _field(meta, _META_DICTIONARY_PAGE)
    if dictionary is not None and 0 < dictionary[2] < start:
        start = dictionary[2]
    return start, start + _field(meta, _META_COMPRESSED)[2]


class Part:
    """Some column chunks of one row group: their ``ColumnChunk`` structs (offsets as in their source; joining
    moves them, so a part is appended once), its row count, and ``read(start, end)``, the source's bytes at
    those file offsets; or ``copy_into(fd, start, end)``, which appends them to the file ``fd`` itself and says
    whether it could. ``row_group``: the source's row group struct, whose fields a joined row group takes."""

    def __init__(self, chunks: list[Struct], num_rows: int, read: Callable[[int, int], bytes],
                 row_group: Struct | None = None, copy_into: Callable[[int, int, int], bool] | None = None):
        self.chunks, self.num_rows, self.read, self.row_group = chunks, num_rows, read, row_group
        self.copy_into = copy_into

    @classmethod
    def of_file(cls, data) -> "Part":
        """A one-row-group Parquet file in memory. Page indexes and bloom filters are refused: they lie after the
        row groups, outside the column chunks' bytes, and would not come along."""
        body, footer = split_file(data)
        (row_group,) = _field(footer, _FILE_ROW_GROUPS)[2][1]
        chunks = _field(row_group, _ROW_GROUP_COLUMNS)[2][1]
        for chunk in chunks:
            meta = _field(chunk, _CHUNK_META_DATA)[2]
            if any(_field(chunk, f) for f in _CHUNK_OUTSIDE) or _field(meta, _META_BLOOM_FILTER):
                raise ValueError("append_columns: page indexes and bloom filters are not supported")
        return cls(chunks, _field(footer, _FILE_NUM_ROWS)[2],
                   lambda start, end: body[start - len(MAGIC):end - len(MAGIC)], row_group)


class RowGroupJoiner:
    """Appends whole Parquet files (same schema and writer settings) to ``sink`` as the row groups of one file.

    ``append`` each part in row order, or build a row group from the columns of several parts with
    ``append_columns``, then ``finish`` writes the footer: ``footer`` (that of any file of the whole schema,
    e.g. one without rows) or else the first part's, with the row groups of all parts and the total row count.
    At least one part (it may have no row groups) or a ``footer`` is needed."""

    def __init__(self, sink: BinaryIO, footer: Struct | None = None):
        self.sink = sink
        self.sink.write(MAGIC)
        self.position = len(MAGIC)
        self.footer = footer
        self.row_groups: list[bytes] = []  # encoded
        self.num_rows = 0
        try:  # a file on disk: parts that can copy their bytes straight into it do
            self._fd = sink.fileno()
        except (AttributeError, OSError, ValueError):  # io.BytesIO raises io.UnsupportedOperation, an OSError
            self._fd = None

    def append(self, part) -> None:
        body, footer = split_file(part)
        by = self.position - len(MAGIC)
        groups = _field(footer, _FILE_ROW_GROUPS)
        for row_group in groups[2][1] if groups else []:
            _shift(row_group, (_ROW_GROUP_FILE_OFFSET,), by)
            for chunk in _field(row_group, _ROW_GROUP_COLUMNS)[2][1]:
                _shift_chunk(chunk, by)
            self.row_groups.append(encode_footer(row_group))  # bytes: a parsed one is ~50x larger
        self.num_rows += _field(footer, _FILE_NUM_ROWS)[2]
        self.footer = self.footer or footer
        self.sink.write(body)
        self.position += len(body)

    def append_columns(self, parts: list, names: list[str]) -> None:
        """One row group whose columns come from ``parts``: ``Part``s, or one-row-group files of the same rows
        written with the same settings (``Part.of_file``), each holding some of the columns: the top-level
        columns ``names``, in that order. A column chunk's pages are one run of bytes (dictionary page first),
        copied as they are, so for parts written alike the row group is the one a single writer writes for all
        the columns."""
        parts = [p if isinstance(p, Part) else Part.of_file(p) for p in parts]
        rows = sorted({p.num_rows for p in parts})
        if len(rows) != 1:
            raise ValueError(f"append_columns: the parts hold different numbers of rows ({rows})")
        pieces: dict[str, list] = {}
        for part in parts:
            for chunk in part.chunks:
                meta = _field(chunk, _CHUNK_META_DATA)[2]
                name = _field(meta, _META_PATH)[2][1][0].decode()
                pieces.setdefault(name, []).append((chunk, part, *chunk_range(meta)))
        missing, extra = [n for n in names if n not in pieces], sorted(set(pieces) - set(names))
        if missing or extra:
            raise ValueError(f"append_columns: no part holds columns {missing}" if missing else
                             f"append_columns: columns {extra} are not among the names given")
        first = self.position
        columns, totals = [], {_ROW_GROUP_BYTES: 0, _ROW_GROUP_COMPRESSED: 0}
        for name in names:
            for chunk, part, start, end in pieces[name]:
                _shift_chunk(chunk, self.position - start)
                meta = _field(chunk, _CHUNK_META_DATA)[2]
                totals[_ROW_GROUP_BYTES] += _field(meta, _META_UNCOMPRESSED)[2]
                totals[_ROW_GROUP_COMPRESSED] += _field(meta, _META_COMPRESSED)[2]
                columns.append(chunk)
                self._write(part, start, end)
                self.position += end - start
        # a written part's row group gives the fields pyarrow writes; else the ones every row group has
        row_group = next((p.row_group for p in parts if p.row_group is not None), None) or [
            [_ROW_GROUP_COLUMNS, _LIST, None], [_ROW_GROUP_BYTES, _I64, 0], [_ROW_GROUP_NUM_ROWS, _I64, rows[0]],
            [_ROW_GROUP_FILE_OFFSET, _I64, 0], [_ROW_GROUP_COMPRESSED, _I64, 0]]
        _field(row_group, _ROW_GROUP_COLUMNS)[2] = (_STRUCT, columns)
        _field(row_group, _ROW_GROUP_FILE_OFFSET)[2] = first
        for field_id, total in totals.items():
            _field(row_group, field_id)[2] = total
        self.row_groups.append(encode_footer(row_group))
        self.num_rows += rows[0]

    def _write(self, part: Part, start: int, end: int) -> None:
        if part.copy_into is not None and self._fd is not None:
            self.sink.flush()  # what is buffered goes first; the copy then moves the descriptor's offset on
            if part.copy_into(self._fd, start, end):
                return
        self.sink.write(part.read(start, end))

    def finish(self) -> None:
        if self.footer is None:
            raise ValueError("RowGroupJoiner.finish: no part was appended")
        _field(self.footer, _FILE_NUM_ROWS)[2] = self.num_rows
        groups = _field(self.footer, _FILE_ROW_GROUPS)
        if groups is not None:
            groups[2] = (_STRUCT, self.row_groups)
        footer = encode_footer(self.footer)
        self.sink.write(footer + struct.pack("<I", len(footer)) + MAGIC)


def _shift_chunk(chunk: Struct, by: int) -> None:
    """Move a column chunk's offsets (its own and its metadata's) by ``by`` bytes."""
    _shift(chunk, _CHUNK_OFFSETS, by)
    meta = _field(chunk, _CHUNK_META_DATA)
    if meta is not None:
        _shift(meta[2], _META_OFFSETS, by)
