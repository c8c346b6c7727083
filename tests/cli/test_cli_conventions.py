"""``--convention`` through the command line (CliRunner on Parquet files): compute under each trainer's rules,
its refusals as one-line errors with nothing written, ``rladv estimators --convention``, ``rladv explain`` under
a convention, and the replay of NeMo-RL's own advantages from its dump."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, assert_one_line_error, copy_sample, listing, read, rladv, write
from host_exp import SAME_EXP

DUMPS = ROOT / "tests" / "data" / "nemo_rl_rollouts"


@pytest.mark.parametrize("args, formed_by", [
    (["--convention", "trl", "--estimator", "grpo"], "blocks of 4 rows"),
    (["--convention", "openrlhf", "--estimator", "group_norm", "--kl-coef", "0.05", "--kl-penalty", "k3"],
     "blocks of 4 rows"),
    (["--convention", "nemo_rl", "--estimator", "grpo"], "uid"),
    (["--convention", "skyrl", "--estimator", "maxrl"], "uid"),
])
def test_compute_under_a_convention(tmp_path, args, formed_by):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    result = rladv("compute", src, *args, "-o", out, "--report", report, "--quiet")
    assert result.exit_code == 0, result.output
    rep = json.loads(report.read_text())
    assert rep["config"]["convention"] == args[1] and rep["groups"]["formed_by"] == formed_by
    got = read(out)
    for a, m in zip(got["advantages"].to_pylist(), got["response_mask"].to_pylist()):
        assert all(x == 0 for x, keep in zip(a, m) if not keep)
    # sample_data/multiturn.parquet is shuffled: TRL's and OpenRLHF's blocks of 4 rows mix its uids
    codes = {w["code"]: w["count"] for w in rep["warnings"]}
    assert ("block_mixes_uids" in codes) == formed_by.startswith("blocks")


def test_trl_differs_from_verl_on_the_same_groups(tmp_path):
    """The documented case (docs/conventions.md): multiturn.parquet's rows sorted by uid, so TRL's blocks are its
    uid groups; TRL's epsilon 1e-4 against verl's 1e-6 is then the only difference."""
    src = copy_sample(tmp_path, "multiturn.parquet")
    t = pq.read_table(src)
    sorted_path = tmp_path / "sorted.parquet"
    pq.write_table(t.take(np.argsort(t["uid"].to_numpy(zero_copy_only=False), kind="stable")), sorted_path)
    runs = {}
    for name, args in (("verl", []), ("trl", ["--convention", "trl"])):
        out = tmp_path / f"{name}.parquet"
        assert rladv("compute", sorted_path, "--estimator", "grpo", *args, "-o", out, "--quiet").exit_code == 0
        runs[name] = np.concatenate([np.asarray(a, np.float64) for a in read(out)["advantages"].to_pylist()])
    ratio = runs["trl"][runs["verl"] != 0] / runs["verl"][runs["verl"] != 0]
    assert np.all(ratio < 1) and np.all(ratio > 0.999)  # smaller by (σ + 1e-6) / (σ + 1e-4)


@pytest.mark.parametrize("args, names", [
    (["--convention", "trl", "--estimator", "grpo", "--kl-coef", "0.1"], ["--kl-coef", "TRL puts KL in the loss"]),
    (["--convention", "trl", "--estimator", "grpo", "--epsilon", "0.1"], ["--epsilon has no effect", "--scale-rewards"]),
    (["--convention", "trl", "--estimator", "group_norm"], ["group_norm", "--convention openrlhf"]),
    (["--convention", "trl", "--estimator", "grpo", "--group-size", "5"], ["blocks of 5 rows", "48 rows"]),
    (["--convention", "nope", "--estimator", "grpo"], ["unknown convention 'nope'"]),
    (["--estimator", "grpo", "--group-size", "4"], ["--group-size has no effect", "--convention verl"]),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path, args, names):
    src = copy_sample(tmp_path, "multiturn.parquet")
    before = listing(tmp_path)
    assert_one_line_error(rladv("compute", src, *args, "-o", tmp_path / "out.parquet"), *names)
    assert listing(tmp_path) == before


def test_estimators_of_a_convention():
    table = rladv("estimators", "--convention", "openrlhf")
    assert table.exit_code == 0
    assert [line.split()[0] for line in table.stdout.splitlines()[1:7]] == [
        "group_norm", "rloo", "dr_grpo", "reinforce_baseline", "reinforce", "flash_reinforce"]
    one = json.loads(rladv("estimators", "grpo", "--convention", "nemo_rl", "--json").stdout)
    assert one["needs"] == ["response_mask", "rm_scores|score", "prompts"] and one["family"] == "leave-one-out"


def test_explain_under_a_convention_shows_the_computed_row(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out = tmp_path / "out.parquet"
    assert rladv("compute", src, "--convention", "trl", "--estimator", "grpo", "-o", out, "--quiet").exit_code == 0
    shown = json.loads(rladv("explain", src, "--row", 3, "--convention", "trl", "--estimator", "grpo", "--json").stdout)
    assert shown["advantages"] == read(out)["advantages"][3].as_py() and shown["group"] is None


def test_nemo_rl_dump_replays_under_its_convention(tmp_path):
    """NeMo-RL's own advantages (its dump, written by its own code: tests/data/make_nemo_rl_rollouts.py) agree
    with rladv's under --convention nemo_rl, and not under verl's grpo."""
    dumps = tmp_path / "dumps"
    shutil.copytree(DUMPS, dumps)
    converted = tmp_path / "nemo.parquet"
    assert rladv("convert", "--from", "nemo-rl", dumps, "-o", converted).exit_code == 0
    strict = rladv("compute", converted, "--convention", "nemo_rl", "--estimator", "grpo", "--batch-key", "step",
                   "--strict-replay", "-o", tmp_path / "a.parquet", "--report", tmp_path / "a.json", "--quiet")
    assert strict.exit_code == 0, strict.output
    replay = json.loads((tmp_path / "a.json").read_text())["replay"]
    # exact on the host that wrote the dump; elsewhere the host's matmul order may move an ulp (``host_exp``)
    assert replay["agree"] and replay["columns"]["advantages"]["max_abs_diff"] <= (0.0 if SAME_EXP else 1e-6)
    verl = rladv("compute", converted, "--estimator", "grpo", "--batch-key", "step", "--strict-replay",
                 "-o", tmp_path / "b.parquet")
    assert verl.exit_code == 1 and "advantages" in verl.output


@pytest.mark.parametrize("args, names", [
    (["--uid", "task-008", "--convention", "trl", "--estimator", "grpo"], ["--uid", "groups rows by blocks"]),
    (["--uid", "task-008", "--convention", "skyrl", "--estimator", "rloo", "--export", "EXPORT"],
     ["--export", "--convention skyrl"]),
])
def test_inspect_refuses_what_a_convention_has_no_counterpart_for(tmp_path, args, names):
    src = copy_sample(tmp_path, "multiturn.parquet")
    args = [str(tmp_path / "export") if a == "EXPORT" else a for a in args]
    before = listing(tmp_path)
    assert_one_line_error(rladv("inspect", src, *args), *names)
    assert listing(tmp_path) == before


def test_inspect_a_uid_group_under_a_convention_that_groups_by_uid(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    shown = json.loads(rladv("inspect", src, "--uid", "task-008", "--convention", "skyrl", "--estimator", "rloo",
                             "--json").stdout)
    out = tmp_path / "out.parquet"
    assert rladv("compute", src, "--convention", "skyrl", "--estimator", "rloo", "-o", out, "-q").exit_code == 0
    got = read(out)
    by_row = {m["row"]: m["advantage"] for m in shown["members"]}
    assert sorted(by_row) == [3, 33, 38, 43] and shown["formula"].startswith("(R_i - mean_g) * n/(n-1)")
    for row, advantage in by_row.items():
        first = got["response_mask"][row].as_py().index(1)
        assert advantage == got["advantages"][row].as_py()[first]


# ------------------------------------------------------------------ the trainers' own settings, on Parquet files
def _advantages(path, *args):
    out = path.parent / "out.parquet"
    result = rladv("compute", path, *args, "-o", out, "--quiet")
    assert result.exit_code == 0, result.output
    return read(out)["advantages"].to_pylist()


def test_openrlhf_float64_overlong_and_no_std_norm(tmp_path):
    src = write(tmp_path / "f64.parquet", response_mask=[[1, 1]] * 4, score=[1.0, 1.0, 1.0, 1.0 + 1e-8],
                types={"score": pa.float64()})
    got = _advantages(src, "--convention", "openrlhf", "--estimator", "group_norm", "--group-size", "4")
    np.testing.assert_allclose([a[0] for a in got], [-2.5 / 6] * 3 + [1.25], atol=1e-6)
    src = write(tmp_path / "long.parquet", response_mask=[[1, 1], [1]], score=[1, 1], types={"score": pa.int64()})
    got = _advantages(src, "--convention", "openrlhf", "--estimator", "reinforce_baseline", "--group-size", "2",
                      "--overlong-buffer-len", "1", "--overlong-penalty-factor", "0.5", "--max-resp-len", "2",
                      "--no-norm-adv-by-std")
    # rewards .5 (penalised) and 1: -.25 on both tokens of row 0, .25 on row 1; centred on their mean -1/12 only
    np.testing.assert_allclose(got[0] + got[1], [-1 / 6, -1 / 6, 1 / 3], atol=1e-7)
    assert_one_line_error(rladv("compute", src, "--convention", "openrlhf", "--estimator", "rloo", "--group-size", "2",
                                "--no-norm-adv-by-std", "-o", tmp_path / "x.parquet"),
                          "--no-norm-adv-by-std has no effect", "--convention openrlhf")


def test_trl_unscorable_rows_and_the_refusal_elsewhere(tmp_path):
    src = write(tmp_path / "r.parquet", response_mask=[[1]] * 4, score=[1.0, None, 0.0, 0.5])
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    result = rladv("compute", src, "--convention", "trl", "--estimator", "grpo", "--group-size", "2",
                   "--scale-rewards", "none", "-o", out, "--report", report, "--quiet")
    assert result.exit_code == 0, result.output
    assert read(out)["advantages"].to_pylist() == [[0.0], [0.0], [-0.25], [0.25]]
    warned = {w["code"]: w for w in json.loads(report.read_text())["warnings"]}["unscorable_row"]
    assert warned["count"] == 1 and warned["where"] == [f"{src}:1"]
    before = listing(tmp_path)
    assert_one_line_error(rladv("compute", src, "--convention", "openrlhf", "--estimator", "dr_grpo", "--group-size",
                                "2", "-o", tmp_path / "x.parquet"), "r.parquet", "is null", row=1, column="score")
    assert listing(tmp_path) == before


def test_nemo_rl_clip_bounds_and_stop_properly(tmp_path):
    src = write(tmp_path / "r.parquet", response_mask=[[1]] * 4, score=[0.0, 15.0, 5.0, 0.0], uid=["p", "p", "q", "q"],
                truncated=[False, True, False, False], types={"truncated": pa.bool_()})
    common = ("--convention", "nemo_rl", "--estimator", "grpo", "--no-norm-adv-by-std")
    assert _advantages(src, *common, "--adv-clip-low", "-2", "--adv-clip-high", "3") == [[-2.0], [3.0], [3.0], [-2.0]]
    # the truncated row's 15 halved: -7.5, 7.5
    assert _advantages(src, *common, "--stop-properly-penalty-coef", "0.5") == [[-7.5], [7.5], [5.0], [-5.0]]
    before = listing(tmp_path)
    for args, names in ((("--stop-properly-penalty-coef", "-0.5"), ["NeMo-RL only scales"]),
                        (("--adv-clip", "1", "--adv-clip-low", "-1"), ["give one form or the other"]),
                        (("--adv-clip-low", "1", "--adv-clip-high", "-1"), ["--adv-clip-low 1 is above"])):
        assert_one_line_error(rladv("compute", src, *common, *args, "-o", tmp_path / "x.parquet"), *names)
    assert listing(tmp_path) == before


def test_skyrl_step_wise_trajectories(tmp_path):
    columns = dict(uid=["g"] * 4, response_mask=[[1, 1, 1, 1], [1], [1, 1, 1], [1, 1]], score=[0.0, 2.0, 0.0, 0.0])
    src = write(tmp_path / "steps.parquet", **columns, is_last_step=[False, True, False, True],
                types={"is_last_step": pa.bool_()})
    out, report = tmp_path / "out.parquet", tmp_path / "r.json"
    result = rladv("compute", src, "--convention", "skyrl", "--estimator", "grpo", "--no-norm-adv-by-std",
                   "-o", out, "--report", report, "--quiet")
    assert result.exit_code == 0, result.output
    assert read(out)["advantages"].to_pylist() == [[1.0] * 4, [1.0], [-1.0] * 3, [-1.0] * 2]
    assert json.loads(report.read_text())["sessions"]["trajectories"] == 2
    bad = write(tmp_path / "bad.parquet", **columns, is_last_step=[0, 1, 1, 0], types={"is_last_step": pa.int8()})
    before = listing(tmp_path)
    assert_one_line_error(rladv("compute", bad, "--convention", "skyrl", "--estimator", "rloo", "-o",
                                tmp_path / "x.parquet"), "bad.parquet", "last row", row=3, column="is_last_step")
    assert listing(tmp_path) == before
