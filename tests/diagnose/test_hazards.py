"""The checklist's hazard checks and verdict on planted datasets (docs/debugging.md): each new code fires on its
defect, at the rows that hold it, and none fires on a clean dataset."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from conftest import rladv, write
from rladv_cli.diagnose.checklist import inspect
from rladv_cli.diagnose.scan import prompt_keys

NEW_CODES = ("score_on_empty_response", "batch_not_multiple_of_group", "uid_spans_prompts", "epsilon_dominated_std",
             "kl_only_signal", "no_groups")


def clean(n_groups: int = 4, n: int = 4) -> dict:
    """Groups of ``n`` rows with mixed 0/1 scores, one prompt each, a small positive KL on every row."""
    rows = n_groups * n
    return {
        "uid": [f"p{i // n}" for i in range(rows)],
        "prompts": [[100 + i // n, 7, 8] for i in range(rows)],
        "response_mask": [[1] * (3 + i % 3) for i in range(rows)],
        "score": [float(i % 2) for i in range(rows)],
        "old_log_probs": [[-0.5] * (3 + i % 3) for i in range(rows)],
        "ref_log_prob": [[-0.6] * (3 + i % 3) for i in range(rows)],
    }


def checks(ins) -> dict:
    return {c.code: c for c in ins.checks}


def test_a_clean_dataset_passes_every_check_and_its_verdict_is_ok(tmp_path):
    path = write(tmp_path / "clean.parquet", clean(), types={"prompts": pa.list_(pa.int32())})
    for estimator in (None, "grpo"):
        ins = inspect(path, kl_coef=0.01, estimator=estimator)
        assert {c.code for c in ins.checks} >= set(NEW_CODES) - {"no_groups"}
        assert [c.code for c in ins.checks if c.status != "pass"] == []
        assert ins.verdict.level == "ok" and ins.verdict.signal_share == 1.0 and ins.verdict.causes == []
        assert ins.verdict.group_outcomes.mixed == 1.0


def test_score_on_empty_response(tmp_path):
    cols = clean()
    cols["response_mask"][5] = [0, 0, 0]  # row 5 (score 1) generated nothing; its score sits on padding
    ins = inspect(write(tmp_path / "d.parquet", cols))
    c = checks(ins)["score_on_empty_response"]
    assert (c.status, c.count, c.rows) == ("warn", 1, [5])
    assert checks(inspect(write(tmp_path / "e.parquet", cols), estimator="gae"))["score_on_empty_response"].status == "pass"
    cols["score"][5] = 0.0  # an empty response scored 0 is no hazard
    assert checks(inspect(write(tmp_path / "f.parquet", cols)))["score_on_empty_response"].count == 0


def test_batch_not_multiple_of_group(tmp_path):
    cols = clean(n_groups=3)
    for name in cols:
        del cols[name][4]  # group p1 loses a row: 11 rows, groups of 4, 3, 4
    ins = inspect(write(tmp_path / "d.parquet", cols))
    c = checks(ins)["batch_not_multiple_of_group"]
    assert (c.status, c.count, c.rows) == ("warn", 1, [4]) and "11 rows" in c.message
    g = checks(ins)["group_size_mismatch"]
    assert (g.count, g.rows) == (1, [4])
    # verl groups by uid: no verl estimator's advantages depend on it
    assert checks(inspect(write(tmp_path / "e.parquet", cols), estimator="grpo"))["batch_not_multiple_of_group"].status == "pass"


def test_batch_not_multiple_is_judged_per_step(tmp_path):
    cols = clean(n_groups=4)
    cols["step"] = [0] * 8 + [1] * 8
    for name in cols:
        del cols[name][9]  # step 1 has 7 rows
    ins = inspect(write(tmp_path / "d.parquet", cols), batch_key="step")
    c = checks(ins)["batch_not_multiple_of_group"]
    assert (c.count, c.rows) == (1, [8]) and "1: 7 rows" in c.message


def test_uid_spans_prompts(tmp_path):
    cols = clean()
    cols["prompts"][6] = [999, 7, 8]  # row 6 of group p1 came from another prompt
    path = write(tmp_path / "d.parquet", cols, types={"prompts": pa.list_(pa.int32())})
    c = checks(inspect(path))["uid_spans_prompts"]
    assert (c.status, c.count, c.rows) == ("warn", 1, [4])
    # the prompt as text, under the user's column name
    cols["raw"] = [f"prompt {p[0]}" for p in cols.pop("prompts")]
    path = write(tmp_path / "t.parquet", cols, types={"raw": pa.string()})
    assert "uid_spans_prompts" not in checks(inspect(path))
    c = checks(inspect(path, columns={"prompts": "raw"}))["uid_spans_prompts"]
    assert (c.count, c.rows) == (1, [4])


def test_prompt_keys_see_order_values_and_length():
    arr = pa.array([[1, 2], [2, 1], [1, 2], [1, 2, 0], [1, 2]], pa.list_(pa.int64()))
    k = prompt_keys(arr)
    assert k[0] == k[2] == k[4] and len({k[0], k[1], k[3]}) == 3
    s = prompt_keys(pa.array(["a", "b", "a"]))
    assert s[0] == s[2] != s[1]


def test_epsilon_dominated_std(tmp_path):
    cols = clean()
    # group p2 (rows 8-11): seven-vs-one is too many for the helper; three at 0.35 and one a hair above
    cols["score"][8:12] = [0.35, 0.35, 0.35, 0.350001]
    path = write(tmp_path / "d.parquet", cols)
    c = checks(inspect(path))["epsilon_dominated_std"]
    assert (c.status, c.count, c.rows) == ("warn", 1, [8])
    r = np.array(cols["score"][8:12], dtype=np.float32).astype(np.float64)
    std = r.std(ddof=1)
    assert std <= 9e-6
    largest = np.abs(r - r.mean()).max() / (std + 1e-6)
    assert f"largest |R - mean| / (std + eps) {largest:.3g} in float64" in c.message and "dataset row 11" in c.message
    # the verdict does not count a near tie as signal
    v = inspect(path, estimator="grpo").verdict
    tie = {c.code: c for c in v.causes}["epsilon_tie_group"]
    assert tie.groups == 1 and tie.tokens == sum(len(m) for m in cols["response_mask"][8:12])
    assert v.signal_tokens == sum(len(m) for m in cols["response_mask"]) - tie.tokens
    assert "epsilon_tie_group" not in {c.code for c in inspect(path, estimator="rloo").verdict.causes}
    # epsilon large enough: it is checked against the setting; Dr.GRPO does not divide by std
    assert checks(inspect(path, estimator="grpo", epsilon=1e-8))["epsilon_dominated_std"].count == 0
    assert checks(inspect(path, estimator="grpo", norm_adv_by_std=False))["epsilon_dominated_std"].status == "pass"
    assert checks(inspect(path, estimator="rloo"))["epsilon_dominated_std"].status == "pass"


def test_kl_only_signal(tmp_path):
    cols = clean()
    cols["score"][0:4] = [1.0] * 4  # group p0 ties on its scores ...
    cols["ref_log_prob"][1] = [-0.2] * len(cols["ref_log_prob"][1])  # ... not on its KL-shaped totals
    path = write(tmp_path / "d.parquet", cols)
    ins = inspect(path, kl_coef=0.1, estimator="grpo")
    c = checks(ins)["kl_only_signal"]
    assert (c.status, c.count, c.rows) == ("warn", 1, [0])
    assert checks(ins)["all_equal_group"].count == 0
    cause = {c.code: c for c in ins.verdict.causes}["kl_only_group"]
    tokens = sum(len(m) for m in cols["response_mask"][0:4])
    assert cause.tokens == tokens and cause.groups == 1
    assert "kl_only_signal" not in checks(inspect(path))  # no KL shaping asked: the basis is the score


def test_kl_raises_reward_is_judged_on_the_row_total(tmp_path):
    cols = clean()
    # k1 = old - ref per token: row 0 mixes signs with a positive sum; row 1 sums below 0
    cols["ref_log_prob"] = [[-0.6] * len(m) for m in cols["response_mask"]]
    cols["ref_log_prob"][0][0] = -0.45  # one token of -0.05, the row's sum still > 0
    cols["ref_log_prob"][1] = [-0.3] * len(cols["response_mask"][1])
    path = write(tmp_path / "d.parquet", cols)
    c = checks(inspect(path, kl_coef=0.1))["kl_raises_reward"]
    assert (c.count, c.rows) == (1, [1])
    out = tmp_path / "o.parquet"
    res = rladv("compute", path, "--estimator", "grpo", "--kl-coef", "0.1", "-o", out, "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    warnings = {w["code"]: w for w in json.loads((tmp_path / "r.json").read_text())["warnings"]}
    assert (warnings["kl_raises_reward"]["count"], warnings["kl_raises_reward"]["rows"]) == (1, [1])


def test_all_zero_and_all_top_ratios(tmp_path):
    cols = clean()
    cols["score"][0:4] = [0.0] * 4
    cols["score"][4:8] = [1.0] * 4
    cols["score"][8:12] = [0.0] * 4
    ins = inspect(write(tmp_path / "d.parquet", cols))
    g = ins.verdict.group_outcomes
    assert (g.groups, g.all_zero, g.all_top, g.mixed) == (4, 0.5, 0.25, 0.25)
    msg = checks(ins)["all_equal_group"].message
    assert "of the 4 groups of 2+ rows, 50.0% are all 0 (too hard?) and 25.0% all at the batch's top reward" in msg


def test_no_uid_is_a_finding(tmp_path):
    cols = clean()
    del cols["uid"]
    path = write(tmp_path / "d.parquet", cols)
    ins = inspect(path)
    c = checks(ins)["no_groups"]
    assert c.status == "warn" and "group checks (steps 4-5) did not run" in c.message
    assert "singleton_group" not in checks(ins) and ins.verdict.level == "warn"
    assert any("no uid column" in h for h in ins.verdict.hints)
    ins = inspect(path, estimator="grpo")
    assert checks(ins)["missing_columns"].status == "fail" and "no_groups" not in checks(ins)
    assert ins.verdict.level == "fail" and [c.code for c in ins.verdict.causes] == ["no_uid"]
    assert checks(inspect(path, estimator="reinforce_plus_plus"))["no_groups"].status == "pass"


@pytest.mark.parametrize("column", ["score", "rm_scores"])
def test_a_nan_reward_names_its_group(tmp_path, column):
    cols = clean()
    if column == "rm_scores":
        cols["rm_scores"] = [[0.0] * (len(m) - 1) + [s] for m, s in zip(cols["response_mask"], cols.pop("score"))]
        cols["rm_scores"][6][-1] = float("nan")
    else:
        cols["score"][6] = float("nan")
    path = write(tmp_path / "d.parquet", cols)
    res = rladv("compute", path, "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and not (tmp_path / "o.parquet").exists()
    assert f"row 6, column {column}:" in res.output and "uid 'p1'" in res.output
    c = checks(inspect(path))["invalid_rows"]
    assert c.rows == [6] and "uid 'p1'" in c.message
