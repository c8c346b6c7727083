"""``rladv explain`` on the command line: the table and its JSON, errors that name the file and its row as compute's
do, a verl config, and the settings it takes (the derivation itself: tests/diagnose/test_explain.py)."""
import json

import pytest

from conftest import SAMPLES, rladv, runner, write
from rladv_cli.cli import app


def test_cli_explain_table_and_json(tmp_path):
    path = write(tmp_path / "d.parquet", response_mask=[[1, 1, 1]], rm_scores=[[0, 0, 1]], values=[[0.2, 0.3, 0.4]])
    res = runner.invoke(app, ["explain", str(path), "--estimator", "gae", "--row", "0", "--lam", "0.95"])
    assert res.exit_code == 0 and "running A" in res.stdout
    res = runner.invoke(app, ["explain", str(path), "--estimator", "gae", "--row", "0", "--json"])
    assert json.loads(res.stdout)["estimator"] == "gae"


def _two_files(tmp_path, bad_b: dict):
    """a.parquet (groups a0, a1) and b.parquet whose group b0 is rows 1 and 3; ``bad_b`` changes b's columns."""
    a = {"uid": ["a0", "a0", "a1", "a1"], "response_mask": [[1, 1]] * 4, "rm_scores": [[0, 1.0], [0, 0.0]] * 2}
    b = {"uid": ["b1", "b0", "b1", "b0"], "response_mask": [[1, 1]] * 4, "rm_scores": [[0, 1.0], [0, 0.0]] * 2}
    b.update(bad_b)
    for name, cols in (("a", a), ("b", b)):
        write(tmp_path / f"{name}.parquet", cols)
    return [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]


@pytest.mark.parametrize(("bad_b", "message"), [
    ({"response_mask": [[1, 1], [1, 1], [1, 1], []]}, "row 3, column response_mask: is an empty list"),
    ({"response_mask": [[1, 1], [1, 1], [1, 1], [1, 2]]}, "row 3, column response_mask: has value 2"),
    ({"rm_scores": [[0, 1.0], [0, 0.0], [0, 1.0], [0, float("nan")]]}, "row 3, column rm_scores"),
])
def test_cli_explain_errors_name_the_file_and_its_row_as_compute_does(tmp_path, bad_b, message):
    """explain computes the row's group from one in-memory table: its errors named ``<table>`` and the row
    within that table (here 1, for b.parquet's row 3)."""
    paths = _two_files(tmp_path, bad_b)
    res = runner.invoke(app, ["explain", *paths, "--estimator", "grpo", "--row", "5"])  # b.parquet row 1, group b0
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert lines == [f"Error: {paths[1]}: {message}" + lines[0].split(message, 1)[1]], lines
    compute = runner.invoke(app, ["compute", *paths, "--estimator", "grpo", "-o", str(tmp_path / "o.parquet")])
    assert compute.exit_code == 2 and compute.output == res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]


def test_explain_takes_every_setting_that_decides_the_numbers():
    """compute, explain and inspect share the pipeline's options: a run's advantages can always be derived
    again (``cli.takes_settings`` gives every Config field; this fails when a new field lacks its option)."""
    import typer.main

    from rladv_cli.config.settings import RUN_ONLY, Config

    commands = typer.main.get_command(app).commands
    for name in ("compute", "explain", "inspect"):
        params = {p.name for p in commands[name].params}
        assert set(Config.model_fields) - RUN_ONLY <= params, name
    assert {"chunk_rows", "cache_mib", "device", "threads", "thresholds"} == RUN_ONLY


def test_explain_reads_a_verl_config_and_refuses_what_it_leaves_inert(tmp_path):
    path = write(tmp_path / "d.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]])
    yaml = tmp_path / "ppo.yaml"
    yaml.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    res = runner.invoke(app, ["explain", str(path), "--row", "1", "--config", str(yaml), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["advantages"] == [-0.5]  # Dr.GRPO: R - mean
    res = runner.invoke(app, ["explain", str(path), "--row", "1", "--estimator", "grpo", "--max-resp-len", "4"])
    assert res.exit_code == 2 and "--max-resp-len has no effect without --overlong-buffer-len" in res.output
    res = runner.invoke(app, ["explain", str(path), "--row", "1"])
    assert res.exit_code == 2 and "--estimator is required" in res.output


@pytest.mark.parametrize("args, line", [
    (("--estimator", "grpo"), "row 1: (R - mean) / (std + eps) = (1 - 0.25) / (0.5 + 1e-06) = 1.499997"),
    (("--estimator", "grpo", "--no-norm-adv-by-std"), "row 1: R - mean = 1 - 0.25 = 0.75"),
    (("--estimator", "grpo_vectorized"), "row 1: (R - mean) / (std + eps) = (1 - 0.25) / (0.5 + 1e-06) = 1.499997"),
    (("--estimator", "rloo"), "row 1: R - (sum - R) / (n - 1) = 1 - (1 - 1) / 3 = 1"),
    (("--estimator", "rloo_vectorized"), "row 1: (n R - sum) / (n - 1) = (4 x 1 - 1) / 3 = 1"),
])
def test_explain_writes_out_a_group_rows_arithmetic(args, line):
    """Row 1 of groups.parquet: group prompt-0005 of four rows scoring 1, 0, 0, 0 (mean 0.25, Bessel std 0.5)."""
    res = rladv("explain", SAMPLES / "groups.parquet", "--row", "1", *args)
    assert res.exit_code == 0 and line in res.output.splitlines(), res.output
    if "--no-norm-adv-by-std" in args:  # the formula says what was computed
        assert "(R - mean_g) / (std_g + eps)" not in res.output and "not divided by the std" in res.output


@pytest.mark.parametrize("estimator", ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized"])
@pytest.mark.parametrize("std", ["--norm-adv-by-std", "--no-norm-adv-by-std"])
def test_the_written_arithmetic_ends_at_the_computed_advantage(estimator, std):
    flags = (std,) if estimator == "grpo" else ()
    for row in range(0, 65, 4):
        got = json.loads(rladv("explain", SAMPLES / "groups.parquet", "--row", row, "--estimator", estimator, *flags,
                               "--json").stdout)
        value = float(got["arithmetic"].rsplit("= ", 1)[1])
        computed = next(a for a, m in zip(got["advantages"], got["response_mask"]) if m)
        assert value == pytest.approx(computed, rel=1e-5, abs=1e-6), (row, got["arithmetic"])
