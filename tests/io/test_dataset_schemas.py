"""Files of one dataset that differ only physically are one dataset (docs/compute.md, "The dataset"): another
column order, polars' large strings and lists beside pyarrow's, double beside float, int32 beside int64; the
output is the one of the same rows written in one schema first. Types with nothing in common are an error."""
from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLES, assert_one_line_error, read, rladv


@pytest.fixture()
def steps(tmp_path):
    """groups.parquet cut by step: step 100 written by pyarrow, step 101 by polars (large types) with its score
    as float64, its step as int32 and its columns reversed; and the same rows in one file, step 100 first."""
    t = pq.read_table(SAMPLES / "groups.parquet")
    first, second = (t.filter(pc.equal(t["step"], s)) for s in (100, 101))
    folder = tmp_path / "steps"
    folder.mkdir()
    pq.write_table(first, folder / "a.parquet")
    (pl.from_arrow(second).with_columns(pl.col("score").cast(pl.Float64), pl.col("step").cast(pl.Int32))
     .select(list(reversed(second.column_names))).write_parquet(folder / "b.parquet"))
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.concat_tables([first, second]), whole)
    return folder, whole


def test_physically_different_files_are_one_dataset(tmp_path, steps):
    folder, whole = steps
    schema = pq.read_schema(folder / "b.parquet")
    assert pa.types.is_large_string(schema.field("uid").type) and schema.names[0] == "step"
    for estimator in ("grpo", "gae"):
        outs = []
        for name, data in (("split", folder), ("whole", whole)):
            out = tmp_path / f"{name}-{estimator}.parquet"
            extra = ("--column", "values=old_log_probs") if estimator == "gae" else ()
            res = rladv("compute", data, "--estimator", estimator, *extra, "-o", out, "-q")
            assert res.exit_code == 0, res.output
            outs.append(read(out))
        split, one = outs
        assert split.column_names == one.column_names  # the first file's order
        for name in ("advantages", "returns", "token_level_rewards", "uid", "responses"):
            assert split[name].equals(one[name]), name
        assert split.schema.field("score").type == pa.float64()  # the type that holds both files' scores
        assert split["score"].to_pylist() == pytest.approx(one["score"].to_pylist())
    res = rladv("inspect", folder, "--estimator", "grpo", "--json")
    assert res.exit_code == 0 and '"invalid_rows": 0' in res.stdout


def test_types_with_nothing_in_common_name_both_files_and_the_column(tmp_path, steps):
    folder, _ = steps
    t = pq.read_table(folder / "a.parquet")
    pq.write_table(t.set_column(0, "uid", pa.array([[1]] * t.num_rows)), folder / "c.parquet")
    res = rladv("compute", folder, "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    assert_one_line_error(res, str(folder / "c.parquet"), str(folder / "a.parquet"), column="uid")
    assert "holds nothing in common" in res.output and not (tmp_path / "o.parquet").exists()
