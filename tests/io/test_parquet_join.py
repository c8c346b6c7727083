"""parquet_join: row groups encoded apart and joined give the bytes of one ``ParquetWriter``."""
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rladv_cli.io.parquet_join import RowGroupJoiner, decode_footer, encode_footer, split_file
from rladv_cli.io.write import writer_options


def _table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    n = int(lengths.sum())
    nulls = rng.random(rows) < 0.1
    return pa.table({
        "uid": pa.array([f"g{i // 4}" for i in range(rows)]),
        "score": pa.array(rng.normal(size=rows), mask=nulls),
        "response_mask": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 2, n).astype(np.int8))),
        "advantages": pa.ListArray.from_arrays(offsets, pa.array(rng.normal(size=n).astype(np.float32))),
    })


def _one_writer(table: pa.Table, rows: int, **options) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **options) as writer:
        for start in range(0, table.num_rows, rows):
            writer.write_table(table.slice(start, rows), row_group_size=rows)
    return sink.getvalue().to_pybytes()


def _joined(table: pa.Table, rows: int, **options) -> bytes:
    def part(piece):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, table.schema, **options) as writer:
            if piece is not None:
                writer.write_table(piece, row_group_size=piece.num_rows)
        return sink.getvalue()

    out = io.BytesIO()
    joiner = RowGroupJoiner(out)
    for start in range(0, table.num_rows, rows):
        joiner.append(part(table.slice(start, rows)))
    if table.num_rows == 0:
        joiner.append(part(None))
    joiner.finish()
    return out.getvalue()


OPTIONS = {
    "rladv": lambda schema: writer_options(schema),
    "pyarrow defaults, zstd": lambda schema: {"compression": "zstd"},  # dictionaries, statistics everywhere
    "snappy, data page v2": lambda schema: {"compression": "snappy", "data_page_version": "2.0"},
}


@pytest.mark.parametrize("options", OPTIONS, ids=list(OPTIONS))
@settings(max_examples=8, deadline=None)
@given(rows=st.integers(0, 300), group=st.sampled_from([1, 7, 64, 512]), seed=st.integers(0, 2**16))
def test_joined_row_groups_are_the_bytes_of_one_writer(options, rows, group, seed):
    table = _table(rows, seed)
    kwargs = OPTIONS[options](table.schema)
    joined = _joined(table, group, **kwargs)
    assert joined == _one_writer(table, group, **kwargs)
    assert pq.read_table(pa.BufferReader(joined)).equals(table)


def test_the_footer_codec_round_trips_byte_for_byte():
    """Decoding and re-encoding a footer keeps field order, integer widths, list headers (over 14 items:
    the long form) and booleans."""
    table = _table(40)
    data = _one_writer(table, 2, compression="zstd")  # 20 row groups: a long list header
    footer = data[-8 - int.from_bytes(data[-8:-4], "little"):-8]
    fields = decode_footer(footer)
    assert encode_footer(fields) == footer
    assert dict((f[0], f[2]) for f in fields)[3] == 40  # num_rows


def test_not_a_parquet_file_is_refused():
    with pytest.raises(ValueError, match="PAR1"):
        split_file(b"PAR1 not really a parquet file")
    with pytest.raises(ValueError, match="a footer of 4096 bytes"):
        split_file(b"PAR1" + b"\x00" * 4 + (4096).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(ValueError, match="Parquet footer"):
        split_file(b"PAR1" + b"\x00\x00\x00" + (3).to_bytes(4, "little") + b"PAR1")


def test_finishing_without_a_part_is_an_error():
    with pytest.raises(ValueError, match="no part"):
        RowGroupJoiner(io.BytesIO()).finish()


def test_a_file_without_rows_is_joined_from_one_empty_part():
    table = _table(0)
    assert _joined(table, 8, compression="zstd") == _one_writer(table, 8, compression="zstd")


def test_the_joiner_keeps_about_a_kibibyte_per_row_group(tmp_path):
    """Row groups are kept encoded until the footer is written (parsed, one took ~30 KiB of Python objects):
    a file of 20k row groups must not cost hundreds of MB."""
    import tracemalloc

    table = _table(8)
    part = pa.BufferOutputStream()
    with pq.ParquetWriter(part, table.schema, **writer_options(table.schema)) as writer:
        writer.write_table(table, row_group_size=8)
    part = part.getvalue()
    with open(tmp_path / "joined.parquet", "wb") as sink:
        joiner = RowGroupJoiner(sink)
        joiner.append(part)
        tracemalloc.start()
        for _ in range(500):
            joiner.append(part)
        kept, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        joiner.finish()
    assert kept / 500 < 4096, kept / 500
    assert pq.ParquetFile(tmp_path / "joined.parquet").metadata.num_row_groups == 501


def _nested(rows: int, seed: int) -> pa.Table:
    """``_table`` and a struct column of two leaves."""
    rng = np.random.default_rng(seed + 1)
    meta = pa.StructArray.from_arrays([pa.array(rng.integers(0, 5, rows)), pa.array([f"t{i % 3}" for i in range(rows)])],
                                      ["turn", "tool"])
    return _table(rows, seed).append_column("meta", meta)


def _part(table: pa.Table, **options) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **options) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
    return sink.getvalue()


@pytest.mark.parametrize("options", OPTIONS, ids=list(OPTIONS))
@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), group=st.sampled_from([1, 7, 64, 512]), seed=st.integers(0, 2**16),
       split=st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_row_groups_put_together_from_the_columns_of_several_parts_are_the_bytes_of_one_writer(
        options, rows, group, seed, split):
    """Each column (a struct's two leaves among them) is written by one of up to three writers; the row group
    built from their column chunks is the one a single writer writes for all of them."""
    table = _nested(rows, seed)
    kwargs = OPTIONS[options](table.schema)
    _, footer = split_file(_part(table.slice(0, 0), **kwargs))
    out = io.BytesIO()
    joiner = RowGroupJoiner(out, footer)
    for start in range(0, rows, group):
        piece = table.slice(start, group)
        parts = [_part(piece.select([n for n, k in zip(table.column_names, split) if k == i]), **kwargs)
                 for i in sorted(set(split))]
        joiner.append_columns(parts, table.column_names)
    joiner.finish()
    assert out.getvalue() == _one_writer(table, group, **kwargs)
    assert pq.read_table(pa.BufferReader(out.getvalue())).equals(table)


def test_columns_missing_from_the_parts_or_from_the_names_are_refused():
    table = _table(10)
    first, second = _part(table.select(["uid", "score"])), _part(table.select(["response_mask", "advantages"]))
    with pytest.raises(ValueError, match=r"no part holds columns \['response_mask', 'advantages'\]"):
        RowGroupJoiner(io.BytesIO()).append_columns([first], table.column_names)
    with pytest.raises(ValueError, match=r"columns \['advantages'\] are not among the names"):
        RowGroupJoiner(io.BytesIO()).append_columns([first, second], ["uid", "score", "response_mask"])
    shorter = _part(table.slice(0, 9).select(["response_mask", "advantages"]))
    with pytest.raises(ValueError, match=r"different numbers of rows \(\[9, 10\]\)"):
        RowGroupJoiner(io.BytesIO()).append_columns([first, shorter], table.column_names)


def test_page_indexes_are_refused_when_putting_columns_together():
    """A page index lies after the row groups, outside the column chunk's bytes: it cannot be copied along."""
    table = _table(10)
    part = _part(table, write_page_index=True)
    with pytest.raises(ValueError, match="page indexes"):
        RowGroupJoiner(io.BytesIO()).append_columns([part], table.column_names)
