"""``rladv validate``: compute's checks without computing, every problem at once (a count and the first rows of
each kind), in the words compute would use for the first."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq


import pytest

from conftest import (assert_one_line_error, assert_untouched, copy_sample, drop, extend_row, good_columns, listing,
                      mutated, read, rladv, set_token, write)


@pytest.mark.parametrize(("name", "estimator"), [("groups.parquet", "grpo"), ("multiturn.parquet", "gae"),
                                                 ("padded.parquet", None)])
def test_validate_ok(tmp_path, name, estimator):
    inp = copy_sample(tmp_path, name)
    src = read(inp)
    args = ["validate", inp] + (["--estimator", estimator] if estimator else [])
    result = rladv(*args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok")
    assert f"{src.num_rows} rows" in result.output
    assert listing(tmp_path) == [name]


@pytest.mark.parametrize("mutate,row,column", [
    (set_token("response_mask", 2, 1, 2), 2, "response_mask"),
    (set_token("rm_scores", 3, 0, float("nan")), 3, "rm_scores"),
    (extend_row("values", 1), 1, "values"),
])
def test_validate_fails_like_compute(tmp_path, mutate, row, column):
    bad = write(tmp_path / "bad.parquet", mutated(good_columns(), mutate))
    before, data = listing(tmp_path), {bad: bad.read_bytes()}
    v = rladv("validate", bad, "--estimator", "gae")
    c = rladv("compute", bad, "--estimator", "gae")
    line_c = assert_one_line_error(c, str(bad), row=row, column=column)
    # validate lists every problem: a header, then one line per kind holding compute's message
    assert v.exit_code == 2 and "Traceback" not in v.output
    lines = v.stderr.strip().splitlines()
    assert lines[0].startswith("Error: 1 of ") and line_c.removeprefix("Error: ") in lines[1]
    assert_untouched(tmp_path, before, data)


def test_validate_reports_every_problem_with_counts_and_first_rows(tmp_path):
    cols = good_columns()
    cols["response_mask"] = [[2] + m[1:] if i % 2 else m for i, m in enumerate(cols["response_mask"])]
    bad = write(tmp_path / "bad.parquet", cols)
    v = rladv("validate", bad)
    lines = v.stderr.strip().splitlines()
    n_bad = sum(1 for i in range(len(cols["response_mask"])) if i % 2)
    assert v.exit_code == 2 and lines[0].startswith(f"Error: {n_bad} of {len(cols['response_mask'])} rows")
    assert f"{n_bad} row(s) with mask value other than 0 or 1 in response_mask" in lines[1] and f"{bad}:1, {bad}:3" in lines[1]


def test_validate_and_compute_give_the_same_message_for_a_short_list(tmp_path):
    """Lists are measured against response_mask in both, whichever columns each reads first."""
    cols = good_columns()
    cols = {"values": [v[:-1] if i == 2 else v for i, v in enumerate(cols["values"])],
            **{k: v for k, v in cols.items() if k != "values"}}  # values before response_mask in the file
    bad = write(tmp_path / "bad.parquet", cols)
    example = rladv("validate", bad).stderr.strip().splitlines()[1].split(", e.g. ", 1)[1]
    error = assert_one_line_error(rladv("compute", bad, "--estimator", "gae", "-o", tmp_path / "o.parquet"), "values")
    assert error == f"Error: {example}" and "but response_mask has 2" in example


def test_validate_missing_column_for_estimator(tmp_path):
    bad = write(tmp_path / "bad.parquet", mutated(good_columns(), drop("values")))
    assert rladv("validate", bad).exit_code == 0
    assert_one_line_error(rladv("validate", bad, "--estimator", "gae"), str(bad), column="values")


@pytest.mark.parametrize(("estimator", "extra", "missing"), [
    ("remax", [], ["reward_baselines"]),
    ("optimal_token_baseline", [], ["old_log_probs", "sum_pi_squared"]),
    ("tir_optimal_token_baseline", [], ["old_log_probs", "sum_pi_squared"]),
    ("gdpo", ["--reward-components", "accuracy,fmt"], ["accuracy", "fmt"]),
    ("gae", ["--kl-coef", "0.1"], ["values", "old_log_probs", "ref_log_prob"]),
])
def test_every_missing_input_is_named_at_once(tmp_path, estimator, extra, missing):
    inp = write(tmp_path / "bare.parquet", {"uid": ["a", "a"], "response_mask": [[1, 1], [1]], "score": [1.0, 0.0]})
    for command in (["validate", inp, "--estimator", estimator], ["compute", inp, "--estimator", estimator, *extra]):
        if command[0] == "validate" and extra:
            continue
        line = assert_one_line_error(rladv(*command), str(inp))
        assert ", ".join(missing) in line


def test_validate_json_lists_what_was_checked_and_every_problem(tmp_path):
    """--json: the ValidationSummary as one object, exit 0 when valid and 2 when rows break the contract."""
    data = copy_sample(tmp_path, "groups.parquet")
    ok = rladv("validate", data, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout) == {
        "ok": True, "paths": [str(data)], "rows": 65, "tokens": 1850, "problems": [], "skipped": [],
        "columns": ["uid", "responses", "response_mask", "score", "old_log_probs", "ref_log_prob", "step"]}
    t = read(data)
    masks = t["response_mask"].to_pylist()
    masks[3], masks[9] = [2] * len(masks[3]), [3] * len(masks[9])
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(2, "response_mask", pa.array(masks, pa.list_(pa.int8()))), bad)
    res = rladv("validate", bad, "--json")
    found = json.loads(res.stdout)
    assert res.exit_code == 2 and not found["ok"] and res.stderr == ""
    assert found["problems"] == [{"column": "response_mask", "kind": "mask value other than 0 or 1", "count": 2,
                                  "rows": [f"{bad}:3", f"{bad}:9"], "example": f"{bad}: row 3, column "
                                  "response_mask: has value 2; masks must be 0 or 1"}]
