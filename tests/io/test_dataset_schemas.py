"""Files of one dataset that differ only physically are one dataset (docs/compute.md, "The dataset"): another
column order, polars' large strings and lists beside pyarrow's, double beside float, int32 beside int64; the
output is the one of the same rows written in one schema first. Types with nothing in common are an error."""
from __future__ import annotations

import json

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


def test_verls_token_level_scores_are_read_as_rm_scores(tmp_path):
    """A batch saved with verl's key token_level_scores (no rm_scores, no score) needs no --column: the same
    numbers as the file with rm_scores, and the output keeps the file's name for the column."""
    t = pq.read_table(SAMPLES / "multiturn.parquet")
    verl = tmp_path / "verl.parquet"
    pq.write_table(t.rename_columns(["token_level_scores" if n == "rm_scores" else n for n in t.column_names]), verl)
    outs = []
    for data in (verl, SAMPLES / "multiturn.parquet"):
        out = tmp_path / f"{data.stem}.out.parquet"
        assert rladv("compute", data, "--estimator", "grpo", "-o", out, "-q").exit_code == 0
        outs.append(read(out))
    assert outs[0]["advantages"].equals(outs[1]["advantages"])
    assert "token_level_scores" in outs[0].column_names and "rm_scores" not in outs[0].column_names
    assert outs[0]["token_level_scores"].equals(outs[1]["rm_scores"])


def test_verls_batch_saved_as_it_is_is_read_as_its_response_part(tmp_path):
    """verl's batch written with pq.write_table of its tensors: padded [B, P + T] attention_mask (fixed-size lists),
    [B, T] responses and token_level_scores, no response_mask. rladv reads it as verl's compute_response_mask
    does (attention_mask's last T positions): the numbers of the same rows saved with that response_mask, and
    validate and inspect read it too; rladv convert given the Parquet file says that compute reads it."""
    P, T = 3, 4
    attention = [[0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0]]
    scores = [[0, 0, 0, 0], [0, 0, 0, 1.0], [0, 1.0, 0, 0], [0.5, 0, 0, 0]]

    def fixed(rows, kind):
        return pa.FixedSizeListArray.from_arrays(pa.array([v for r in rows for v in r], kind), len(rows[0]))

    saved = pa.table({"uid": ["a", "a", "b", "b"], "prompts": fixed([[9] * P] * 4, pa.int64()),
                      "responses": fixed([[5] * T] * 4, pa.int64()), "attention_mask": fixed(attention, pa.int64()),
                      "token_level_scores": fixed(scores, pa.float32())})
    path = tmp_path / "batch.parquet"
    pq.write_table(saved, path)
    response = [row[P:] for row in attention]
    explicit = tmp_path / "explicit" / "batch.parquet"
    explicit.parent.mkdir()
    pq.write_table(pa.table({"uid": ["a", "a", "b", "b"], "response_mask": pa.array(response, pa.list_(pa.int8())),
                             "rm_scores": pa.array(scores, pa.list_(pa.float32()))}), explicit)
    outs = []
    for data in (path, explicit):
        assert rladv("compute", data, "--estimator", "grpo", "-o", tmp_path / f"{len(outs)}.parquet", "-q").exit_code == 0
        outs.append(read(tmp_path / f"{len(outs)}.parquet"))
    assert outs[0]["advantages"].equals(outs[1]["advantages"]) and outs[0]["returns"].equals(outs[1]["returns"])
    assert outs[0]["response_mask"].to_pylist() == response
    assert outs[0]["attention_mask"].to_pylist() == response  # the response part, aligned with the advantages
    assert pq.read_table(path).equals(saved)  # the input as it was
    assert rladv("validate", path, "--estimator", "grpo").exit_code == 0
    res = rladv("inspect", path, "--estimator", "grpo", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["tokens"]["actor"] == sum(map(sum, response))
    res = rladv("convert", path, "-o", tmp_path / "c.parquet")
    assert_one_line_error(res, f"{path}: is a Parquet file, not a saved batch: rladv compute")


def test_a_saved_batch_whose_mask_is_shorter_than_its_response_names_the_row(tmp_path):
    t = pa.table({"uid": ["a", "a"], "responses": [[5, 6, 7], [7, 8, 9]], "attention_mask": [[1, 1, 1, 1], [1, 1]],
                  "token_level_scores": [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]})
    pq.write_table(t, tmp_path / "batch.parquet")
    res = rladv("compute", tmp_path / "batch.parquet", "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    assert_one_line_error(res, "row 1", "length")
    assert not (tmp_path / "o.parquet").exists()
