"""``--loss-agg-mode`` and its knobs through the command line, on Parquet files written as a user writes them:
the column, the report's section, explain's derivation, compare on token weights, and the one-line refusals."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLES, assert_one_line_error, copy_sample, read, rladv, run


def test_compute_writes_token_weight_and_the_gradient_section(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out, report, html = tmp_path / "o.parquet", tmp_path / "r.json", tmp_path / "r.html"
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "seq-mean-token-mean", "--mini-batch-size",
                "16", "-o", out, "--report", report, "--html", html, env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "gradient: verl 0.9.1 actor.loss_agg_mode=seq-mean-token-mean" in res.stdout
    t = read(out)
    assert t.column_names[-1] == "token_weight"
    r = json.loads(report.read_text())
    g = r["gradient"]
    assert (g["mode"], g["mini_batches"], g["mini_batch_size"]) == ("seq-mean-token-mean", 3, 16)
    weights = np.concatenate([np.asarray(x) for x in t["token_weight"].to_pylist()])
    assert g["mass"] == pytest.approx(float(np.abs(weights).sum()), rel=1e-6)
    assert "of the gradient mass" in r["verdict"]["headline"]
    page = html.read_text()
    assert 'id="gradient"' in page and "What each token weighs" in page
    assert read(src).equals(pq.read_table(SAMPLES / "multiturn.parquet"))  # the input is never touched


def test_without_a_mode_nothing_changes(tmp_path):
    src = copy_sample(tmp_path, "groups.parquet")
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    assert rladv("compute", src, "--estimator", "grpo", "-o", out, "--report", report).exit_code == 0
    assert "token_weight" not in read(out).column_names
    assert json.loads(report.read_text())["gradient"] is None


def test_knobs_without_a_mode_or_unread_by_it_are_refused(tmp_path):
    src = copy_sample(tmp_path, "groups.parquet")
    out = tmp_path / "o.parquet"
    res = rladv("compute", src, "--estimator", "grpo", "--mini-batch-size", "5", "-o", out)
    assert_one_line_error(res, "--mini-batch-size has no effect without --loss-agg-mode")
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "token-mean", "--loss-scale-factor", "4",
                "-o", out)
    assert_one_line_error(res, "--loss-scale-factor has no effect with --loss-agg-mode token-mean")
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "dapo", "-o", out)
    assert_one_line_error(res, "--loss-agg-mode: 'dapo' is not a mode of --convention verl",
                          "dapo is a mode of --convention trl")
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "token-mean", "--mini-batch-size", "4",
                "--batch-key", "none", "-o", out)  # 65 rows
    assert_one_line_error(res, "--mini-batch-size 4: the dataset has 65 rows, not a multiple of 4")
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "token-mean", "--mini-batch-size", "4",
                "-o", out)  # its step column: 32 and 33 rows
    assert_one_line_error(res, "--mini-batch-size 4: the batch step=101 has 33 rows, not a multiple of 4")
    res = rladv("compute", src, "--estimator", "grpo", "--loss-agg-mode", "token-mean", "--mini-batch-size", "6",
                "--micro-batch-size", "4", "-o", out)
    assert_one_line_error(res, "--micro-batch-size 4 does not divide --mini-batch-size 6")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.parquet"]  # nothing written


def test_threshold_values_are_checked(tmp_path):
    src = copy_sample(tmp_path, "groups.parquet")
    for bad, words in (("all_equal_group", "write CODE=WARN or CODE=WARN,FAIL"),
                       ("all_equal_group=x", "is not WARN[,FAIL]"),
                       ("all_equal=0.1", "all_equal: not a check of the verdict; did you mean all_equal_group?"),
                       ("rejected=0.5,0.2", "rejected: fail at 0.2 is below warn at 0.5")):
        assert_one_line_error(rladv("inspect", src, "--threshold", bad), words)
    res = rladv("inspect", src, "--estimator", "grpo", "--threshold", "all_equal_group=0.1", "--json")
    assert json.loads(res.stdout)["verdict"]["level"] == "warn"
    res = rladv("compute", src, "--estimator", "grpo", "--threshold", "all_equal_group=0.1", "--threshold",
                "singleton_group=off", "-o", tmp_path / "o.parquet", "--report", "-", "-q")
    causes = {c["code"]: c["level"] for c in json.loads(res.stdout)["verdict"]["causes"]}
    assert (causes["all_equal_group"], causes["singleton_group"]) == ("warn", "note")


def test_explain_derives_the_rows_weight(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    res = rladv("explain", src, "--row", "3", "--estimator", "grpo", "--loss-agg-mode", "seq-mean-token-mean",
                "--mini-batch-size", "16", "--json")
    assert res.exit_code == 0, res.output
    w = json.loads(res.stdout)["weight"]
    assert (w["mode"], w["mini_batch"], w["terms"]) == ("seq-mean-token-mean", 0,
                                                        {"G (rows per mini-batch)": 16.0, "u (the row's tokens)": 20.0})
    assert w["scale"] == pytest.approx(1 / (16 * 20))
    gae = json.loads(rladv("explain", src, "--row", "3", "--estimator", "gae", "--loss-agg-mode", "token-mean",
                           "--json").stdout)
    assert gae["columns"][-1] == "weight"
    assert [t[-1] for t in gae["tokens"]] == gae["weight"]["token_weight"]
    text = rladv("explain", src, "--row", "3", "--estimator", "gae", "--loss-agg-mode", "token-mean",
                 env={"COLUMNS": "160"}).stdout
    assert "T0 (loss_mask tokens of the mini-batch) = 1000" in text


def test_compare_sets_loss_modes_side_by_side(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out = tmp_path / "cmp.parquet"
    res = rladv("compare", src, "--run", "tm: --estimator grpo --loss-agg-mode token-mean",
                "--run", "sm: --estimator grpo --loss-agg-mode seq-mean-token-mean", "-o", out, "--json")
    assert res.exit_code == 0, res.output
    c = json.loads(res.stdout)
    assert c["compared"] == "token_weight"
    t = read(out)
    assert {"token_weight__tm", "token_weight__sm"} <= set(t.column_names)
    single = read(SAMPLES / "multiturn.parquet")
    mine, _ = run(single, "grpo", loss_agg_mode="token-mean")
    assert t["token_weight__tm"].to_pylist() == mine["token_weight"].to_pylist()
    res = rladv("compare", src, "--run", "tm: --estimator grpo --loss-agg-mode token-mean",
                "--run", "plain: --estimator grpo")
    assert_one_line_error(res, "run 'tm' weighs its tokens (--loss-agg-mode) and run 'plain' does not")


def test_inspect_reads_the_weights_of_an_rladv_output(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    args = ("--kl-coef", "0.05", "--rollout-rs", "token_k1", "--rollout-rs-threshold", "1.5")
    assert rladv("compute", src, "--estimator", "grpo", *args, "--loss-agg-mode", "seq-mean-token-mean", "-o", out,
                 "--report", report).exit_code == 0
    computed = json.loads(report.read_text())["verdict"]
    inspected = json.loads(rladv("inspect", out, "--estimator", "grpo", "--kl-coef", "0.05",
                                 "--json").stdout)["verdict"]
    assert inspected["signal_mass_share"] == pytest.approx(computed["signal_mass_share"], rel=1e-6)
    assert [(c["code"], round(c["mass_share"], 9)) for c in inspected["causes"]] == [
        (c["code"], round(c["mass_share"], 9)) for c in computed["causes"]]
    assert inspected["headline"].endswith("of the gradient mass (the file's token_weight)")
