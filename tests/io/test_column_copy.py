"""The carried columns copied from the input (``io.column_copy``; docs/performance.md, "Carried columns
copied"): the output's row groups are the input's, its carried column chunks the input's bytes, and its table
the one encoding every column gives; a file the copy cannot take safely is encoded as before."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rladv_cli
from conftest import ragged_rollouts
from rladv_cli.io import column_copy
from rladv_cli.io.parquet_join import MAGIC, decode_footer, encode_footer
from rladv_cli.io.write import AtomicParquetWriter, output_schema

CARRIED = ("uid", "rm_scores", "values", "prompt", "meta")


def rollouts(rows: int, seed: int) -> pa.Table:
    """Token lists, a nullable string column that repeats (dictionary-encoded by pyarrow) and a struct."""
    table = ragged_rollouts(rows, seed)
    table = table.append_column("prompt", pa.array(["a long prompt " * 20 + str(i // 4) if i % 7 else None
                                                    for i in range(rows)]))
    return table.append_column("meta", pa.array([{"turn": i % 3, "tool": f"t{i % 5}"} for i in range(rows)]))


def computed(inputs, out: Path, estimator: str = "gae", **options) -> bytes:
    rladv_cli.compute_file([str(p) for p in inputs], estimator=estimator, output=str(out), device="cpu", **options)
    return out.read_bytes()


def encoded(monkeypatch, inputs, out: Path, estimator: str = "gae", **options) -> bytes:
    """The output when nothing is copied (every column encoded, in 512-row groups)."""
    with monkeypatch.context() as m:
        m.setattr(column_copy, "plan", lambda *args: None)
        return computed(inputs, out, estimator, **options)


def chunks(path: Path) -> dict[tuple[int, str], bytes]:
    """Each column chunk's bytes, by (row group, column path)."""
    meta, data = pq.ParquetFile(path).metadata, path.read_bytes()
    found = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            found[g, col.path_in_schema] = data[start:start + col.total_compressed_size]
    return found


def row_groups(path: Path) -> list[int]:
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]


@pytest.mark.parametrize("estimator", ["gae", "grpo"])
def test_the_carried_chunks_are_the_inputs_and_the_table_is_what_encoding_gives(tmp_path, monkeypatch, estimator):
    path = tmp_path / "in.parquet"
    pq.write_table(rollouts(237, 0), path, row_group_size=100)  # pyarrow's defaults: dictionaries, statistics
    out = computed([path], tmp_path / "out.parquet", estimator, chunk_rows=7)
    assert row_groups(tmp_path / "out.parquet") == [100, 100, 37]
    given, written = chunks(path), chunks(tmp_path / "out.parquet")
    copied = {key for key in written if key[1].split(".")[0] in CARRIED}
    assert len(copied) == 3 * 6  # uid, rm_scores, values, prompt, meta's two leaves, in each row group
    assert all(written[key] == given[key] for key in copied)
    assert all(written[key] != given.get(key) for key in written if key[1].startswith("response_mask"))
    plain = encoded(monkeypatch, [path], tmp_path / "encoded.parquet", estimator)
    assert out != plain
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "encoded.parquet"),
                                                          check_metadata=True)
    # the bytes depend on the input and the settings, not on how the rows are chunked or kept
    for options in ({"chunk_rows": 512}, {"chunk_rows": 64, "cache_mib": 0}):
        assert computed([path], tmp_path / "again.parquet", estimator, **options) == out


def test_several_files_give_their_row_groups_in_turn(tmp_path, monkeypatch):
    """An empty file between them (pyarrow gives it one row group without rows) adds none."""
    paths = [tmp_path / "a.parquet", tmp_path / "empty.parquet", tmp_path / "b.parquet"]
    pq.write_table(rollouts(150, 1), paths[0], row_group_size=80)
    pq.write_table(rollouts(10, 9).slice(0, 0), paths[1])
    pq.write_table(rollouts(90, 2), paths[2], row_group_size=64)
    computed(paths, tmp_path / "out.parquet", chunk_rows=50)
    assert row_groups(tmp_path / "out.parquet") == [80, 70, 64, 26]
    encoded(monkeypatch, paths, tmp_path / "encoded.parquet")
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "encoded.parquet"))


def _rewritten(path: Path, change) -> None:
    """``path`` with its footer (a Thrift ``FileMetaData``) changed by ``change(fields)``."""
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    fields = decode_footer(data[-8 - length:-8])
    change(fields)
    footer = encode_footer(fields)
    path.write_bytes(data[:-8 - length] + footer + struct.pack("<I", len(footer)) + MAGIC)


def _created_by(fields, writer=b"parquet-mr version 1.8.1 (build 4aba4dae7bb0d4edbcf7923ae1339f28fd3f7fcf)"):
    next(f for f in fields if f[0] == 6)[2] = writer


def _padded(rows: int, width: int = 8) -> pa.Table:
    """A padded export: every list of the same width, ``values`` a fixed-size list (rladv reads it as a list)."""
    rng = np.random.default_rng(rows)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    return pa.table({
        "uid": [f"p{i // 4}" for i in range(rows)],
        "response_mask": pa.ListArray.from_arrays(offsets, pa.array(np.ones(rows * width, dtype=np.int8))),
        "rm_scores": pa.ListArray.from_arrays(offsets, pa.array(rng.normal(size=rows * width).astype(np.float32))),
        "values": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=rows * width).astype(np.float32)), width),
    })


CANNOT = {
    "row groups of 16 rows": lambda tmp: pq.write_table(rollouts(50, 3), tmp / "a.parquet", row_group_size=16),
    "another writer": lambda tmp: (pq.write_table(rollouts(150, 3), tmp / "a.parquet", row_group_size=80),
                                   _rewritten(tmp / "a.parquet", _created_by)),
    "a fixed-size list read as a list": lambda tmp: pq.write_table(_padded(100), tmp / "a.parquet"),
    "files that differ in nullability": lambda tmp: (
        pq.write_table(rollouts(100, 3).cast(rollouts(100, 3).schema.set(
            0, pa.field("uid", pa.string(), nullable=False))), tmp / "a.parquet"),
        pq.write_table(rollouts(100, 4), tmp / "b.parquet")),
}


@pytest.mark.parametrize("case", CANNOT, ids=list(CANNOT))
def test_what_cannot_be_copied_safely_is_encoded(tmp_path, monkeypatch, case):
    CANNOT[case](tmp_path)
    paths = sorted(tmp_path.glob("*.parquet"))
    assert computed(paths, tmp_path / "out.parquet") == encoded(monkeypatch, paths, tmp_path / "encoded.parquet")


def test_a_row_group_too_large_to_hold_is_encoded(tmp_path, monkeypatch):
    path = tmp_path / "a.parquet"
    pq.write_table(rollouts(150, 3), path, row_group_size=100)
    monkeypatch.setattr(column_copy, "MAX_ROW_GROUP_BYTES", pq.ParquetFile(path).metadata.row_group(1).total_byte_size)
    assert computed([path], tmp_path / "out.parquet") == encoded(monkeypatch, [path], tmp_path / "encoded.parquet")
    monkeypatch.setattr(column_copy, "MAX_ROW_GROUP_BYTES", pq.ParquetFile(path).metadata.row_group(0).total_byte_size)
    computed([path], tmp_path / "out.parquet")
    assert row_groups(tmp_path / "out.parquet") == [100, 50]


def test_page_indexes_and_bloom_filters_stay_behind(tmp_path, monkeypatch):
    """They lie after the row groups, outside the chunks: the copied chunks lose their pointers to them."""
    path = tmp_path / "a.parquet"
    pq.write_table(rollouts(150, 5), path, row_group_size=100, write_page_index=True)
    computed([path], tmp_path / "out.parquet")
    data = (tmp_path / "out.parquet").read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    groups = next(f for f in decode_footer(data[-8 - length:-8]) if f[0] == 4)[2][1]
    fields = {f[0] for g in groups for chunk in next(f for f in g if f[0] == 1)[2][1] for f in chunk}
    assert fields == {2, 3}  # file_offset and meta_data: no offset or column index
    assert row_groups(tmp_path / "out.parquet") == [100, 50]
    encoded(monkeypatch, [path], tmp_path / "encoded.parquet")
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "encoded.parquet"))


def test_a_polars_file_is_copied_and_reads_back_in_both_libraries(tmp_path, monkeypatch):
    path = tmp_path / "a.parquet"
    pl.from_arrow(rollouts(150, 6)).write_parquet(path, row_group_size=100)
    computed([path], tmp_path / "out.parquet")
    given, written = chunks(path), chunks(tmp_path / "out.parquet")
    assert written[1, "values.list.element"] == given[1, "values.list.element"]
    encoded(monkeypatch, [path], tmp_path / "encoded.parquet")
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "encoded.parquet"))
    assert pl.read_parquet(tmp_path / "out.parquet").equals(pl.read_parquet(tmp_path / "encoded.parquet"))


def test_an_input_that_changes_while_it_is_read_fails_and_leaves_nothing(tmp_path):
    path = tmp_path / "a.parquet"
    table = rollouts(100, 7)
    pq.write_table(table, path)
    schema = output_schema(table.schema, with_is_weights=False)
    out = tmp_path / "out.parquet"
    columns = {name: table[name] if name in table.column_names else table["response_mask"] for name in schema.names}
    rows = pa.Table.from_arrays([columns[n].cast(schema.field(n).type) for n in schema.names], schema=schema)
    with pytest.raises(rladv_cli.InputError, match=r"a\.parquet: changed while rladv read it"):
        with AtomicParquetWriter(str(out), schema, CARRIED, copy_from=[path]) as sink:
            sink.write(rows)
            os.utime(path, ns=(0, 0))  # rewritten in place, as far as the run can tell
            sink.commit()
    assert not out.exists() and os.listdir(tmp_path) == ["a.parquet"]


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 400), group=st.integers(64, 300), chunk_rows=st.integers(1, 300), seed=st.integers(0, 99),
       estimator=st.sampled_from(["gae", "grpo", "reinforce_plus_plus"]))
def test_copied_or_encoded_the_table_is_the_same_and_the_bytes_ignore_the_chunking(
        tmp_path_factory, rows, group, chunk_rows, seed, estimator):
    tmp = tmp_path_factory.mktemp("copy")
    path = tmp / "in.parquet"
    pq.write_table(rollouts(rows, seed), path, row_group_size=group)
    out = computed([path], tmp / "out.parquet", estimator, chunk_rows=chunk_rows)
    assert row_groups(tmp / "out.parquet") == row_groups(path)
    assert computed([path], tmp / "again.parquet", estimator, chunk_rows=512) == out
    encoded(pytest.MonkeyPatch(), [path], tmp / "encoded.parquet", estimator, chunk_rows=chunk_rows)
    assert pq.read_table(tmp / "out.parquet").equals(pq.read_table(tmp / "encoded.parquet"), check_metadata=True)


def test_renamed_columns_are_copied_under_their_own_names_and_replaced_ones_are_not(tmp_path, monkeypatch):
    """``--column rm_scores=my_scores``: the file's column is carried under its name; an input ``advantages``
    column is replaced by this run's, never copied."""
    path = tmp_path / "a.parquet"
    table = rollouts(150, 8).rename_columns(["uid", "response_mask", "my_scores", "values", "prompt", "meta"])
    pq.write_table(table.append_column("advantages", table["values"]), path, row_group_size=100)
    computed([path], tmp_path / "out.parquet", columns={"rm_scores": "my_scores"})
    given, written = chunks(path), chunks(tmp_path / "out.parquet")
    assert written[0, "my_scores.list.element"] == given[0, "my_scores.list.element"]
    assert written[0, "advantages.list.element"] != given[0, "advantages.list.element"]
    encoded(monkeypatch, [path], tmp_path / "encoded.parquet", columns={"rm_scores": "my_scores"})
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.equals(pq.read_table(tmp_path / "encoded.parquet"), check_metadata=True)
    assert "my_scores" in out.column_names and out["advantages"] != table["values"]


@pytest.mark.parametrize("refused_after", [0, 1])
def test_where_the_kernel_will_not_copy_the_bytes_go_through_a_buffer(tmp_path, monkeypatch, refused_after):
    """``copy_file_range`` refused at once (another file system, an old kernel), or part-way after a short copy:
    the same bytes."""
    path = tmp_path / "in.parquet"
    pq.write_table(rollouts(237, 0), path, row_group_size=100)
    want = computed([path], tmp_path / "want.parquet")
    real, calls = os.copy_file_range, []

    def flaky(src, dst, count, offset_src):
        calls.append(count)
        if len(calls) > refused_after:
            raise OSError(18, "Invalid cross-device link")
        return real(src, dst, min(count, 100), offset_src)  # short: the loop goes on from there

    monkeypatch.setattr(column_copy.os, "copy_file_range", flaky)
    assert computed([path], tmp_path / "got.parquet") == want
    # 3 row groups of 6 carried chunks (meta has two leaves), each tried once; the first one twice when it began
    assert len(calls) == 3 * 6 + refused_after
