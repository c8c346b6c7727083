"""The ``rladv`` command line end to end (CONTRACT.md §1-§4), on real Parquet files written into tmp_path.

Every run goes through ``typer.testing.CliRunner`` (in-process, so torch is imported once for the file),
except the import-cost checks, which need a fresh interpreter.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import (F32, I8, SAMPLES, assert_one_line_error, assert_untouched, copy_sample, drop, extend_row,
                      good_columns, listing, mutated, read, rladv, rladv_command, runner, set_row, set_token, write)
from rladv_cli.cli import app

REPORT_KEYS = {
    "rladv_version", "inputs", "config", "tokens", "groups", "scores", "kl", "rollout_rejection",
    "advantages", "returns", "warnings", "timing",
}
ADDED = ["token_level_rewards", "loss_mask", "advantages", "returns"]  # response_mask is rewritten in place
ESTIMATOR_NAMES = {
    "gae", "grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
    "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "grpo_passk", "optimal_token_baseline",
    "tir_optimal_token_baseline", "gdpo",
}


# --------------------------------------------------------------------------------------------- helpers
def check_output(inp: Path, out: Path) -> pa.Table:
    """CONTRACT §3: same rows, same order, input columns first and unchanged, rladv's columns typed."""
    src, dst = read(inp), read(out)
    assert dst.num_rows == src.num_rows
    expected_names = src.column_names + [c for c in ADDED if c not in src.column_names]
    assert dst.column_names == expected_names
    for name in src.column_names:
        if name == "response_mask":  # rewritten as int8 (no rejection here, so same values)
            assert dst[name].to_pylist() == src[name].to_pylist()
        else:
            assert dst[name].equals(src[name]), name
    assert dst.schema.field("response_mask").type == I8
    assert dst.schema.field("loss_mask").type == I8
    for name in ("token_level_rewards", "advantages", "returns"):
        assert dst.schema.field(name).type == F32, name
    m = np.concatenate([np.asarray(r) for r in dst["response_mask"].to_pylist()])
    for name in ("advantages", "returns"):
        v = np.concatenate([np.asarray(r, dtype=np.float32) for r in dst[name].to_pylist()])
        assert v.shape == m.shape
        assert np.all(v[m == 0] == 0), name
        assert np.all(np.isfinite(v)), name
    for name in ADDED:
        lens = [len(r) for r in dst[name].to_pylist()]
        assert lens == [len(r) for r in src["response_mask"].to_pylist()], name
    return dst


# --------------------------------------------------------------------------------- 1. compute outputs
def test_compute_grpo_on_groups_sample(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "grpo", "--report", report)
    assert result.exit_code == 0, result.output
    out = tmp_path / "groups.adv.parquet"
    assert out.exists()
    dst = check_output(inp, out)
    # grpo: returns are the advantages; loss_mask is the input mask
    assert dst["returns"].equals(dst["advantages"])
    assert dst["loss_mask"].to_pylist() == dst["response_mask"].to_pylist()

    data = json.loads(report.read_text())
    assert REPORT_KEYS <= set(data)
    codes = {w["code"] for w in data["warnings"]}
    assert {"singleton_group", "all_equal_group", "group_size_mismatch"} <= codes
    assert "score_on_masked_position" not in codes
    for w in data["warnings"]:
        assert {"code", "message", "count", "rows"} <= set(w)
        assert w["count"] >= 1 and w["rows"]
    src = read(inp)
    assert data["inputs"]["rows"] == src.num_rows
    assert data["inputs"]["tokens"] == sum(len(r) for r in src["response_mask"].to_pylist())
    assert data["config"]["estimator"] == "grpo"
    assert data["groups"]["singletons"] == 1
    assert data["groups"]["count"] == len(set(src["uid"].to_pylist()))
    for key in ("mean", "std", "min", "max", "fraction_positive", "fraction_negative", "fraction_zero"):
        assert key in data["advantages"] and key in data["returns"]
    # the singleton row's advantage is R / (1 + eps) (SEMANTICS §7.2)
    (single,) = [w for w in data["warnings"] if w["code"] == "singleton_group"]
    row = single["rows"][0]
    score = src["score"][row].as_py()
    assert dst["advantages"][row].as_py()[0] == pytest.approx(score / (1 + 1e-6), abs=1e-6)
    # the rich summary went to stdout
    assert "grpo" in result.stdout


def test_compute_gae_on_multiturn_sample_warns_masked_score(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "gae", "--report", report, "-q")
    assert result.exit_code == 0, result.output
    out = tmp_path / "multiturn.adv.parquet"
    check_output(inp, out)
    data = json.loads(report.read_text())
    assert REPORT_KEYS <= set(data)
    assert "score_on_masked_position" in {w["code"] for w in data["warnings"]}
    assert data["tokens"]["observation"] > 0


def test_compute_on_padded_sample(tmp_path):
    inp = copy_sample(tmp_path, "padded.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "rloo", "--report", report, "-q")
    assert result.exit_code == 0, result.output
    dst = check_output(inp, tmp_path / "padded.adv.parquet")
    data = json.loads(report.read_text())
    assert data["tokens"]["padding"] > 0
    # the scalar score sits on the last non-padding position (SEMANTICS §1)
    for att, tlr, score in zip(read(inp)["attention_mask"].to_pylist(), dst["token_level_rewards"].to_pylist(),
                               read(inp)["score"].to_pylist()):
        p = sum(att) - 1
        assert tlr[p] == pytest.approx(score)
        assert all(v == 0 for i, v in enumerate(tlr) if i != p)


F32_A = float(np.float32(0.5) / (np.float32(0.5) + np.float32(1e-6)))  # 0.999998 in float32


@pytest.mark.parametrize(
    ("uids", "scores", "expected"),
    [
        # SEMANTICS §7.2 worked examples
        (["g", "g", "g"], [1.0, 0.0, 0.5], [0.999998, -0.999998, 0.0]),
        (["a", "a", "b"], [1.0, 0.0, 0.5], [0.7071058, -0.7071058, 0.4999995]),
    ],
)
def test_compute_grpo_exact_numbers(tmp_path, uids, scores, expected):
    masks = [[1, 1, 0, 0, 1], [1, 1], [1]]
    inp = write(tmp_path / "tiny.parquet", {"uid": uids, "response_mask": masks, "score": scores})
    result = rladv("compute", inp, "--estimator", "grpo", "-q")
    assert result.exit_code == 0, result.output
    dst = read(tmp_path / "tiny.adv.parquet")
    adv = dst["advantages"].to_pylist()
    for row, (mask, a) in enumerate(zip(masks, expected)):
        want = [a * m for m in mask]
        assert adv[row] == pytest.approx(want, abs=1e-6), (row, adv[row])
    if expected[0] == 0.999998:
        assert adv[0][0] == F32_A  # bit-exact float32 0.9999980
    assert dst["returns"].to_pylist() == adv
    # the scalar score is assembled on the last position of each row
    assert dst["token_level_rewards"].to_pylist() == [[0, 0, 0, 0, scores[0]], [0, scores[1]], [scores[2]]]
    assert dst["loss_mask"].to_pylist() == masks


def test_compute_grpo_without_std_and_all_equal_group(tmp_path):
    inp = write(tmp_path / "tiny.parquet", {
        "uid": ["A", "A", "A", "B", "B", "B"],
        "response_mask": [[1], [1], [1], [1], [1], [1]],
        "rm_scores": [[1.0], [0.0], [0.5], [0.0], [0.0], [0.0]],
    })
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "grpo", "--no-norm-adv-by-std", "-q", "--report", report)
    assert result.exit_code == 0, result.output
    adv = [r[0] for r in read(tmp_path / "tiny.adv.parquet")["advantages"].to_pylist()]
    assert adv == [0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    data = json.loads(report.read_text())
    (w,) = [w for w in data["warnings"] if w["code"] == "all_equal_group"]
    assert w["count"] == 1 and w["rows"] == [3]
    assert data["groups"]["all_equal"] == 1


def test_bool_mask_and_integer_uid(tmp_path):
    masks = [[True, True, False, False, True], [True, True], [True]]
    inp = write(tmp_path / "tiny.parquet", {"uid": [5, 5, 5], "response_mask": masks, "score": [1.0, 0.0, 0.5]},
                types={"uid": pa.int64(), "response_mask": pa.list_(pa.bool_())})
    result = rladv("compute", inp, "--estimator", "grpo", "-q")
    assert result.exit_code == 0, result.output
    dst = read(tmp_path / "tiny.adv.parquet")
    assert dst.schema.field("response_mask").type == I8
    assert dst["response_mask"].to_pylist() == [[int(v) for v in r] for r in masks]
    assert dst["uid"].to_pylist() == [5, 5, 5]
    assert dst["advantages"][0].as_py() == [F32_A, F32_A, 0, 0, F32_A]


# ------------------------------------------------------------------------------ 2. output locations
def test_explicit_output(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    out = tmp_path / "sub" / "x.parquet"
    out.parent.mkdir()
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out, "-q")
    assert result.exit_code == 0, result.output
    check_output(inp, out)
    assert not (tmp_path / "groups.adv.parquet").exists()
    assert not list(out.parent.glob(".rladv-*")) and not list(tmp_path.glob(".rladv-*"))


def test_several_inputs_need_output(tmp_path):
    a = write(tmp_path / "a.parquet", good_columns())
    b = write(tmp_path / "b.parquet", good_columns())
    before, data = listing(tmp_path), {a: a.read_bytes(), b: b.read_bytes()}
    result = rladv("compute", a, b, "--estimator", "grpo")
    assert_one_line_error(result, "-o")
    assert_untouched(tmp_path, before, data)


def test_folder_input_needs_output(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "a.parquet", good_columns())
    before = listing(tmp_path)
    result = rladv("compute", folder, "--estimator", "grpo")
    assert_one_line_error(result, "-o")
    assert listing(tmp_path) == before and listing(folder) == ["a.parquet"]


@pytest.mark.parametrize("pattern", ["part-*.parquet", "part-0*.parquet"])
def test_a_glob_pattern_needs_output(tmp_path, pattern):
    """A quoted glob is a dataset like a folder, even when it matches one file: without -o there is no
    file name to write beside (it once wrote 'part-*.adv.parquet')."""
    folder = tmp_path / "shards"
    folder.mkdir()
    write(folder / "part-0.parquet", good_columns())
    write(folder / "part-1.parquet", good_columns())
    before = listing(folder)
    result = rladv("compute", str(folder / pattern), "--estimator", "grpo")
    assert_one_line_error(result, "-o OUT.parquet is required when the dataset is a folder, a glob pattern")
    assert listing(folder) == before


def test_folder_input_with_output(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    cols = good_columns(8)
    first = {k: v[:4] for k, v in cols.items()}
    second = {k: v[4:] for k, v in cols.items()}
    # written out of order: files are read in sorted path order
    write(folder / "b.parquet", second)
    write(folder / "a.parquet", first)
    (folder / "README.txt").write_text("not data")
    whole = write(tmp_path / "whole.parquet", cols)
    out = tmp_path / "out.parquet"
    result = rladv("compute", folder, "--estimator", "grpo", "-o", out, "-q")
    assert result.exit_code == 0, result.output
    ref = tmp_path / "ref.parquet"
    assert rladv("compute", whole, "--estimator", "grpo", "-o", ref, "-q").exit_code == 0
    got, want = read(out), read(ref)
    assert got.column_names == want.column_names
    assert got["note"].to_pylist() == [f"row-{i}" for i in range(8)]
    assert got.equals(want)
    assert listing(folder) == ["README.txt", "a.parquet", "b.parquet"]


def _rendered(report) -> str:
    import io

    from rich.console import Console

    from rladv_cli.report.model import render

    console = Console(file=io.StringIO(), width=2000, color_system=None)
    render(report, console)
    return console.file.getvalue()


def test_terminal_says_which_score_column_it_read_and_shows_rejection_per_batch(tmp_path):
    import rladv_cli

    table = read(SAMPLES / "multiturn.parquet")
    table = table.append_column("step", pa.array([i % 3 for i in range(table.num_rows)]))
    both = table.append_column("score", pa.array([9.0] * table.num_rows))  # would change every total if read
    _, report = rladv_cli.compute(both, estimator="grpo")
    text = _rendered(report)
    assert "scores from rm_scores; the dataset's score column is not read" in text and "rm_scores/row" in text
    _, alone = rladv_cli.compute(table, estimator="grpo")
    assert "is not read" not in _rendered(alone) and alone.scores == report.scores
    _, batched = rladv_cli.compute(table, estimator="grpo", batch_key="step", rollout_rs="token_k1",
                                   rollout_rs_threshold="0.5_2.0")
    lines = _rendered(batched).splitlines()
    header = next(i for i, line in enumerate(lines) if "rollout correction per batch" in line)
    assert lines[header + 1].split() == ["step=0", "step=1", "step=2"]
    row = next(line for line in lines[header:] if line.strip().startswith("rollout_rs_token_k1_masked_fraction"))
    per_batch = batched.rollout_rejection["batches"]
    assert row.split()[1:] == [f"{per_batch[b]['rollout_rs_token_k1_masked_fraction']:.4g}" for b in per_batch]
    assert "{" not in "\n".join(lines[header:])


def test_terminal_warnings_name_the_file_of_each_row_when_there_are_several(tmp_path):
    import io

    from rich.console import Console

    import rladv_cli
    from rladv_cli.report.model import render

    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.parquet", "b.parquet"):
        shutil.copy(SAMPLES / "groups.parquet", folder / name)

    def shown(paths) -> str:
        report = rladv_cli.compute_file(paths, estimator="grpo", output=str(tmp_path / "out.parquet"))
        console = Console(file=io.StringIO(), width=2000, color_system=None)
        render(report, console)
        return next(line for line in console.file.getvalue().splitlines() if line.startswith("│ all_equal_group"))

    a = folder / "a.parquet"
    assert f"│ {a}:7, {a}:15, {a}:20 " in shown([folder])
    assert "│ 7, 20, 34 " in shown([a])  # one file: its rows (the uids of a and b form shared groups above)


@pytest.mark.parametrize("spelling", ["same", "dotdot"])
def test_output_onto_input_refused(tmp_path, spelling):
    inp = copy_sample(tmp_path, "groups.parquet")
    (tmp_path / "d").mkdir()
    out = inp if spelling == "same" else tmp_path / "d" / ".." / "groups.parquet"
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out)
    assert_one_line_error(result, "input")
    assert_untouched(tmp_path, before, data)


def test_output_into_missing_folder(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "-o", tmp_path / "nope" / "out.parquet")
    assert_one_line_error(result, "nope")
    assert_untouched(tmp_path, before, data)


def test_report_into_missing_folder(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "--report", tmp_path / "nope" / "r.json")
    assert_one_line_error(result, "nope")
    assert_untouched(tmp_path, before, data)


@pytest.mark.parametrize("option", ["-o", "--report", "--html"])
def test_output_onto_a_fifo_is_refused(tmp_path, option):
    # the atomic rename would replace the FIFO (or, as root, a device such as /dev/full) with a regular file
    inp = copy_sample(tmp_path, "groups.parquet")
    fifo = tmp_path / "target"
    os.mkfifo(fifo)
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    args = ["-o", tmp_path / "out.parquet"] if option != "-o" else []
    result = rladv("compute", inp, "--estimator", "grpo", "-q", option, fifo, *args)
    assert_one_line_error(result, option, "not a regular file")
    assert_untouched(tmp_path, before, data)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_report_onto_input_refused(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "--report", inp)
    assert_one_line_error(result, "--report", "input")
    assert_untouched(tmp_path, before, data)


def test_report_same_path_as_output_refused(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    out = tmp_path / "same.parquet"
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out, "--report", out, "-q")
    assert_one_line_error(result, "same.parquet")
    assert_untouched(tmp_path, before, data)


def test_output_files_respect_umask(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    old = os.umask(0o022)
    try:
        result = rladv("compute", inp, "--estimator", "grpo", "--report", tmp_path / "r.json", "-q")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "groups.adv.parquet").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


def test_quiet_prints_nothing(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    result = rladv("compute", inp, "--estimator", "grpo", "--quiet")
    assert result.exit_code == 0
    assert result.output == ""
    assert (tmp_path / "groups.adv.parquet").exists()


# ---------------------------------------------------------------------------- 3. input errors (§1)
def _empty_row(row: int):
    def mutate(cols):
        for name, vals in cols.items():
            if isinstance(vals[row], list):
                vals[row] = []
    return mutate


def _scalar_score(mutate_score=None):
    def mutate(cols):
        cols["score"] = [float(r[-1]) for r in cols.pop("rm_scores")]
        if mutate_score:
            mutate_score(cols)
    return mutate


def _add(column: str, make, row: int, value):
    """Add ``column`` (built from the other columns) and set one row of it."""
    def mutate(cols):
        cols[column] = make(cols)
        cols[column][row] = value
    return mutate


def _loss_mask_without(row: int, position: int):
    """A ``loss_mask`` equal to ``response_mask`` but 0 at one of its 1 positions."""
    def mutate(cols):
        cols["loss_mask"] = [list(r) for r in cols["response_mask"]]
        assert cols["loss_mask"][row][position] == 1
        cols["loss_mask"][row][position] = 0
    return mutate


def _padded(mutate_att):
    def mutate(cols):
        cols["attention_mask"] = [[1] * len(r) for r in cols["response_mask"]]
        mutate_att(cols)
    return mutate


def _att_gap(cols):
    # row 3 (length 5): a 0 followed by 1s, i.e. padding that is not a suffix of the row
    cols["attention_mask"][3] = [1, 1, 0, 1, 1]
    cols["response_mask"][3] = [1, 1, 0, 1, 1]


# (id, mutation, estimator, extra options, row, column)
ROW_ERRORS = [
    ("null-response_mask", set_row("response_mask", 2, None), "grpo", [], 2, "response_mask"),
    ("null-rm_scores", set_row("rm_scores", 2, None), "grpo", [], 2, "rm_scores"),
    ("null-inside-list", set_token("rm_scores", 1, 0, None), "grpo", [], 1, "rm_scores"),
    ("len-rm_scores", extend_row("rm_scores", 2), "grpo", [], 2, "rm_scores"),
    ("len-values", extend_row("values", 3), "gae", [], 3, "values"),
    ("len-old_log_probs", extend_row("old_log_probs", 1), "grpo", [], 1, "old_log_probs"),
    ("mask-2", set_token("response_mask", 2, 1, 2), "grpo", [], 2, "response_mask"),
    ("nan-rm_scores", set_token("rm_scores", 1, 0, float("nan")), "grpo", [], 1, "rm_scores"),
    ("inf-rm_scores", set_token("rm_scores", 3, 2, float("inf")), "grpo", [], 3, "rm_scores"),
    ("nan-old_log_probs", set_token("old_log_probs", 2, 0, float("nan")), "grpo",
     ["--kl-coef", "0.1"], 2, "old_log_probs"),
    ("inf-old_log_probs", set_token("old_log_probs", 1, 1, float("-inf")), "grpo",
     ["--kl-coef", "0.1"], 1, "old_log_probs"),
    ("nan-values", set_token("values", 2, 0, float("nan")), "gae", [], 2, "values"),
    ("inf-values", set_token("values", 3, 4, float("inf")), "gae", [], 3, "values"),
    ("nan-score", _scalar_score(set_row("score", 2, float("nan"))), "grpo", [], 2, "score"),
    ("empty-list", _empty_row(1), "grpo", [], 1, None),
    ("attention-gap", _padded(_att_gap), "grpo", [], 3, "attention_mask"),
    ("response-on-padding", _padded(set_row("attention_mask", 1, [1, 1, 1, 0])), "grpo", [], 1, "response_mask"),
    ("attention_mask-2", _padded(set_token("attention_mask", 2, 0, 2)), "grpo", [], 2, "attention_mask"),
    ("loss_mask-2", _add("loss_mask", lambda c: [[1] * len(r) for r in c["response_mask"]], 3, [1, 1, 2, 1, 1]),
     "grpo", [], 3, "loss_mask"),
    ("response-outside-loss_mask", _loss_mask_without(3, 2), "grpo", [], 3, "response_mask"),
    ("null-uid", set_row("uid", 1, None), "grpo", [], 1, "uid"),
    ("null-batch-key", _add("step", lambda c: [7] * len(c["uid"]), 2, None), "grpo", ["--batch-key", "step"],
     2, "step"),
]

MISSING = [
    ("missing-values", drop("values"), "gae", [], "values"),
    ("missing-uid", drop("uid"), "grpo", [], "uid"),
    ("missing-ref_log_prob", drop("ref_log_prob"), "grpo", ["--kl-coef", "0.1"], "ref_log_prob"),
    ("missing-score", drop("rm_scores"), "grpo", [], None),
]


def _row_error_params():
    for name, *rest in ROW_ERRORS:
        yield pytest.param(*rest, id=name)


@pytest.mark.parametrize(("mutate", "estimator", "extra", "row", "column"), list(_row_error_params()))
@pytest.mark.parametrize("chunk_rows", [1024, 1])
def test_row_error(tmp_path, mutate, estimator, extra, row, column, chunk_rows):
    bad = write(tmp_path / "bad.parquet", mutated(good_columns(), mutate))
    before, data = listing(tmp_path), {bad: bad.read_bytes()}
    result = rladv("compute", bad, "--estimator", estimator, "--chunk-rows", chunk_rows,
                   "--report", tmp_path / "r.json", *extra)
    line = assert_one_line_error(result, str(bad), row=row, column=column)
    if column is None:  # an empty list: every list column has length 0, any of them may be named
        assert "column " in line
    assert_untouched(tmp_path, before, data)


@pytest.mark.parametrize(("mutate", "estimator", "extra", "column"),
                         [r[1:] for r in MISSING], ids=[r[0] for r in MISSING])
def test_missing_column(tmp_path, mutate, estimator, extra, column):
    bad = write(tmp_path / "bad.parquet", mutated(good_columns(), mutate))
    before, data = listing(tmp_path), {bad: bad.read_bytes()}
    result = rladv("compute", bad, "--estimator", estimator, *extra)
    line = assert_one_line_error(result, str(bad), column=column)
    if column is None:
        assert "score" in line and "rm_scores" in line
    assert_untouched(tmp_path, before, data)


def test_row_error_in_second_file_names_it_with_file_row(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "a.parquet", good_columns())
    bad = write(folder / "b.parquet", mutated(good_columns(), set_token("response_mask", 1, 0, 3)))
    data = {p: p.read_bytes() for p in folder.iterdir()}
    before = listing(tmp_path)
    result = rladv("compute", folder, "--estimator", "grpo", "-o", tmp_path / "out.parquet", "--chunk-rows", 2)
    line = assert_one_line_error(result, str(bad), row=1, column="response_mask")
    assert "a.parquet" not in line
    assert_untouched(tmp_path, before, data)
    assert_untouched(folder, ["a.parquet", "b.parquet"], data)


def test_not_parquet(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("uid,score\na,1\n")
    before, data = listing(tmp_path), {bad: bad.read_bytes()}
    result = rladv("compute", bad, "--estimator", "grpo")
    assert_one_line_error(result, str(bad))
    assert_untouched(tmp_path, before, data)


def test_missing_input(tmp_path):
    result = rladv("compute", tmp_path / "absent.parquet", "--estimator", "grpo")
    assert_one_line_error(result, "absent.parquet")
    assert listing(tmp_path) == []


def test_folder_without_parquet(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    result = rladv("compute", folder, "--estimator", "grpo", "-o", tmp_path / "out.parquet")
    assert_one_line_error(result, str(folder))
    assert listing(tmp_path) == ["empty"] and listing(folder) == ["notes.txt"]


@pytest.mark.parametrize("kind", ["names", "types"])
def test_files_with_different_schemas(tmp_path, kind):
    a = write(tmp_path / "a.parquet", good_columns())
    if kind == "names":
        b = write(tmp_path / "b.parquet", mutated(good_columns(), drop("note")))
    else:
        b = write(tmp_path / "b.parquet", good_columns(), types={"rm_scores": pa.list_(pa.float64())})
    before, data = listing(tmp_path), {a: a.read_bytes(), b: b.read_bytes()}
    result = rladv("compute", a, b, "--estimator", "grpo", "-o", tmp_path / "out.parquet")
    assert_one_line_error(result, str(b), column="rm_scores" if kind == "types" else None)
    assert_untouched(tmp_path, before, data)


def test_file_without_rows(tmp_path):
    good = write(tmp_path / "good.parquet", good_columns())
    bad = tmp_path / "bad.parquet"
    pq.write_table(read(good).slice(0, 0), bad)
    good.unlink()
    before, data = listing(tmp_path), {bad: bad.read_bytes()}
    result = rladv("compute", bad, "--estimator", "grpo")
    assert_one_line_error(result, str(bad))
    assert_untouched(tmp_path, before, data)


# ------------------------------------------------------------------------------- 4. option errors
def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


OPTION_ERRORS = [
    pytest.param(["--estimator", "nope"], "nope", id="unknown-estimator"),
    pytest.param(["--estimator", "grpo", "--gamma", "abc"], "--gamma", id="gamma-not-a-number"),
    pytest.param(["--estimator", "grpo", "--gamma", "1.5"], "--gamma", id="gamma-1.5"),
    pytest.param(["--estimator", "grpo", "--lam", "-0.1"], "--lam", id="lam-negative"),
    pytest.param(["--estimator", "grpo", "--chunk-rows", "0"], "--chunk-rows", id="chunk-rows-0"),
    pytest.param(["--estimator", "grpo", "--kl-penalty", "full"], "--kl-penalty", id="kl-penalty-full"),
    pytest.param(["--estimator", "grpo", "--kl-coef", "0.1", "--kl-penalty", "full"], "--kl-penalty",
                 id="kl-penalty-full-with-coef"),
    pytest.param(["--estimator", "grpo", "--rollout-rs", "token_k1"], "--rollout-rs", id="rs-without-threshold"),
    pytest.param(["--estimator", "grpo", "--device", "cuda"], "cuda", id="device-cuda",
                 marks=pytest.mark.skipif(_cuda_available(), reason="a CUDA device is present")),
]


@pytest.mark.parametrize(("args", "named"), OPTION_ERRORS)
def test_option_error(tmp_path, args, named):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, *args, "--report", tmp_path / "r.json")
    assert_one_line_error(result, named)
    assert_untouched(tmp_path, before, data)


# -------------------------------------------------------------------------- 5. computation errors
def test_reinforce_plus_plus_single_valid_token(tmp_path):
    inp = write(tmp_path / "one.parquet", {
        "response_mask": [[1, 0, 0], [0, 0]],
        "rm_scores": [[0.0, 0.0, 1.0], [0.0, 1.0]],
    })
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "reinforce_plus_plus", "--report", tmp_path / "r.json")
    assert_one_line_error(result, "reinforce_plus_plus")
    assert_untouched(tmp_path, before, data)


def test_gae_single_valid_token(tmp_path):
    inp = write(tmp_path / "one.parquet", {
        "response_mask": [[1]], "rm_scores": [[1.0]], "values": [[0.5]],
    })
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "gae")
    assert_one_line_error(result, "gae")
    assert_untouched(tmp_path, before, data)


# ------------------------------------------------------------------------- 6. estimators / validate
def test_estimators_table_wide_terminal():
    result = runner.invoke(app, ["estimators"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ESTIMATOR_NAMES:
        assert re.search(rf"\b{name}\b", result.stdout), name


def test_estimators_table_80_columns():
    result = runner.invoke(app, ["estimators"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for name in ESTIMATOR_NAMES:
        assert re.search(rf"\b{name}\b", result.stdout), name


def test_estimators_json():
    result = rladv("estimators", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["name"] for r in rows} == ESTIMATOR_NAMES
    for r in rows:
        assert {"name", "needs", "critic", "groups", "baseline", "observation_credit"} <= set(r)
        assert "response_mask" in r["needs"]
        assert r["groups"] == ("uid" in r["needs"])
    by_name = {r["name"]: r for r in rows}
    assert by_name["gae"]["critic"] is True and "values" in by_name["gae"]["needs"]
    assert by_name["grpo"]["critic"] is False and by_name["grpo"]["groups"] is True
    assert by_name["reinforce_plus_plus"]["groups"] is False


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


# ------------------------------------------------------------------------ 7. batch key and KL report
def test_batch_key_step(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "grpo", "--batch-key", "step", "--report", report, "-q")
    assert result.exit_code == 0, result.output
    dst = check_output(inp, tmp_path / "groups.adv.parquet")
    src = read(inp)
    steps = sorted(set(src["step"].to_pylist()))
    data = json.loads(report.read_text())
    assert data["groups"]["batches"] == len(steps)
    assert data["config"]["batch_key"] == "step"
    # each step alone gives the same advantages as that step's rows of the batched run
    for step in steps:
        idx = [i for i, s in enumerate(src["step"].to_pylist()) if s == step]
        part = tmp_path / f"step{step}.parquet"
        pq.write_table(src.take(idx), part)
        r = rladv("compute", part, "--estimator", "grpo", "-q")
        assert r.exit_code == 0, r.output
        alone = read(tmp_path / f"step{step}.adv.parquet")["advantages"].to_pylist()
        assert alone == [dst["advantages"][i].as_py() for i in idx]


def test_batch_key_missing_column(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "--batch-key", "epoch")
    assert_one_line_error(result, str(inp), column="epoch")
    assert_untouched(tmp_path, before, data)


def test_kl_report_on_multiturn(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "grpo", "--kl-coef", "0.05", "--kl-penalty", "low_var_kl",
                   "--report", report, "-q")
    assert result.exit_code == 0, result.output
    dst = check_output(inp, tmp_path / "multiturn.adv.parquet")
    data = json.loads(report.read_text())
    kl = data["kl"]
    assert isinstance(kl["mean"], float) and math.isfinite(kl["mean"])
    assert kl["coef"] == 0.05
    assert kl["enabled"] is True and kl["penalty"] == "low_var_kl"
    assert data["config"]["kl_coef"] == 0.05
    # shaping changed the rewards: token_level_rewards differ from rm_scores on actor tokens
    src = read(inp)
    assert dst["token_level_rewards"].to_pylist() != src["rm_scores"].to_pylist()
    # no shaping: the report says so and rewards are the scores
    r2 = tmp_path / "r2.json"
    assert rladv("compute", inp, "--estimator", "grpo", "-o", tmp_path / "o2.parquet", "--report", r2,
                 "-q").exit_code == 0
    assert json.loads(r2.read_text())["kl"]["enabled"] is False
    assert read(tmp_path / "o2.parquet")["token_level_rewards"].to_pylist() == src["rm_scores"].to_pylist()


@pytest.mark.parametrize("estimator", [
    "grpo", "rloo", "reinforce_plus_plus_baseline",
    "gae",
    "reinforce_plus_plus",
])
def test_chunk_rows_byte_identical(tmp_path, estimator):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    outs = []
    for n in (1, 7, 1024):
        out = tmp_path / f"o{n}.parquet"
        r = rladv("compute", inp, "--estimator", estimator, "--chunk-rows", n, "-o", out, "-q")
        assert r.exit_code == 0, r.output
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


# ---------------------------------------------------------------------------- 8. no torch on import
def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_import_cli_does_not_import_torch():
    p = _py("import rladv_cli.cli, sys; assert 'torch' not in sys.modules, 'torch imported'")
    assert p.returncode == 0, p.stderr


def test_public_names_resolve_to_what_the_cli_calls_without_torch():
    """Every name of ``rladv_cli.__all__`` imports, none pulls in torch, and the views are the CLI's own."""
    p = _py("import rladv_cli, sys\n"
            "for name in rladv_cli.__all__: getattr(rladv_cli, name)\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "from rladv_cli.diagnose import views\n"
            "assert (rladv_cli.row_view, rladv_cli.group_view) == (views.row_view, views.group_view)\n")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("command", ["compute", "explain", "inspect"])
def test_help_groups_the_settings_in_panels(command):
    """Each command that computes shows compute's settings in the same panels, --estimator as NAME."""
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "120"}, terminal_width=120)
    assert r.exit_code == 0, r.output
    panels = ["Estimator settings", "Reward shaping", "Rollout correction"]
    places = [r.output.find(p) for p in panels]
    assert -1 not in places and places == sorted(places), places
    assert "--rollout-rs-threshold" in r.output[places[2]:] and "--kl-coef" in r.output[places[1]:places[2]]
    assert "--estimator" in r.output and "gae|grpo|" not in r.output


def test_help_subprocess():
    p = subprocess.run(rladv_command() + ["--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "compute" in p.stdout and "validate" in p.stdout and "estimators" in p.stdout
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("module", ["rladv_cli.cli", "typer"])
def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback(module):
    """SIGINT delivered inside the start-up imports (here: as ``module`` is imported, deterministically) exits
    130 and prints nothing; it used to print a KeyboardInterrupt traceback from inside the import."""
    code = ("import importlib.abc, os, signal, sys\n"
            "class Interrupt(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            f"        if name == {module!r}:\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "sys.argv = ['rladv', 'estimators']\n"
            "from rladv_cli.__main__ import main\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (130, "", "")


def test_the_executable_leaves_with_the_commands_code_and_flushed_output(tmp_path):
    """``main`` skips the interpreter's teardown (``os._exit``): the exit code, the piped stdout, the one-line
    error and the written files must be what a normal exit gives."""
    cmd = [sys.executable, "-m", "rladv_cli"]
    ok = subprocess.run(cmd + ["estimators", "--json"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and len(json.loads(ok.stdout)) > 10
    bad = subprocess.run(cmd + ["compute", str(tmp_path / "missing.parquet"), "--estimator", "grpo"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.parquet" in bad.stderr
    usage = subprocess.run(cmd + ["compute", "--estimator", "nope", "x.parquet"], capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("Error: ")
    inp = copy_sample(tmp_path, "groups.parquet")
    run = subprocess.run(cmd + ["compute", str(inp), "--estimator", "grpo", "-o", str(tmp_path / "o.parquet"),
                                "--report", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "grpo" in run.stdout  # the summary, printed before the exit
    assert json.loads((tmp_path / "r.json").read_text())["config"]["estimator"] == "grpo"
    assert read(tmp_path / "o.parquet").num_rows == read(inp).num_rows


@pytest.mark.parametrize("given", [{}, {"ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "2"}])
def test_the_executable_picks_arrows_allocator_and_one_blas_thread_unless_told(tmp_path, given):
    """``main`` runs ``compute`` on jemalloc (Linux) and one OpenBLAS thread; settings in the environment win."""
    code = (
        "import atexit, os, sys\n"
        "def seen():\n"
        "    import pyarrow\n"
        "    print(pyarrow.default_memory_pool().backend_name, os.environ['OPENBLAS_NUM_THREADS'])\n"
        "atexit.register(seen)\n"
        "sys.argv[0] = 'rladv'\n"
        "from rladv_cli.cli import main\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS")}
    inp = copy_sample(tmp_path, "groups.parquet")
    p = subprocess.run([sys.executable, "-c", code, "compute", str(inp), "--estimator", "grpo", "-q",
                        "-o", str(tmp_path / "o.parquet")], capture_output=True, text=True, timeout=120,
                       env={**env, **given})
    assert p.returncode == 0, p.stderr
    want = given.get("ARROW_DEFAULT_MEMORY_POOL", "jemalloc" if sys.platform.startswith("linux") else None)
    pool, threads = p.stdout.split()
    assert threads == given.get("OPENBLAS_NUM_THREADS", "1") and (want is None or pool == want)


def test_validate_and_estimators_do_not_import_torch():
    code = (
        "import sys\n"
        "from rladv_cli.cli import app\n"
        "for argv in (['validate', sys.argv[1], '--estimator', 'grpo'], ['estimators', '--json']):\n"
        "    try:\n"
        "        app(argv, prog_name='rladv')\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(SAMPLES / "groups.parquet")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout


@pytest.mark.parametrize("flags", [["--estimator", "grpo"], ["--estimator", "gae", "--kl-coef", "0.1"],
                                   ["--estimator", "reinforce_plus_plus", "--batch-key", "uid"]])
def test_compute_does_not_import_pandas(tmp_path, flags):
    """pyarrow imports pandas on its first ``to_numpy``/``pa.array`` where pandas is installed (the ray extra
    brings it): a third of a second of start-up that ``columns.numpy_of``/``arrow_of`` avoid."""
    pytest.importorskip("pandas")
    code = (
        "import sys\n"
        "from rladv_cli.cli import app\n"
        "try:\n"
        "    app(sys.argv[1:], prog_name='rladv')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    args = ["compute", str(SAMPLES / "multiturn.parquet"), "-o", str(tmp_path / "o.parquet"), "-q",
            "--report", str(tmp_path / "r.json"), *flags]
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr + p.stdout


# ------------------------------------------------------------------------- --config (a verl trainer YAML)
def test_config_yaml_sets_everything_and_typed_flags_win(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    cfg = tmp_path / "algo.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: rloo\n  use_kl_in_reward: true\n  kl_penalty: low_var_kl\n"
                   "  kl_ctrl:\n    kl_coef: 0.01\n  use_pf_ppo: false\n")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--config", cfg, "-o", tmp_path / "a.parquet", "--report", report)
    assert result.exit_code == 0, result.output
    rep = json.loads(report.read_text())
    assert (rep["config"]["estimator"], rep["config"]["kl_coef"], rep["config"]["kl_penalty"]) == ("rloo", 0.01, "low_var_kl")
    assert rep["config"]["verl_config"]["ignored"] == ["algorithm.use_pf_ppo"]
    result = rladv("compute", inp, "--config", cfg, "--estimator", "grpo", "--kl-coef", "0.05", "--gamma", "1.0",
                   "-o", tmp_path / "b.parquet", "--report", report)
    assert result.exit_code == 0, result.output
    rep = json.loads(report.read_text())
    assert (rep["config"]["estimator"], rep["config"]["kl_coef"], rep["config"]["kl_penalty"]) == ("grpo", 0.05, "low_var_kl")
    assert rep["config"]["verl_config"]["overridden_by_flags"] == ["estimator", "kl_coef"]


def test_config_yaml_errors_are_one_line(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    cfg = tmp_path / "algo.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n  gama: 0.9\n")
    result = rladv("compute", inp, "--config", cfg)
    assert_one_line_error(result, str(cfg))
    assert "gamma" in result.stderr
    result = rladv("compute", inp)
    assert_one_line_error(result, "--estimator")


# ------------------------------------------------------------------------- rladv inspect
def test_inspect_json_is_contract_section_5_and_strict_fails_on_a_failing_check(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    result = rladv("inspect", inp, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"rows", "tokens", "groups", "columns", "checks"} <= set(data)
    codes = {c["code"]: c["status"] for c in data["checks"]}
    assert codes["singleton_group"] == "warn" and codes["all_equal_group"] == "warn"
    bad = tmp_path / "adv.parquet"
    t = read(inp)
    advantages = pa.array([[1.0] * len(m) for m in t["response_mask"].to_pylist()], pa.list_(pa.float32()))
    masks = pa.array([[0] + m[1:] for m in t["response_mask"].to_pylist()], pa.list_(pa.int8()))
    pq.write_table(t.set_column(t.schema.get_field_index("response_mask"), "response_mask", masks)
                   .append_column("advantages", advantages), bad)
    assert rladv("inspect", bad).exit_code == 0
    result = rladv("inspect", bad, "--strict", "--json")
    assert result.exit_code == 1
    assert {c["code"]: c["status"] for c in json.loads(result.stdout)["checks"]}["advantage_on_masked_position"] == "fail"


def test_inspect_row_and_group_views(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    result = rladv("inspect", inp, "--row", "3", "--estimator", "gae")
    assert result.exit_code == 0, result.output
    uid = read(inp)["uid"][0].as_py()
    result = rladv("inspect", inp, "--uid", uid, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["uid"] == uid
    assert_one_line_error(rladv("inspect", tmp_path / "missing.parquet"), "missing.parquet")


def test_inspect_does_not_import_torch(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom rladv_cli.cli import app\n"
            f"r = CliRunner().invoke(app, ['inspect', {str(inp)!r}, '--json'])\n"
            "assert r.exit_code == 0, r.output\nassert 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


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


def test_inspect_export_writes_a_reproducer_that_reproduces(tmp_path, monkeypatch):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    out_dir = tmp_path / "new" / "repro"  # created, with its parent
    uid = read(inp)["uid"][5].as_py()
    result = rladv("inspect", inp, "--uid", uid, "--export", out_dir, "--estimator", "rloo", "--kl-coef", "0.05")
    assert result.exit_code == 0, result.output
    command = (out_dir / "command.txt").read_text().splitlines()[0].split()
    assert command[:3] == ["rladv", "compute", "group.parquet"]
    moved = tmp_path / "moved"
    out_dir.rename(moved)  # the paths are relative to the folder: it can travel
    monkeypatch.chdir(moved)
    assert rladv(*command[1:], "-q").exit_code == 0
    out_dir = moved
    full = tmp_path / "full.parquet"
    assert rladv("compute", inp, "--estimator", "rloo", "--kl-coef", "0.05", "-o", full, "-q").exit_code == 0
    whole = read(full).filter(pa.compute.equal(read(full)["uid"], uid))
    group = read(out_dir / "group.adv.parquet")
    assert group.num_rows == whole.num_rows == 4
    assert group["advantages"].equals(whole["advantages"])  # to the bit: --pad-width when the batch is wider
    assert_one_line_error(rladv("inspect", inp, "--export", out_dir), "--export needs --uid")
    assert_one_line_error(rladv("inspect", inp, "--row", "3", "--uid", uid), "--row shows one trajectory and --uid one group")


def _rows_whose_padded_sums_round_otherwise(rng, width: int, rows: int) -> list[list[float]]:
    """``rows`` float32 rows (lengths 20-60) totalling 1 up to rounding (a near-tied group, where one ulp of a
    total moves the advantages), whose padded float32 sum at their own length differs from the sum padded to
    ``width``: torch's vectorised cascade rounds by the padded width (searched, so that the rows round
    otherwise on whatever CPU runs the test)."""
    import torch

    found = []
    while len(found) < rows:
        v = rng.normal(size=int(rng.integers(20, 60)))
        v[-1] = 1.0 - v[:-1].sum()
        x = torch.from_numpy(v.astype(np.float32))
        if x.unsqueeze(0).sum(-1).item() != torch.nn.functional.pad(x, (0, width - x.numel())).unsqueeze(0).sum(-1).item():
            found.append(x.tolist())
    return found


def test_export_carries_the_batch_pad_width_and_reproduces_to_the_bit(tmp_path, monkeypatch):
    """A group of short rows in a batch with a 500-position response: alone, its totals would be summed at its
    own width and round otherwise; the exported command carries --pad-width 500 and gives the full run's bits."""
    rng = np.random.default_rng(3)
    short = _rows_whose_padded_sums_round_otherwise(rng, 500, 3)
    inp = write(tmp_path / "batch.parquet", {
        "uid": ["g", "g", "g", "long", "long"],
        "response_mask": [[1] * len(r) for r in short] + [[1] * 500, [1] * 7],
        "rm_scores": short + [[0.0] * 499 + [1.0], [0.0] * 6 + [0.5]],
    })
    settings = ["--estimator", "grpo"]
    assert rladv("inspect", inp, "--uid", "g", "--export", tmp_path / "repro", *settings).exit_code == 0
    command = (tmp_path / "repro" / "command.txt").read_text().splitlines()[0].split()
    assert command[command.index("--pad-width") + 1] == "500"
    monkeypatch.chdir(tmp_path / "repro")
    assert rladv(*command[1:], "-q").exit_code == 0
    without = [part for i, part in enumerate(command) if "--pad-width" not in command[max(i - 1, 0):i + 1]]
    assert rladv(*without[1:], "-o", "alone.parquet", "-q").exit_code == 0
    assert rladv("compute", inp, *settings, "-o", tmp_path / "full.parquet", "-q").exit_code == 0
    full = read(tmp_path / "full.parquet").slice(0, 3)
    assert read(tmp_path / "repro" / "group.adv.parquet")["advantages"].equals(full["advantages"])
    assert not read(tmp_path / "repro" / "alone.parquet")["advantages"].equals(full["advantages"])
    assert rladv("compute", inp, *settings, "--pad-width", "0").exit_code == 2


def test_html_report_is_written_with_the_output_and_never_onto_it(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    html = tmp_path / "r.html"
    result = rladv("compute", inp, "--estimator", "grpo", "--kl-coef", "0.05", "--html", html, "-q")
    assert result.exit_code == 0, result.output
    text = html.read_text()
    assert "rladv run report" in text and "score_on_masked_position" in text
    before = listing(tmp_path)
    assert_one_line_error(rladv("compute", inp, "--estimator", "grpo", "-o", html, "--html", html), "different files")
    assert listing(tmp_path) == before


def test_inspect_row_and_uid_on_semantics_examples(tmp_path):
    gae = write(tmp_path / "gae.parquet", {"response_mask": [[1, 1, 1]], "rm_scores": [[0, 0, 1.0]],
                                           "values": [[0.2, 0.3, 0.4]]})
    result = rladv("inspect", gae, "--row", "0", "--estimator", "gae", "--json")
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    # §7.1 with lam = 1.0 (the inspect default): A_raw = [0.8, 0.7, 0.6], returns = A_raw + V = [1, 1, 1]
    np.testing.assert_allclose(view["returns"], [1.0, 1.0, 1.0], atol=1e-6)
    grp = write(tmp_path / "grp.parquet", {"uid": ["a", "a", "a"], "response_mask": [[1], [1], [1]],
                                           "rm_scores": [[1.0], [0.0], [0.5]]})
    result = rladv("inspect", grp, "--uid", "a", "--json")
    assert result.exit_code == 0, result.output
    members = json.loads(result.stdout)["members"]
    np.testing.assert_allclose([m["advantage"] for m in members], [0.999998, -0.999998, 0.0], atol=1e-6)


@pytest.mark.parametrize("settings", [
    ["--estimator", "gae", "--gamma", "0.99", "--lam", "0.9", "--kl-coef", "0.05", "--kl-penalty", "k3"],
    ["--estimator", "grpo", "--no-norm-adv-by-std", "--overlong-buffer-len", "8", "--max-resp-len", "40"],
    ["--estimator", "reinforce_plus_plus", "--rpp-mask-mode", "carry", "--gamma", "0.9", "--tool-reward-coef", "0.5"],
])
def test_inspect_row_and_uid_take_every_setting_of_compute(tmp_path, settings):
    """inspect --row/--uid show the advantages compute writes with the same settings, not the defaults'."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    full = tmp_path / "full.parquet"
    assert rladv("compute", inp, *settings, "-o", full, "-q").exit_code == 0
    out = read(full)
    default = tmp_path / "default.parquet"
    assert rladv("compute", inp, "--estimator", settings[1], "-o", default, "-q").exit_code == 0
    assert read(default)["advantages"][7] != out["advantages"][7]  # the settings matter on these rows
    view = json.loads(rladv("inspect", inp, "--row", "7", *settings, "--json").stdout)
    assert view["advantage"] == out["advantages"][7].as_py()
    uid = out["uid"][7].as_py()
    members = json.loads(rladv("inspect", inp, "--uid", uid, *settings, "--json").stdout)["members"]
    rows = {m["dataset_row"]: m for m in members}
    for r, m in rows.items():
        valid = [a for a, v in zip(out["advantages"][r].as_py(), out["response_mask"][r].as_py()) if v]
        assert (m["advantage_min"], m["advantage_max"]) == ((min(valid), max(valid)) if valid else (None, None))


def test_inspect_uid_reads_a_verl_config(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    yaml = tmp_path / "ppo.yaml"
    yaml.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    uid = read(inp)["uid"][0].as_py()
    view = json.loads(rladv("inspect", inp, "--uid", uid, "--config", yaml, "--json").stdout)
    typed = json.loads(rladv("inspect", inp, "--uid", uid, "--no-norm-adv-by-std", "--json").stdout)
    default = json.loads(rladv("inspect", inp, "--uid", uid, "--json").stdout)
    advantages = lambda v: [m["advantage"] for m in v["members"]]  # noqa: E731
    assert advantages(view) == advantages(typed) != advantages(default)  # Dr.GRPO: R - mean


def test_inspect_refuses_settings_it_would_not_use(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    uid = read(inp)["uid"][0].as_py()
    assert_one_line_error(rladv("inspect", inp, "--gamma", "0.9"), "--gamma: the checklist takes only --kl-coef")
    assert_one_line_error(rladv("inspect", inp, "--row", "3", "--lam", "0.9"), "--lam: without --estimator, --row")
    assert_one_line_error(rladv("inspect", inp, "--uid", uid, "--lam", "0.9"),
                          "--lam has no effect with --estimator grpo")
    assert rladv("inspect", inp, "--kl-coef", "0.1", "--kl-penalty", "k3").exit_code == 0


# ------------------------------------------------------------------------ audit: one-line errors, no leftovers
def _ascii_digits(text: str) -> str:
    return text.translate({0xFF10 + d: str(d) for d in range(10)} | {0xFF0E: "."})


@pytest.mark.parametrize("t", [pa.int64(), pa.uint64()])
def test_integer_scores_beyond_2_53_are_read_as_verl_reads_them(tmp_path, t):
    """Arrow refuses to cast an integer above 2**53 to float64 exactly; the checks used to end in a traceback
    (ArrowInvalid) in compute, validate, inspect and explain. Every integer is a finite float32, as verl's
    float32 reward tensor would hold it: the file is accepted."""
    cols = good_columns()
    del cols["rm_scores"]
    cols["score"] = [2**62, 2**62 + 1, 2**63 - 1 if t == pa.int64() else 2**64 - 1, 7]
    inp = write(tmp_path / "int.parquet", cols, types={"score": t})
    for args in (["compute", inp, "--estimator", "grpo", "-q", "-o", tmp_path / "o.parquet"], ["validate", inp],
                 ["inspect", inp, "--json"], ["explain", inp, "--estimator", "grpo", "--row", "2"]):
        result = rladv(*args)
        assert result.exit_code == 0, (args[0], result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert read(tmp_path / "o.parquet")["score"].equals(read(inp)["score"])


@pytest.mark.parametrize(("args", "named"), [
    pytest.param(["compute", "--estimator", "grpo", "--batch-key", ""], "--batch-key", id="batch-key-empty"),
    pytest.param(["compute", "--estimator", "grpo", "--batch-key", " "], "--batch-key", id="batch-key-blank"),
    pytest.param(["offpolicy", "--rollout-rs", "token_k1", "--thresholds", "2", "--chunk-rows", "0"], "--chunk-rows",
                 id="offpolicy-chunk-rows-0"),
    pytest.param(["offpolicy", "--rollout-rs", "token_k1", "--thresholds", "2", "--chunk-rows", "-1"], "--chunk-rows",
                 id="offpolicy-chunk-rows-negative"),
    pytest.param(["inspect", "--chunk-rows", "0"], "--chunk-rows", id="inspect-chunk-rows-0"),
    pytest.param(["inspect", "--kl-coef", "nan"], "--kl-coef", id="inspect-kl-coef-nan"),
])
def test_options_that_ended_in_a_traceback(tmp_path, args, named):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv(args[0], inp, *args[1:], *(["-o", tmp_path / "o.parquet"] if args[0] == "compute" else []))
    assert result.exit_code == 2
    assert_one_line_error(result, named)
    assert_untouched(tmp_path, before, data)


def test_offpolicy_on_a_file_without_rows(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(read(SAMPLES / "multiturn.parquet").slice(0, 0), empty)
    result = rladv("offpolicy", empty, "--rollout-rs", "token_k1", "--thresholds", "2")
    assert result.exit_code == 2
    assert "holds no rows" in assert_one_line_error(result, str(empty))


@pytest.mark.parametrize("command", ["compute", "validate", "inspect", "offpolicy", "explain"])
def test_an_empty_input_path_is_not_the_current_folder(tmp_path, monkeypatch, command):
    """``Path("")`` is ``.``: ``rladv compute ""`` read the current folder's *.parquet."""
    copy_sample(tmp_path, "multiturn.parquet")
    monkeypatch.chdir(tmp_path)
    extra = {"compute": ["--estimator", "grpo", "-o", "o.parquet"], "explain": ["--estimator", "grpo", "--row", "0"],
             "offpolicy": ["--rollout-rs", "token_k1", "--thresholds", "2"]}.get(command, [])
    result = rladv(command, "", *extra)
    assert result.exit_code == 2
    assert "empty path" in assert_one_line_error(result)
    assert listing(tmp_path) == ["multiturn.parquet"]


@pytest.mark.parametrize("option", ["-o", "--report", "--html", "--config"])
def test_an_empty_output_or_config_path_is_refused(tmp_path, option):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", *(["-o", tmp_path / "o.parquet"] if option != "-o" else []),
                   option, "")
    assert result.exit_code == 2
    assert "empty path" in assert_one_line_error(result, option)
    assert_untouched(tmp_path, before, data)


# verl 0.9.1 parses thresholds with float() after splitting a band at its first '_' (SEMANTICS §5.3)
@pytest.mark.parametrize(("flags", "named"), [
    pytest.param(["--rollout-rs", "token_k1", "--rollout-rs-threshold", "0.5_1_2"], "'1_2'", id="rs-k1-band"),
    pytest.param(["--rollout-rs", "seq_sum_k1", "--rollout-rs-threshold", "1_0"], None, id="rs-k1-band-zero"),
    pytest.param(["--rollout-rs", "token_k1,token_k2", "--rollout-rs-threshold", "0.5_2,1_000"], "token_k2",
                 id="rs-k2-underscore"),
    pytest.param(["--rollout-is", "token", "--rollout-is-threshold", "0.5_1_2"], "'1_2'", id="is-band"),
])
def test_thresholds_that_verl_would_misread_are_refused(tmp_path, flags, named):
    """``0.5_1_2`` was silently the band (0.5, 12.0), as verl reads it (float('1_2') is 12.0)."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", *flags, "-o", tmp_path / "o.parquet",
                   "--report", tmp_path / "r.json")
    assert result.exit_code == 2
    line = assert_one_line_error(result, flags[2], *([named] if named else []))
    assert_untouched(tmp_path, before, data)
    if "1_2" in flags[3]:
        assert "12.0" in line  # what verl would have read
        sweep = rladv("offpolicy", inp, "--rollout-rs", "token_k1", "--thresholds", "0.5_1_2")
        assert sweep.exit_code == 2 and "'1_2'" in assert_one_line_error(sweep, "0.5_1_2")


@pytest.mark.parametrize(("flags", "same_as"), [
    (["--rollout-rs", "token_k2", "--rollout-rs-threshold", "\uff12.\uff10"], None),
    (["--rollout-rs", "token_k1", "--rollout-rs-threshold", " 0.5_2.0 , "], None),
    (["--rollout-is", "token", "--rollout-is-threshold", "\uff10.\uff15_\uff12"], None),
])
def test_thresholds_verl_reads_are_read_the_same(tmp_path, flags, same_as):
    """Non-ASCII digits and blanks read as float() (and verl) reads them: the same run as the ASCII spelling."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    results = []
    for i, text in enumerate([flags[3], _ascii_digits(flags[3]).strip().rstrip(",").strip()]):
        out, report = tmp_path / f"o{i}.parquet", tmp_path / f"r{i}.json"
        result = rladv("compute", inp, "--estimator", "grpo", *flags[:3], text, "-q", "-o", out, "--report", report)
        assert result.exit_code == 0, result.output
        rep = json.loads(report.read_text())
        results.append((read(out), rep["rollout_rejection"]))
    assert results[0][0].equals(results[1][0]) and results[0][1] == results[1][1]


def test_a_file_name_with_a_newline_stays_one_line(tmp_path):
    cols = good_columns()
    cols["response_mask"][1][0] = 2
    inp = write(tmp_path / "bad\nname.parquet", cols)
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    line = assert_one_line_error(result, repr(str(inp)), row=1, column="response_mask")
    assert "\\n" in line
    assert_untouched(tmp_path, before, data)
    result = rladv("validate", inp)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 2  # the summary and one kind


def test_a_fifo_is_not_called_missing(tmp_path):
    fifo = tmp_path / "f.parquet"
    os.mkfifo(fifo)
    result = rladv("compute", fifo, "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    line = assert_one_line_error(result, str(fifo))
    assert "FIFO" in line and "not a regular file" in line and "no such" not in line
    assert listing(tmp_path) == ["f.parquet"]


def test_config_messages_name_the_file_and_key(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    bad = tmp_path / "c1.yaml"
    bad.write_text("algorithm:\n  adv_estimator: grpo\n  rollout_correction:\n    rollout_rs: token_k1\n"
                   "    rollout_rs_threshold: abc\n")
    result = rladv("compute", inp, "--config", bad, "-o", tmp_path / "o.parquet")
    line = assert_one_line_error(result, str(bad), "algorithm.rollout_correction.rollout_rs_threshold", "'abc'")
    assert "--rollout-rs-threshold" not in line
    empty = tmp_path / "c2.yaml"
    empty.write_text("algorithm:\n")
    result = rladv("compute", inp, "--config", empty, "-o", tmp_path / "o.parquet")
    line = assert_one_line_error(result, str(empty), "adv_estimator", "--estimator")
    assert "Field required" not in line
    assert sorted(listing(tmp_path)) == ["c1.yaml", "c2.yaml", "multiturn.parquet"]


INERT = [
    pytest.param(["--rollout-is-threshold", "3"], "--rollout-is-threshold", id="is-threshold-without-is"),
    pytest.param(["--rollout-is-batch-normalize"], "--rollout-is-batch-normalize", id="is-normalize-without-is"),
    pytest.param(["--overlong-penalty-factor", "2"], "--overlong-penalty-factor", id="penalty-without-buffer"),
    pytest.param(["--max-resp-len", "8"], "--max-resp-len", id="max-resp-len-without-buffer"),
    pytest.param(["--kl-ctrl", "adaptive"], "--kl-ctrl", id="adaptive-without-kl-coef"),
    pytest.param(["--kl-target", "0.2"], "--kl-target", id="kl-target-without-kl-coef"),
    pytest.param(["--kl-horizon", "50"], "--kl-horizon", id="kl-horizon-without-kl-coef"),
    pytest.param(["--kl-coef", "0.1", "--kl-target", "0.2"], "--kl-ctrl adaptive", id="kl-target-with-fixed"),
    pytest.param(["--ray-workers", "4"], "--engine ray", id="ray-workers-with-local"),
    pytest.param(["--ray-address", "auto"], "--engine ray", id="ray-address-with-local"),
    pytest.param(["--kl-penalty", "k3"], "--kl-penalty has no effect without --kl-coef", id="kl-penalty-without-kl-coef"),
    pytest.param(["--estimator", "grpo_vectorized", "--no-norm-adv-by-std"],
                 "--no-norm-adv-by-std has no effect with --estimator grpo_vectorized, which reads --epsilon",
                 id="no-std-with-grpo-vectorized"),
    pytest.param(["--estimator", "rloo", "--no-norm-adv-by-std"], "which reads none of --gamma", id="no-std-with-rloo"),
    pytest.param(["--estimator", "rloo", "--epsilon", "1e-4"], "--epsilon has no effect with --estimator rloo",
                 id="epsilon-with-rloo"),
    pytest.param(["--lam", "0.95"], "--lam has no effect with --estimator grpo, which reads --norm-adv-by-std, --epsilon",
                 id="lam-with-grpo"),
    pytest.param(["--estimator", "gae", "--rpp-mask-mode", "carry"],
                 "--rpp-mask-mode has no effect with --estimator gae, which reads --gamma, --lam", id="rpp-mode-with-gae"),
    pytest.param(["--estimator", "gdpo", "--reward-components", ""], "--reward-components", id="components-empty"),
    pytest.param(["--estimator", "gdpo", "--reward-components", "acc,acc"], "'acc'", id="components-twice"),
]


@pytest.mark.parametrize(("flags", "named"), INERT)
def test_options_without_effect_are_errors(tmp_path, flags, named):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    estimator = [] if "--estimator" in flags else ["--estimator", "grpo"]
    result = rladv("compute", inp, *estimator, *flags, "-o", tmp_path / "o.parquet", "--report", tmp_path / "r.json")
    assert result.exit_code == 2
    assert_one_line_error(result, named)
    assert_untouched(tmp_path, before, data)


def test_options_with_effect_and_yaml_defaults_are_accepted(tmp_path, monkeypatch):
    """What the checks above refuse is only what was typed: the same settings that have an effect, a verl YAML
    that writes verl's defaults (kl_ctrl, rollout_is_threshold with rollout_is null), RAY_ADDRESS in the
    environment, and --no-rollout-is-batch-normalize all pass."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    yaml_file = tmp_path / "verl.yaml"
    yaml_file.write_text("algorithm:\n  adv_estimator: grpo\n  use_kl_in_reward: false\n"
                         "  kl_ctrl:\n    type: adaptive\n    kl_coef: 0.001\n    target_kl: 0.1\n    horizon: 10000\n"
                         "  rollout_correction:\n    rollout_is: null\n    rollout_is_threshold: 3.0\n"
                         "    rollout_is_batch_normalize: true\n    rollout_rs: null\n    rollout_rs_threshold: null\n"
                         "reward:\n  reward_kwargs:\n    max_resp_len: 64\n")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    runs = [
        ["--config", yaml_file],
        ["--estimator", "grpo", "--rollout-is", "token", "--rollout-is-threshold", "3", "--rollout-is-batch-normalize"],
        ["--estimator", "grpo", "--overlong-buffer-len", "4", "--max-resp-len", "8", "--overlong-penalty-factor", "2"],
        ["--estimator", "grpo", "--kl-coef", "0.1", "--kl-ctrl", "adaptive", "--kl-target", "0.2", "--kl-horizon", "50"],
        ["--estimator", "grpo", "--no-rollout-is-batch-normalize", "--kl-ctrl", "fixed"],
        ["--estimator", "grpo", "--gamma", "1.0", "--lam", "1", "--kl-penalty", "kl"],  # the defaults: harmless
        ["--estimator", "grpo_passk", "--no-norm-adv-by-std", "--epsilon", "1e-4"],
        ["--estimator", "reinforce_plus_plus", "--gamma", "0.9", "--rpp-mask-mode", "carry"],
    ]
    for i, flags in enumerate(runs):
        result = rladv("compute", inp, *flags, "-q", "-o", tmp_path / f"o{i}.parquet")
        assert result.exit_code == 0, (flags, result.output)


def test_a_negative_kl_coef_is_kept_with_a_note(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    report = tmp_path / "r.json"
    result = rladv("compute", inp, "--estimator", "grpo", "--kl-coef", "-0.1", "-q", "-o", tmp_path / "o.parquet",
                   "--report", report)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Note: ") and "negative" in lines[0] and "raises" in lines[0]
    rep = json.loads(report.read_text())
    assert rep["kl"]["coef"] == -0.1
    assert rep["config"]["notes"] == [lines[0].removeprefix("Note: ")]
    result = rladv("compute", inp, "--estimator", "grpo", "--kl-coef", "0.1", "-q", "-o", tmp_path / "p.parquet",
                   "--report", report)
    assert result.exit_code == 0 and not result.stderr.strip()
    assert "notes" not in json.loads(report.read_text())["config"]


# ---------------------------------------------------- audit: a full disk or a size limit, named; nothing left
def _run_limited(args: list, limit: Optional[int]) -> subprocess.CompletedProcess:
    import resource

    def cap():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*rladv_command(), *map(str, args)], capture_output=True, text=True, timeout=300,
                          preexec_fn=cap)


def test_a_failed_write_names_the_file_and_leaves_nothing(tmp_path):
    """The report used to be written before the HTML page and before the output's rename: a page that could
    not be written left the report behind, and the message named no file (``Error: File too large``). Now the
    three appear together or not at all, and the error names the file that could not be written."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["compute", inp, "--estimator", "grpo", "-q", "-o", out_dir / "o.parquet", "--report", out_dir / "r.json",
            "--html", out_dir / "r.html"]
    full = _run_limited(args, None)
    assert full.returncode == 0, full.stderr
    sizes = {p.name: p.stat().st_size for p in out_dir.iterdir()}
    for p in list(out_dir.iterdir()):
        p.unlink()
    assert sizes["r.html"] > 2 * max(sizes["o.parquet"], sizes["r.json"])
    # the page does not fit under the limit, the output and the report do
    page = _run_limited(args, (sizes["r.html"] + max(sizes["o.parquet"], sizes["r.json"])) // 2)
    assert page.returncode == 2 and "Traceback" not in page.stderr
    assert page.stderr.strip() == f"Error: {out_dir / 'r.html'}: File too large"
    assert os.listdir(out_dir) == []
    # nothing fits: whichever file reaches the limit first is named (the output is buffered, the report staged)
    for limit, named in ((1024, ("o.parquet", "r.json")), (1024, ("o.parquet",))):
        run = _run_limited(args if len(named) > 1 else args[:7], limit)
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.strip() in [f"Error: {out_dir / name}: File too large" for name in named], run.stderr
        assert os.listdir(out_dir) == []
    assert inp.read_bytes() == (SAMPLES / "multiturn.parquet").read_bytes()


def test_the_progress_bar_shows_rows_per_second():
    import io
    import time

    from rich.console import Console

    from rladv_cli.cli import _progress

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with _progress(console, True) as update:
        for i in range(1, 6):
            update("scan", i * 100, 500)
            time.sleep(0.02)
        console.print()
    assert "scan pass" in buf.getvalue() and "rows/s" in buf.getvalue()
