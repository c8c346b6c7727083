"""The command line explains itself: --version and -h, help without type placeholders at 80 columns with
examples, the compact estimators table, "did you mean", why a column is needed, --report -, docs/cli.md."""
from __future__ import annotations

import json

import pytest
import typer.main
from conftest import ROOT, SAMPLES, rladv

from rladv_cli import __version__
from rladv_cli.cli import app
from rladv_cli.cli.help import command_help, reference
from rladv_cli.estimators.registry import ESTIMATORS

GROUP = typer.main.get_command(app)
COMMANDS = list(GROUP.commands)


def test_version_and_short_help():
    assert rladv("--version").stdout == f"rladv {__version__}\n"
    for args in (["-h"], *([name, "-h"] for name in COMMANDS)):
        res = rladv(*args)
        assert res.exit_code == 0 and res.stdout.startswith("Usage: ") and "Options:" in res.stdout, args


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_help_names_every_value_reads_at_80_columns_and_shows_examples(name):
    text = command_help(GROUP, name)
    assert max(len(line) for line in text.splitlines()) <= 80, name
    assert "<" not in text.replace("<=", "") and "list[" not in text, name  # no <bool>, <list[Path]>
    assert "Examples:\n  rladv " in text, name
    command = GROUP if name is None else GROUP.commands[name]
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and not param.is_flag:
            assert param.metavar, f"{name} {param.opts}: name the value it takes"


def test_docs_cli_md_is_the_help_as_printed():
    """docs/cli.md is generated: regenerate with `python -m rladv_cli.cli docs/cli.md`."""
    assert (ROOT / "docs" / "cli.md").read_text() == reference(GROUP), "run: python -m rladv_cli.cli docs/cli.md"


def test_the_estimators_table_fits_80_columns_and_one_estimator_is_described():
    res = rladv("estimators")
    assert res.exit_code == 0 and max(len(line) for line in res.stdout.splitlines()) <= 80
    listed = [line.split()[0] for line in res.stdout.splitlines()[1:] if line and line.split()[0] in ESTIMATORS]
    assert listed == list(ESTIMATORS)
    one = rladv("estimators", "gae")
    assert one.exit_code == 0 and "family:            critic" in one.stdout and "values" in one.stdout
    assert json.loads(rladv("estimators", "gae", "--json").stdout)["name"] == "gae"
    wrong = rladv("estimators", "GAE")
    assert wrong.exit_code == 2 and "did you mean gae?" in wrong.stderr


@pytest.mark.parametrize("given, meant", [("GRPO", "grpo"), ("gpro", "grpo"), ("Reinforce_Plus_Plus", "reinforce_plus_plus")])
def test_an_unknown_estimator_says_which_it_likely_means(given, meant):
    for command in (["compute", SAMPLES / "groups.parquet", "-o", "/dev/null"], ["inspect", SAMPLES / "groups.parquet"],
                    ["validate", SAMPLES / "groups.parquet"]):
        res = rladv(*command, "--estimator", given)
        assert res.exit_code == 2, command
        assert res.stderr == f"Error: --estimator: unknown estimator '{given}'; did you mean {meant}?\n", command


def test_a_missing_column_says_why_it_is_needed_and_which_column_is_close(tmp_path):
    out = tmp_path / "o.parquet"
    res = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "gae", "-o", out)
    assert res.exit_code == 2 and "column values: missing; gae needs the critic's values" in res.stderr
    res = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "--batch-key", "stpe", "-o", out)
    assert res.stderr.strip().endswith("column stpe: missing; --batch-key names it (did you mean step?)")
    res = rladv("validate", SAMPLES / "groups.parquet", "--kl", "--estimator", "remax")
    assert "remax needs the greedy rollout's reward per row" in res.stderr
    assert not out.exists()


def test_report_dash_writes_the_report_to_stdout_and_the_summary_to_stderr(tmp_path):
    res = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "-o", tmp_path / "o.parquet",
                "--report", "-")
    assert res.exit_code == 0
    report = json.loads(res.stdout)
    assert report["config"]["estimator"] == "grpo" and report["output"] == str(tmp_path / "o.parquet")
    assert "estimator grpo" in res.stderr and not (tmp_path / "-").exists()
    quiet = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "-o", tmp_path / "p.parquet",
                  "--report", "-", "-q")
    assert json.loads(quiet.stdout)["groups"] == report["groups"] and quiet.stderr == ""


def test_a_config_without_adv_estimator_runs_verls_default_and_says_so(tmp_path):
    yaml = tmp_path / "algo.yaml"
    yaml.write_text("algorithm:\n  gamma: 0.8\n")
    res = rladv("compute", SAMPLES / "multiturn.parquet", "--config", yaml, "-o", tmp_path / "o.parquet")
    assert res.exit_code == 0, res.stderr
    assert "--config: algorithm.adv_estimator is not set: verl's default gae" in res.stderr
    assert "estimator gae" in res.stdout
    typed = rladv("compute", SAMPLES / "multiturn.parquet", "--config", yaml, "--estimator", "reinforce_plus_plus",
                  "-o", tmp_path / "p.parquet", "-q")
    assert typed.exit_code == 0, typed.stderr
    without = rladv("compute", SAMPLES / "multiturn.parquet", "-o", tmp_path / "q.parquet")
    assert without.exit_code == 2 and "--estimator is required" in without.stderr
