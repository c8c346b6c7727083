"""One-line errors of ``rladv compute`` (docs/contract.md §1, §2): a bad row names its file, row and column, a missing
column or an unreadable file its path, an option its flag (invalid, misread as verl would read it, or without
effect); nothing is written and the inputs stay byte-identical."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import (assert_one_line_error, assert_untouched, copy_sample, drop, extend_row, good_columns, listing,
                      mutated, read, rladv, set_row, set_token, write)


# ---------------------------------------------------------------- bad rows, missing columns, unreadable files (§1)
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
    else:  # text where the first file has numbers: no type holds both (float64 beside float32 would be one dataset)
        b = write(tmp_path / "b.parquet", {**good_columns(), "rm_scores": [["x"] * len(r) for r in
                                                                         good_columns()["rm_scores"]]},
                  types={"rm_scores": pa.list_(pa.string())})
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


# -------------------------------------------------------------------------------------------- invalid options (§2)
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


# --------------------------------------------------------------------------------------- computations verl refuses
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


# -------------------------------------------------- audit: what ended in a traceback, was misread or had no effect
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


# verl 0.9.1 parses thresholds with float() after splitting a band at its first '_' (docs/semantics.md §5.3)
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
    empty.write_text("")
    result = rladv("compute", inp, "--config", empty, "-o", tmp_path / "o.parquet")
    assert_one_line_error(result, str(empty), "the file is empty")
    assert sorted(listing(tmp_path)) == ["c1.yaml", "c2.yaml", "multiturn.parquet"]


def test_a_config_without_an_estimator_runs_verls_default_and_says_so(tmp_path):
    """verl's AlgoConfig defaults adv_estimator to gae: a trainer YAML without one runs gae, with a note."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    bare = tmp_path / "c.yaml"
    bare.write_text("algorithm:\n  gamma: 1.0\n")
    result = rladv("compute", inp, "--config", bare, "-o", tmp_path / "o.parquet")
    assert result.exit_code == 0, result.output
    assert "--config: algorithm.adv_estimator is not set: verl's default gae" in result.stderr
    assert "estimator gae" in result.stdout and (tmp_path / "o.parquet").exists()
    result = rladv("compute", copy_sample(tmp_path, "groups.parquet"), "--config", bare, "-o", tmp_path / "g.parquet")
    assert_one_line_error(result, "groups.parquet", "column values: missing; gae needs the critic's values")


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
    pytest.param(["--ray-keep-workers", "60"], "--engine ray", id="ray-keep-workers-with-local"),
    pytest.param(["--kl-penalty", "k3"], "--kl-penalty has no effect without --kl-coef", id="kl-penalty-without-kl-coef"),
    pytest.param(["--estimator", "grpo_vectorized", "--no-norm-adv-by-std"],
                 "--no-norm-adv-by-std has no effect with --estimator grpo_vectorized, which reads --epsilon",
                 id="no-std-with-grpo-vectorized"),
    pytest.param(["--estimator", "rloo", "--no-norm-adv-by-std"], "which reads no estimator setting", id="no-std-with-rloo"),
    pytest.param(["--estimator", "rloo", "--epsilon", "1e-4"], "--epsilon has no effect with --estimator rloo",
                 id="epsilon-with-rloo"),
    pytest.param(["--lam", "0.95"], "--lam has no effect with --estimator grpo, which reads --norm-adv-by-std, --epsilon",
                 id="lam-with-grpo"),
    pytest.param(["--estimator", "gae", "--rpp-mask-mode", "reset"],
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
