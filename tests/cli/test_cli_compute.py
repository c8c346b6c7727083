"""``rladv compute`` end to end (docs/contract.md §1-§4), on real Parquet files written into tmp_path: the output
and the report, batches and KL shaping, ``--config``, the terminal's summary and progress bar.

Every run goes through ``typer.testing.CliRunner`` (in-process, so torch is imported once for the file); the
executable itself: test_cli_executable.py.
"""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli

from conftest import (I8, SAMPLES, assert_one_line_error, assert_untouched, check_output, copy_sample, listing, read,
                      rladv, write)

REPORT_KEYS = {
    "rladv_version", "inputs", "config", "tokens", "groups", "scores", "kl", "rollout_rejection",
    "advantages", "returns", "warnings", "timing",
}


# --------------------------------------------------------------------------------------------- outputs and reports
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
    # the singleton row's advantage is R / (1 + eps) (docs/semantics.md §7.2)
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
    # the scalar score sits on the last non-padding position (docs/semantics.md §1)
    for att, tlr, score in zip(read(inp)["attention_mask"].to_pylist(), dst["token_level_rewards"].to_pylist(),
                               read(inp)["score"].to_pylist()):
        p = sum(att) - 1
        assert tlr[p] == pytest.approx(score)
        assert all(v == 0 for i, v in enumerate(tlr) if i != p)


F32_A = float(np.float32(0.5) / (np.float32(0.5) + np.float32(1e-6)))  # 0.999998 in float32


@pytest.mark.parametrize(
    ("uids", "scores", "expected"),
    [
        # docs/semantics.md §7.2 worked examples
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


# ---------------------------------------------------------------------------------------------------- the terminal
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


def test_quiet_prints_nothing(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    result = rladv("compute", inp, "--estimator", "grpo", "--quiet")
    assert result.exit_code == 0
    assert result.output == ""
    assert (tmp_path / "groups.adv.parquet").exists()


# ----------------------------------------------------------------------------------- batches, KL shaping, chunking
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


# ---------------------------------------------------------------------------------- --config (a verl trainer YAML)
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


def test_html_report_is_written_with_the_output_and_never_onto_it(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    html = tmp_path / "r.html"
    result = rladv("compute", inp, "--estimator", "grpo", "--kl-coef", "0.05", "--html", html, "-q")
    assert result.exit_code == 0, result.output
    text = html.read_text()
    assert "rladv run report" in text and "score_on_masked_position" in text
    before = listing(tmp_path)
    assert_one_line_error(rladv("compute", inp, "--estimator", "grpo", "-o", html, "--html", html), "not html")
    out = tmp_path / "o.parquet"
    assert_one_line_error(rladv("compute", inp, "--estimator", "grpo", "-o", out, "--html", out), "different files")
    assert listing(tmp_path) == before


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


def test_the_progress_bar_shows_rows_per_second():
    import io
    import time

    from rich.console import Console

    from rladv_cli.cli.progress import progress

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with progress(lambda: console, True) as update:
        for i in range(1, 6):
            update("scan", i * 100, 500)
            time.sleep(0.02)
        console.print()
    assert "scan pass" in buf.getvalue() and "rows/s" in buf.getvalue()


def test_compute_json_prints_the_report_and_nothing_else(tmp_path):
    """--json: stdout is the report (the file --report writes, byte for byte), no summary; the output is written."""
    data = copy_sample(tmp_path, "groups.parquet")
    res = rladv("compute", data, "--estimator", "grpo", "-o", tmp_path / "o.parquet", "--json",
                "--report", tmp_path / "r.json")
    assert res.exit_code == 0 and res.stderr == ""
    assert res.stdout == (tmp_path / "r.json").read_text()
    assert json.loads(res.stdout)["config"]["estimator"] == "grpo" and (tmp_path / "o.parquet").exists()


def _step_files(folder, shared_uids: bool = True, step_column: bool = True):
    """Two step files of one run whose uids are prompt ids (the same four prompts every step, verl's uids would be
    uuid4s): step 1's prompts score 1,0,0,0; step 2's score 1,1,1,0."""
    folder.mkdir()
    for step, scores in ((1, [1.0, 0.0, 0.0, 0.0]), (2, [1.0, 1.0, 1.0, 0.0])):
        rows = 16
        uid = [f"prompt-{i // 4}" + ("" if shared_uids else f"-s{step}") for i in range(rows)]
        cols = {"uid": uid, "response_mask": [[1, 1]] * rows, "score": [scores[i % 4] for i in range(rows)]}
        if step_column:
            cols["step"] = [step] * rows
        write(folder / f"step_{step}.parquet", cols, types={"score": pa.float32()})
    return folder


def test_a_step_column_is_the_batch_key(tmp_path):
    """A folder of step files whose uids recur every step: without --batch-key the step column keeps each step's
    groups apart (as verl, which computes each step on its own); --batch-key none merges them, as asked."""
    data = _step_files(tmp_path / "steps")
    runs = {}
    for name, flags in (("default", []), ("step", ["--batch-key", "step"]), ("none", ["--batch-key", "none"])):
        out = tmp_path / f"{name}.parquet"
        res = rladv("compute", data, "--estimator", "grpo", "-o", out, "--report", tmp_path / f"{name}.json", *flags)
        assert res.exit_code == 0, res.output
        runs[name] = [a[0] for a in read(out)["advantages"].to_pylist()]
        if name == "default":
            assert "in 2 batch(es) (--batch-key step), by uid" in res.stdout
    assert runs["default"] == runs["step"] and runs["default"] != runs["none"]
    # prompt-0 in step 1 scores 1,0,0,0: mean .25, Bessel std .5, so (1 - .25) / (.5 + 1e-6) and (0 - .25) / (.5 + 1e-6)
    assert runs["step"][:4] == pytest.approx([0.75 / 0.500001] + [-0.25 / 0.500001] * 3, rel=1e-6)
    report = json.loads((tmp_path / "default.json").read_text())
    assert report["config"]["batch_key"] == "step" and report["groups"]["count"] == 8
    assert json.loads((tmp_path / "none.json").read_text())["groups"]["count"] == 4
    assert rladv_cli.validate(str(data), batch_key="none").ok  # "none" names no column to check


def test_uids_spanning_files_without_a_batch_key_warn(tmp_path):
    """Step files without a step column (or with --batch-key none): a uid with rows in two files is one group
    across them; compute warns (uid_spans_files), and inspect's checklist says so; uids unique per file do not."""
    data = _step_files(tmp_path / "steps", step_column=False)
    res = rladv("compute", data, "--estimator", "grpo", "-o", tmp_path / "o.parquet", "--report", tmp_path / "r.json")
    assert res.exit_code == 0 and "uid_spans_files" in res.stdout
    warning = next(w for w in json.loads((tmp_path / "r.json").read_text())["warnings"] if w["code"] == "uid_spans_files")
    assert warning["count"] == 32 and "--batch-key COLUMN" in warning["message"]
    checks = {c["code"]: c for c in json.loads(rladv("inspect", data, "--estimator", "grpo", "--json").stdout)["checks"]}
    assert checks["uid_spans_files"]["status"] == "warn" and checks["uid_spans_files"]["count"] == 4
    apart = _step_files(tmp_path / "apart", shared_uids=False, step_column=False)
    res = rladv("compute", apart, "--estimator", "grpo", "-o", tmp_path / "a.parquet", "--report", tmp_path / "a.json")
    assert "uid_spans_files" not in {w["code"] for w in json.loads((tmp_path / "a.json").read_text())["warnings"]}
    checks = {c["code"]: c for c in json.loads(rladv("inspect", apart, "--json").stdout)["checks"]}
    assert checks["uid_spans_files"]["status"] == "pass"
