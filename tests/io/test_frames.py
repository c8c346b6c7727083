"""Frames in and out (docs/python-api.md "Frames"): polars DataFrames and LazyFrames through compute, compute_file
and inspect, the same bytes as the command line; --where; the tables behind the verdict."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import SAMPLES, rladv, write
from rladv_cli.io import column_copy
from rladv_cli.io.frames import LazySource, standard

GROUPS = SAMPLES / "groups.parquet"
MULTITURN = SAMPLES / "multiturn.parquet"


@pytest.mark.parametrize("sample, settings", [
    (GROUPS, {"estimator": "grpo"}),
    (MULTITURN, {"estimator": "grpo", "kl_coef": 0.05, "rollout_rs": "token_k1", "rollout_rs_threshold": "1.5"}),
    (MULTITURN, {"estimator": "gae", "lam": 0.95}),
])
def test_a_frame_writes_what_the_command_line_writes(tmp_path, monkeypatch, sample, settings):
    """The same table (values, types, metadata); and the same bytes where the command line encodes the carried
    columns too (it copies them from a file where it can: docs/performance.md, "Carried columns copied")."""
    flags = [a for k, v in settings.items() if k != "estimator" for a in (f"--{k.replace('_', '-')}", str(v))]
    cli = {}
    for copied in (True, False):
        if not copied:
            monkeypatch.setattr(column_copy, "plan", lambda *args: None)
        cli[copied] = tmp_path / f"cli-{copied}.parquet"
        assert rladv("compute", sample, "--estimator", settings["estimator"], *flags, "-o", cli[copied], "-q"
                     ).exit_code == 0
    assert cli[True].read_bytes() != cli[False].read_bytes()  # the samples' own (dictionary) pages were copied
    for name, frame in (("lazy", pl.scan_parquet(sample)), ("eager", pl.read_parquet(sample))):
        out = tmp_path / f"{name}.parquet"
        rladv_cli.compute_file(frame, output=str(out), chunk_rows=7, device="cpu", **settings)
        assert out.read_bytes() == cli[False].read_bytes(), name
        assert pq.read_table(out).equals(pq.read_table(cli[True]), check_metadata=True), name


def test_compute_gives_polars_for_polars_and_arrow_for_arrow():
    table = pq.read_table(GROUPS)
    arrow_out, _ = rladv_cli.compute(table, estimator="grpo", device="cpu")
    assert isinstance(arrow_out, pa.Table)
    lazy_out, report = rladv_cli.compute(pl.scan_parquet(GROUPS), estimator="grpo", device="cpu", chunk_rows=5)
    eager_out, _ = rladv_cli.compute(pl.read_parquet(GROUPS), estimator="grpo", device="cpu")
    assert isinstance(lazy_out, pl.DataFrame) and lazy_out.equals(eager_out)
    assert lazy_out["advantages"].to_list() == arrow_out["advantages"].to_pylist()
    assert report.inputs.paths == ["<lazyframe>"] and report.inputs.rows == table.num_rows


def test_the_output_frame_shares_the_arrow_buffers():
    """polars takes the output's value buffers as they are: no token list is copied on the way out."""
    table = pa.table({"advantages": pa.array([[1.0, 2.0], [3.0]], pa.list_(pa.float32()))})
    frame = rladv_cli.io.frames.to_polars(table)
    shared = frame["advantages"].to_arrow()
    assert shared.values.buffers()[1].address == table["advantages"].chunks[0].values.buffers()[1].address


def test_a_lazyframe_is_streamed_one_chunk_at_a_time(tmp_path):
    """Each pass runs the query once, in chunks of chunk_rows rows (the last shorter), in order."""
    source = LazySource(pl.scan_parquet(GROUPS))
    sizes = [c.table.num_rows for c in source.chunks(["uid", "score"], 8)]
    assert sizes == [8] * 8 + [1]
    starts = [c.start for c in source.chunks(None, 8)]
    assert starts == list(range(0, 65, 8))
    whole = pa.concat_tables(c.table for c in source.chunks(["uid"], 8))
    assert whole["uid"].to_pylist() == pq.read_table(GROUPS)["uid"].to_pylist()


def test_large_and_view_types_read_as_the_standard_ones():
    df = pl.DataFrame({"uid": ["a", "b"], "m": [[1, 0], [1]]}, schema={"uid": pl.String, "m": pl.List(pl.Int8)})
    t = standard(df.to_arrow())
    assert t.schema.field("uid").type == pa.string()
    assert str(t.schema.field("m").type) == "list<element: int8>"


def test_bad_rows_in_a_frame_name_the_frame_and_the_row():
    df = pl.read_parquet(GROUPS).with_columns(
        pl.when(pl.int_range(pl.len()) == 9).then(None).otherwise(pl.col("score")).alias("score"))
    with pytest.raises(rladv_cli.InputError, match=r"^<frame>: row 9, column score: is null"):
        rladv_cli.compute(df, estimator="grpo", device="cpu")
    with pytest.raises(rladv_cli.InputError, match=r"^<lazyframe>: row 9, column score: is null"):
        rladv_cli.compute(df.lazy(), estimator="grpo", device="cpu")
    with pytest.raises(rladv_cli.OutputError, match="give output=PATH"):
        rladv_cli.compute_file(df, estimator="grpo")


def test_inspect_takes_a_frame_and_gives_the_file_s_numbers():
    on_file = rladv_cli.inspect(str(GROUPS), estimator="grpo")
    on_frame = rladv_cli.inspect(pl.scan_parquet(GROUPS), estimator="grpo")
    assert on_frame.verdict.signal_tokens == on_file.verdict.signal_tokens
    assert [c.model_dump(exclude={"example"}) for c in on_frame.verdict.causes] == [
        c.model_dump(exclude={"example"}) for c in on_file.verdict.causes]
    assert on_frame.group_table.drop("uid", "step").equals(on_file.group_table.drop("uid", "step"))


# ------------------------------------------------------------------------------------------------ the tables
def small(tmp_path):
    """Groups: a (1, 0: mixed), b (1, 1: all at the top), c (0, 0: all 0), d (a singleton, score 1)."""
    return write(tmp_path / "s.parquet", {
        "uid": ["a", "a", "b", "b", "c", "c", "d"],
        "response_mask": [[1, 1], [1, 0, 1], [1], [1, 1, 1], [1, 1], [0, 1], [1]],
        "score": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0],
    })


def test_the_tables_by_hand(tmp_path):
    path = small(tmp_path)
    ins = rladv_cli.inspect(str(path), estimator="grpo")
    g = ins.group_table.sort("uid")
    assert g["uid"].cast(pl.String).to_list() == ["a", "b", "c", "d"]
    assert g["cause"].cast(pl.String).to_list() == ["ok", "all_top", "all_0", "singleton"]
    assert g["rows"].to_list() == [2, 2, 2, 1]
    assert g["score_mean"].to_list() == [0.5, 1.0, 0.0, 1.0]
    assert g["score_std"].to_list()[:3] == pytest.approx([np.sqrt(0.5), 0.0, 0.0]) and g["score_std"][3] is None
    assert g["actor_tokens"].to_list() == [4, 4, 3, 1] and g["signal_tokens"].to_list() == [4, 0, 0, 0]
    r = ins.row_table
    assert r["row"].to_list() == list(range(7)) and r["file_row"].to_list() == list(range(7))
    assert r["cause"].cast(pl.String).to_list() == ["ok", "ok", "all_top", "all_top", "all_0", "all_0", "singleton"]
    assert r["actor_tokens"].to_list() == [2, 2, 1, 3, 2, 1, 1]
    assert r["observation_tokens"].to_list() == [0, 1, 0, 0, 0, 1, 0]
    assert r["advantage_mean"].null_count() == 7  # no advantages in the file
    # compute's tables: the same groups and causes, and the advantages per row
    _, report = rladv_cli.compute(pq.read_table(path), estimator="grpo", device="cpu")
    rows = report.row_table
    assert rows["cause"].cast(pl.String).to_list() == r["cause"].cast(pl.String).to_list()
    assert rows["advantage_mean"].to_list()[:2] == pytest.approx([0.7071063, -0.7071063], abs=1e-6)
    assert rows["advantage_max"][6] == pytest.approx(1 / (1 + 1e-6))


def test_groups_out_and_rows_out_on_the_command_line(tmp_path):
    path = small(tmp_path)
    g, r = tmp_path / "g.parquet", tmp_path / "r.parquet"
    res = rladv("inspect", path, "--groups-out", g, "--rows-out", r)
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(g).height == 4 and pl.read_parquet(r).height == 7
    g2, r2 = tmp_path / "g2.parquet", tmp_path / "r2.parquet"
    res = rladv("compute", path, "--estimator", "grpo", "-o", tmp_path / "o.parquet", "--groups-out", g2,
                "--rows-out", r2, "-q")
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(g2).sort("uid")["cause"].cast(pl.String).to_list() == ["ok", "all_top", "all_0", "singleton"]
    # a failed run writes none of them
    g3 = tmp_path / "g3.parquet"
    bad = rladv("compute", path, "--estimator", "gae", "-o", tmp_path / "o2.parquet", "--groups-out", g3)
    assert bad.exit_code == 2 and not g3.exists() and not (tmp_path / "o2.parquet").exists()
    same = rladv("compute", path, "--estimator", "grpo", "-o", tmp_path / "o3.parquet", "--groups-out", g,
                 "--rows-out", g)
    assert same.exit_code == 2 and "must name different files" in same.output


# ------------------------------------------------------------------------------------------------ --where
def test_where_keeps_rows_and_forms_groups_after_the_filter(tmp_path):
    kept = tmp_path / "kept.parquet"
    pq.write_table(pl.read_parquet(GROUPS).filter(pl.col("step") == 101).to_arrow(), kept)
    want = pq.read_table(kept)
    out = tmp_path / "w.parquet"
    report = rladv_cli.compute_file(str(GROUPS), estimator="grpo", where="step = 101", output=str(out), device="cpu")
    got = pq.read_table(out)
    assert got.num_rows == want.num_rows == 33
    alone, _ = rladv_cli.compute(want, estimator="grpo", device="cpu")
    assert got["advantages"].to_pylist() == alone["advantages"].to_pylist()
    assert report.inputs.filter.model_dump() == {"where": "step = 101", "rows_read": 65, "rows_kept": 33}
    # rows are named by their file row: the first kept row of the file
    first = int(np.flatnonzero(pq.read_table(GROUPS)["step"].to_numpy() == 101)[0])
    assert report.row_table["file_row"][0] == first and report.row_table["row"][0] == 0


def test_where_on_the_command_line(tmp_path):
    out, rep = tmp_path / "o.parquet", tmp_path / "r.json"
    res = rladv("compute", GROUPS, "--estimator", "grpo", "--where", "step = 101 AND score > 0", "-o", out,
                "--report", rep, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    kept = int(((pq.read_table(GROUPS)["step"].to_numpy() == 101) & (pq.read_table(GROUPS)["score"].to_numpy() > 0)).sum())
    assert f"(--where 'step = 101 AND score > 0' kept {kept} of 65 rows)" in res.stdout
    assert json.loads(rep.read_text())["inputs"]["filter"]["rows_kept"] == kept
    ins = json.loads(rladv("inspect", GROUPS, "--where", "step = 101", "--json").stdout)
    assert ins["rows"] == 33 and ins["filter"]["rows_read"] == 65
    # the verdict's example commands carry the filter, so the row numbers are the same rows
    cause = next(c for c in ins["verdict"]["causes"] if c["example"])
    assert "--where 'step = 101'" in cause["example"]
    explained = rladv("explain", GROUPS, "--where", "step = 101", "--estimator", "grpo", "--row", "0")
    first = int(np.flatnonzero(pq.read_table(GROUPS)["step"].to_numpy() == 101)[0])
    assert explained.exit_code == 0 and f"groups.parquet:{first}" in explained.stdout


def test_where_errors_are_one_line(tmp_path):
    res = rladv("compute", GROUPS, "--estimator", "grpo", "--where", "stp = 101", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and res.output == (
        f"Error: {GROUPS}: --where 'stp = 101' names column stp, which it lacks (did you mean step?)\n")
    res = rladv("inspect", GROUPS, "--where", "step = = 1")
    assert res.exit_code == 2 and res.output.startswith("Error: --where 'step = = 1' is not a SQL predicate")
    res = rladv("compute", GROUPS, "--estimator", "grpo", "--where", "step > 1000", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and "--where 'step > 1000' keeps none of its 65 rows" in res.output
    assert not (tmp_path / "o.parquet").exists()


def test_where_and_the_reproducer(tmp_path):
    """--export writes the group's kept rows, and a command that filters nothing more."""
    uid = pl.read_parquet(GROUPS).filter(pl.col("step") == 101)["uid"][0]
    res = rladv("inspect", GROUPS, "--where", "step = 101", "--uid", uid, "--export", tmp_path / "x")
    assert res.exit_code == 0, res.output
    command = (tmp_path / "x" / "command.txt").read_text().splitlines()[0]
    assert "--where" not in command
    group = pq.read_table(tmp_path / "x" / "group.parquet")
    assert group.num_rows == pl.read_parquet(GROUPS).filter((pl.col("step") == 101) & (pl.col("uid") == uid)).height


def test_where_is_refused_with_the_ray_engine(tmp_path):
    res = rladv("compute", GROUPS, "--estimator", "grpo", "--where", "step = 101", "--engine", "ray",
                "-o", tmp_path / "out")
    assert res.exit_code == 2 and res.output == "Error: --where needs --engine local (the rows it keeps are held in this process)\n"


def test_where_names_the_file_row_of_a_bad_row(tmp_path):
    t = pq.read_table(GROUPS)
    scores = t["score"].to_pylist()
    bad = int(np.flatnonzero(t["step"].to_numpy() == 101)[3])
    scores[bad] = float("nan")
    path = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("score"), "score", pa.array(scores, pa.float32())), path)
    res = rladv("compute", path, "--estimator", "grpo", "--where", "step = 101", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and f"bad.parquet: row {bad}, column score: is nan" in res.output


def test_where_on_frames():
    lazy = pl.scan_parquet(GROUPS)
    out, report = rladv_cli.compute(lazy, estimator="grpo", device="cpu", where="step = 101")
    assert out.height == 33 and report.inputs.filter.rows_read == 65
    eager, report = rladv_cli.compute(pl.read_parquet(GROUPS), estimator="grpo", device="cpu", where="step = 101")
    assert eager.equals(out)
    first = int(np.flatnonzero(pq.read_table(GROUPS)["step"].to_numpy() == 101)[0])
    assert report.row_table["file_row"][0] == first


# ------------------------------------------------------------------------------------------------ hostile --where
READERS = [
    "uid IN (SELECT a FROM read_csv('{secret}'))",
    "EXISTS (SELECT 1 FROM read_parquet('{secret}'))",
    "uid IN (FROM read_csv('{secret}'))",
    "uid IN (VALUES ('x'))",
    "uid IN ( (WITH t AS (SELECT 1) TABLE t))",
    "read_csv ('{secret}') IS NULL",
    "uid = 'a\\'' OR uid IN (select a from read_csv('{secret}')) OR uid = ''",  # quoted under one rule only
]


@pytest.mark.parametrize("where", READERS)
def test_where_never_reads_another_file(tmp_path, monkeypatch, where):
    """A subquery or a table function is refused before polars sees the text (polars opens the file it names
    while parsing), in every command that takes --where; nothing is written."""
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n" + "\n".join(pl.read_parquet(GROUPS)["uid"].unique().to_list()) + "\n")
    monkeypatch.setattr(pl, "sql_expr", lambda *a: pytest.fail("polars parsed the predicate"))
    where = where.format(secret=secret)
    out = tmp_path / "o.parquet"
    for args in (("compute", GROUPS, "--estimator", "grpo", "-o", out), ("inspect", GROUPS),
                 ("compare", GROUPS, *(a for e in ("grpo", "rloo") for a in ("--run", f"{e}: --estimator {e} --where \"{where}\"")))):
        res = rladv(*args, *(() if args[0] == "compare" else ("--where", where)))
        assert res.exit_code == 2 and len(res.output.splitlines()) == 1, res.output
        assert res.output.startswith(f"Error: --where {where!r} ") and "reads nothing else" in res.output, res.output
    with pytest.raises(rladv_cli.ConfigError, match="reads nothing else"):
        rladv_cli.compute(pq.read_table(GROUPS), estimator="grpo", where=where)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.csv"]


@pytest.mark.parametrize("where, kept", [
    ("(uid IS DISTINCT FROM 'nope') AND step = 101", 33),
    ("extract(year from date '2026-01-02') = 2026 AND step = 101", 33),
    ("'select' <> 'values' AND \"step\" = 101", 33),
])
def test_where_keeps_words_a_predicate_may_hold(where, kept):
    out, report = rladv_cli.compute(pq.read_table(GROUPS), estimator="grpo", where=where, device="cpu")
    assert out.num_rows == kept and report.inputs.filter.rows_kept == kept


# ------------------------------------------------------------------------------------------------ pandas
def test_a_pandas_frame_is_read_through_arrow_and_given_back_as_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    table = pq.read_table(GROUPS)
    arrow_out, _ = rladv_cli.compute(table, estimator="grpo", device="cpu")
    frame = pd.DataFrame({name: table[name].to_pylist() for name in table.column_names})  # lists as Python lists
    out, report = rladv_cli.compute(frame, estimator="grpo", device="cpu")
    assert isinstance(out, pd.DataFrame) and report.inputs.rows == 65
    assert [list(a) for a in out["advantages"]] == arrow_out["advantages"].to_pylist()
    kept, _ = rladv_cli.compute(frame, estimator="grpo", device="cpu", where="step = 101")
    assert len(kept) == 33
    cli = tmp_path / "cli.parquet"
    assert rladv("compute", GROUPS, "--estimator", "grpo", "-o", cli, "-q").exit_code == 0
    rladv_cli.compute_file(table.to_pandas(), output=str(tmp_path / "pd.parquet"), estimator="grpo", device="cpu")
    assert pq.read_table(tmp_path / "pd.parquet").equals(pq.read_table(cli))
    # a column header naming a file is not read as a path
    (tmp_path / "uid").write_bytes(GROUPS.read_bytes())
    with pytest.raises(rladv_cli.InputError, match="<pandas>: column .*missing"):
        rladv_cli.compute(pd.DataFrame({str(tmp_path / "uid"): [1]}), estimator="grpo")


@pytest.mark.parametrize("inputs, message", [
    ({"a": 1}, r"the input \(dict\) is not a path or a list of paths"),
    (np.array([str(GROUPS)]), r"the input \(ndarray\) is not a path"),
    ([str(GROUPS), 3], r"input 1 \(int\) is not a path"),
    (b"groups.parquet", r"the input \(bytes\) is not a path"),
])
def test_other_inputs_are_refused_by_their_type(tmp_path, inputs, message):
    with pytest.raises(rladv_cli.ConfigError, match=message):
        rladv_cli.compute_file(inputs, estimator="grpo", output=str(tmp_path / "o.parquet"))
    with pytest.raises(rladv_cli.ConfigError, match=message):
        rladv_cli.validate(inputs)
    assert list(tmp_path.iterdir()) == []


def test_the_verdict_tables_join_the_users_frames_on_uid():
    """uid and cause are plain strings (a categorical column refuses a join with a string one) and the batch key's
    column (step, the default) holds the data's own values and type, in compute's and inspect's tables: a join
    with the user's frame on (step, uid) keeps every row. Without a batch key there is no such column."""
    frame = pl.read_parquet(GROUPS)
    _, report = rladv_cli.compute(frame, estimator="grpo", device="cpu")
    inspected = rladv_cli.inspect(str(GROUPS), estimator="grpo")
    for table in (report.row_table, report.group_table, inspected.row_table, inspected.group_table):
        assert (table.schema["uid"], table.schema["cause"], table.schema["step"]) == (pl.String, pl.String, pl.Int64)
        joined = frame.select("step", "uid", "score").join(table.select("step", "uid", "cause").unique(["step", "uid"]),
                                                           on=["step", "uid"])
        assert joined.height == frame.height and set(joined["step"]) == set(frame["step"]) == {100, 101}
    _, one = rladv_cli.compute(frame, estimator="grpo", batch_key="none", device="cpu")
    assert "step" not in one.row_table.columns and "step" not in one.group_table.columns
