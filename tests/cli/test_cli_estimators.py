"""``rladv estimators`` (the table at any terminal width, and its JSON) and ``rladv offpolicy`` on the command
line (``rladv convert``: tests/io/test_dump.py; the what-if sweep: tests/diagnose/test_rollout_correction.py)."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq

from conftest import SAMPLES, assert_one_line_error, read, rladv, runner
from rladv_cli.cli import app
from rladv_cli.estimators.registry import ESTIMATORS

ESTIMATOR_NAMES = set(ESTIMATORS)


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
    for name, e in ESTIMATORS.items():  # what the registry declares
        assert by_name[name] == e.describe(), name
        assert by_name[name]["groups"] == e.groups and by_name[name]["critic"] == ("values" in e.columns), name
    assert by_name["gae"]["critic"] is True and "values" in by_name["gae"]["needs"]
    assert by_name["grpo"]["critic"] is False and by_name["grpo"]["groups"] is True
    assert by_name["reinforce_plus_plus"]["groups"] is False


def test_offpolicy_on_a_file_without_rows(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(read(SAMPLES / "multiturn.parquet").slice(0, 0), empty)
    result = rladv("offpolicy", empty, "--rollout-rs", "token_k1", "--thresholds", "2")
    assert result.exit_code == 2
    assert "holds no rows" in assert_one_line_error(result, str(empty))
