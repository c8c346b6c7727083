"""``tool_rewards`` (docs/contract.md §1: one reward per tool call, added to the score only with
``--tool-reward-coef``).

- ``--tool-reward-coef C`` adds ``C · Σ tool_rewards`` to each row's score at its score position, at score
  assembly: a run with it equals a run on the same data with that sum folded into the score column
  (hypothesis, bit for bit, every chunking);
- without it the column is carried through, and the report and ``inspect`` say what it would have changed
  (``tool_rewards_not_in_score``);
- a null list is a row without tool calls; NaN, infinity, a null inside a list or a wrong type are input
  errors naming file, row and column.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rladv_cli
import strategies as S
from conftest import F32, I8, runner
from rladv_cli.cli import app
from rladv_cli.contract.columns import list_sums


def two_groups(tool_rewards, types=F32) -> pa.Table:
    """Group ``a``: equal scores 1, 1; group ``b``: scores 0, 1. Three tokens a row, all actor tokens."""
    return pa.table({
        "uid": ["a", "a", "b", "b"],
        "response_mask": pa.array([[1, 1, 1]] * 4, I8),
        "score": pa.array([1.0, 1.0, 0.0, 1.0], pa.float32()),
        "tool_rewards": pa.array(tool_rewards, types),
    })


# ------------------------------------------------------------------------------------------- list sums
def test_list_sums_counts_calls_and_reads_null_as_none():
    t = pa.table({"t": pa.array([[1.0, 2.0], None, [], [0.5]], F32)})
    sums, calls = list_sums(t, "t")
    assert sums.tolist() == [3.0, 0.0, 0.0, 0.5] and sums.dtype == np.float64
    assert calls.tolist() == [2, 0, 0, 1]
    assert list_sums(t.slice(1, 2), "t")[0].dtype == np.float64  # numpy's bincount gives int64 for no values
    sums, calls = list_sums(t.slice(1, 3), "t")  # a slice starts at its own first row
    assert sums.tolist() == [0.0, 0.0, 0.5] and calls.tolist() == [0, 0, 1]
    big = pa.table({"t": pa.array([[2**60, 1], [3]], pa.large_list(pa.int64()))})
    assert list_sums(big, "t")[0].tolist() == [float(2**60 + 1), 3.0]


# ------------------------------------------------------------------------------------------- hand-checked
def test_added_tool_rewards_enter_the_group_baseline():
    # group a: R = 1 + 0.5 * (0.2 + 0.8) = 1.5 and 1 + 0.5 * 0 = 1.0; mean 1.25, unbiased std sqrt(0.125) = 0.353553
    # -> ±0.25 / (0.353553 + 1e-6) = ±0.707105. Group b: R = 0 + 0.5 * 1 = 0.5 and 1 -> ∓0.707105 as well.
    t = two_groups([[0.2, 0.8], [], [1.0], None])
    out, report = rladv_cli.compute(t, estimator="grpo", tool_reward_coef=0.5, device="cpu")
    adv = [row[0] for row in out["advantages"].to_pylist()]
    np.testing.assert_allclose(adv, [0.707105, -0.707105, -0.707105, 0.707105], atol=2e-6)
    assert [row[-1] for row in out["token_level_rewards"].to_pylist()] == [1.5, 1.0, 0.5, 1.0]
    assert report.groups.all_equal == 0
    assert report.tool_rewards["added"] is True and report.tool_rewards["coef"] == 0.5
    assert report.tool_rewards["rows_with_calls"] == 2 and report.tool_rewards["calls"] == 3
    assert report.tool_rewards["sum_per_row"]["mean"] == pytest.approx(1.0)
    assert report.tool_rewards["all_equal_groups_with_differing_tool_rewards"] == 0
    assert "tool_rewards_not_in_score" not in report.warning_codes()
    assert out["tool_rewards"].to_pylist() == t["tool_rewards"].to_pylist()  # carried through as read


def test_left_out_tool_rewards_are_reported_where_they_would_have_given_signal():
    t = two_groups([[0.2, 0.8], [], [1.0], None])
    out, report = rladv_cli.compute(t, estimator="grpo", device="cpu")
    assert [row[0] for row in out["advantages"].to_pylist()][:2] == [0.0, 0.0]  # group a: all equal, no signal
    assert report.tool_rewards["added"] is False and report.tool_rewards["coef"] is None
    assert report.tool_rewards["all_equal_groups_with_differing_tool_rewards"] == 1
    warning = next(w for w in report.warnings if w.code == "tool_rewards_not_in_score")
    assert (warning.count, warning.rows) == (1, [0])  # the all-equal group's first row
    # equal tool rewards in the all-equal group: nothing left out there
    _, report = rladv_cli.compute(two_groups([[0.5], [0.5], [1.0], None]), estimator="grpo", device="cpu")
    assert "tool_rewards_not_in_score" not in report.warning_codes()
    # an estimator without groups is not told about groups
    _, report = rladv_cli.compute(t, estimator="reinforce_plus_plus", device="cpu")
    assert "tool_rewards_not_in_score" not in report.warning_codes()
    assert "all_equal_groups_with_differing_tool_rewards" not in report.tool_rewards


def test_no_column_no_section():
    t = two_groups([[1.0]] * 4).drop(["tool_rewards"])
    _, report = rladv_cli.compute(t, estimator="grpo", device="cpu")
    assert report.tool_rewards is None
    with pytest.raises(rladv_cli.InputError, match="column tool_rewards: missing"):
        rladv_cli.compute(t, estimator="grpo", tool_reward_coef=1.0, device="cpu")


def test_gdpo_components_do_not_read_the_score():
    with pytest.raises(rladv_cli.ConfigError, match="^tool_reward_coef adds to the score"):
        rladv_cli.Config(estimator="gdpo", reward_components=("acc",), tool_reward_coef=1.0)


@pytest.mark.parametrize("values, types, message", [
    ([[0.1], [float("nan")], [], None], F32, "row 1, column tool_rewards: has nan at position 0"),
    ([[0.1], [], [1.0, float("inf")], None], F32, "row 2, column tool_rewards: has inf at position 1"),
    ([[0.1], [], [1.0, None], None], F32, "row 2, column tool_rewards: has a null at position 1"),
    ([["x"], [], [], None], pa.list_(pa.string()), "column tool_rewards: has type list<element: string>; expected a list of numbers"),
])
def test_bad_tool_rewards_name_file_row_and_column(tmp_path, values, types, message):
    path = tmp_path / "bad.parquet"
    pq.write_table(two_groups(values, types), path)
    before = path.read_bytes()
    result = runner.invoke(app, ["compute", str(path), "--estimator", "grpo", "-o", str(tmp_path / "out.parquet")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert f"{path}: " in result.output and message in result.output
    assert not (tmp_path / "out.parquet").exists() and path.read_bytes() == before


# ------------------------------------------------------------------------------------------- properties
def folded(r: S.Rollout, table: pa.Table, coef: float, tools: list) -> pa.Table:
    """``table`` without ``tool_rewards``, with ``float32(coef · Σ)`` added to each row's score in float32
    (at the last position of ``rm_scores``: the strategies write no attention_mask)."""
    bonus = np.array([coef * sum(map(float, t or [])) for t in tools], dtype=np.float64).astype(np.float32)
    if r.score is not None:
        score = np.asarray(r.score, dtype=np.float32) + bonus
        return table.set_column(table.schema.get_field_index("score"), "score", pa.array(score, pa.float32()))
    rows = [np.asarray(s, dtype=np.float32) for s in r.rm_scores]
    for row, b in zip(rows, bonus):
        row[-1] = row[-1] + b
    return table.set_column(table.schema.get_field_index("rm_scores"), "rm_scores",
                            pa.array([row.tolist() for row in rows], F32))


tool_lists = st.lists(st.floats(-2, 2, width=32), max_size=4) | st.none()


@pytest.mark.slow  # hypothesis property
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(r=S.rollouts(max_rows=12, max_len=12, min_valid=2), data=st.data(),
       estimator=st.sampled_from(["grpo", "rloo", "reinforce_plus_plus", "gae", "opo", "gpg", "grpo_vectorized"]),
       coef=st.sampled_from([1.0, 0.5, -0.25]) | st.floats(-3, 3, allow_nan=False))
def test_adding_tool_rewards_equals_folding_them_into_the_score(r, data, estimator, coef):
    tools = data.draw(st.lists(tool_lists, min_size=r.num_rows, max_size=r.num_rows))
    kl = data.draw(S.kl_settings())
    chunk_rows = data.draw(st.integers(1, r.num_rows))
    table = r.table()
    base = folded(r, table, coef, tools)
    with_tools = table.append_column("tool_rewards", pa.array(tools, F32))
    out, report = rladv_cli.compute(with_tools, estimator=estimator, tool_reward_coef=coef, chunk_rows=chunk_rows,
                                    device="cpu", **kl)
    want, want_report = rladv_cli.compute(base, estimator=estimator, device="cpu", **kl)
    for name in ("token_level_rewards", "advantages", "returns"):
        assert out[name].to_pylist() == want[name].to_pylist(), name
    assert report.scores == want_report.scores
    assert report.tool_rewards["calls"] == sum(len(t or []) for t in tools)


# ------------------------------------------------------------------------------------------- command line
@pytest.mark.slow  # over 2 s: compute, report, HTML and inspect
def test_cli_report_html_and_inspect_agree(tmp_path):
    path = tmp_path / "g.parquet"
    pq.write_table(two_groups([[0.2, 0.8], [], [1.0], None]), path)
    out = tmp_path / "g.adv.parquet"
    result = runner.invoke(app, ["compute", str(path), "--estimator", "grpo", "--report", str(tmp_path / "r.json"),
                                 "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps at the terminal width
    assert "tool rewards: 2 row(s) with 3 call(s)" in text and "not added to the score" in text
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["tool_rewards"]["all_equal_groups_with_differing_tool_rewards"] == 1
    warning = next(w for w in report["warnings"] if w["code"] == "tool_rewards_not_in_score")
    assert (warning["count"], warning["rows"], warning["where"]) == (1, [0], [f"{path}:0"])
    assert "Tool rewards" in (tmp_path / "r.html").read_text()
    assert pq.read_table(out)["tool_rewards"].equals(pq.read_table(path)["tool_rewards"])

    result = runner.invoke(app, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    ins = json.loads(result.output)
    check = next(c for c in ins["checks"] if c["code"] == "tool_rewards_not_in_score")
    assert (check["status"], check["count"], check["rows"], check["step"]) == ("warn", 1, [0], 5)
    assert ins["scores"]["tool_rewards"]["count"] == 2 and ins["scores"]["tool_rewards"]["mean"] == pytest.approx(1.0)
    view = json.loads(runner.invoke(app, ["inspect", str(path), "--row", "0", "--json"]).output)
    assert view["tool_rewards"] == pytest.approx([0.2, 0.8]) and any("2 tool call(s), sum 1" in n for n in view["notes"])
    assert json.loads(runner.invoke(app, ["inspect", str(path), "--row", "3", "--json"]).output)["tool_rewards"] is None
    result = runner.invoke(app, ["inspect", str(path), "--json", "--estimator", "gae"])
    check = next(c for c in json.loads(result.output)["checks"] if c["code"] == "tool_rewards_not_in_score")
    assert check["status"] == "pass" and check["count"] == 1  # gae does not use groups

    result = runner.invoke(app, ["compute", str(path), "--estimator", "grpo", "--tool-reward-coef", "0.5",
                                 "-o", str(tmp_path / "added.parquet"), "--html", str(tmp_path / "added.html")])
    assert result.exit_code == 0, result.output
    assert "added to the score x 0.5" in " ".join(result.output.split())
    assert "score + 0.5 x sum of tool_rewards" in (tmp_path / "added.html").read_text()
    adv = pq.read_table(tmp_path / "added.parquet")["advantages"].to_pylist()
    assert adv[0][0] == pytest.approx(0.707105, abs=2e-6)


def test_validate_accepts_null_lists_and_counts_bad_values(tmp_path):
    path = tmp_path / "g.parquet"
    pq.write_table(two_groups([[0.5], None, [], [1.0]]), path)
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0
    pq.write_table(two_groups([[float("nan")], None, [], [1.0, float("nan")]]), path)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "2 row(s) with NaN, infinity or beyond float32 in a list in tool_rewards" in result.output
