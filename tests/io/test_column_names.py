"""--column NAME=COLUMN: the user's own column names read as the contract's and written back as the user's."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES, rladv

import rladv_cli
from rladv_cli.errors import ConfigError, InputError


@pytest.fixture
def renamed(tmp_path):
    """sample_data/groups.parquet with its uid column called prompt_id and its score called reward."""
    table = pq.read_table(SAMPLES / "groups.parquet")
    names = {"uid": "prompt_id", "score": "reward"}
    path = tmp_path / "mine.parquet"
    pq.write_table(table.rename_columns([names.get(n, n) for n in table.column_names]), path)
    return path


def test_mapped_columns_give_the_numbers_of_the_contracts_names_and_keep_the_users_names(tmp_path, renamed):
    plain, mine = tmp_path / "plain.parquet", tmp_path / "mine.adv.parquet"
    assert rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "-o", plain, "-q").exit_code == 0
    res = rladv("compute", renamed, "--estimator", "grpo", "--column", "uid=prompt_id", "--column", "score=reward",
                "--column", "advantages=adv", "-o", mine, "-q")
    assert res.exit_code == 0, res.stderr
    want, got = pq.read_table(plain), pq.read_table(mine)
    assert got.column_names == [{"uid": "prompt_id", "score": "reward", "advantages": "adv"}.get(n, n)
                                for n in want.column_names]
    assert got.rename_columns(want.column_names).equals(want)


def test_the_python_api_and_a_yaml_map_columns_too(tmp_path, renamed):
    table = pq.read_table(renamed)
    out, report = rladv_cli.compute(table, estimator="grpo", columns={"uid": "prompt_id", "score": "reward"})
    want, _ = rladv_cli.compute(pq.read_table(SAMPLES / "groups.parquet"), estimator="grpo")
    assert out.column_names[0] == "prompt_id" and out["advantages"].equals(want["advantages"])
    assert report.config["columns"] == {"uid": "prompt_id", "score": "reward"}
    yaml = tmp_path / "ppo.yaml"
    yaml.write_text("algorithm:\n  adv_estimator: grpo\nrladv:\n  columns:\n    uid: prompt_id\n    score: reward\n")
    res = rladv("compute", renamed, "--config", yaml, "-o", tmp_path / "y.parquet", "-q")
    assert res.exit_code == 0, res.stderr
    assert pq.read_table(tmp_path / "y.parquet")["advantages"].equals(want["advantages"])


def test_inspect_validate_and_explain_read_the_mapped_names(renamed):
    args = ["--column", "uid=prompt_id", "--column", "score=reward"]
    assert rladv("validate", renamed, "--estimator", "grpo", *args).stdout.startswith("ok: 65 rows")
    res = rladv("inspect", renamed, "--estimator", "grpo", "--json", *args)
    assert res.exit_code == 0 and '"count": 17' in res.stdout  # the uid groups, found under prompt_id
    res = rladv("explain", renamed, "--row", "3", "--estimator", "grpo", *args)
    assert res.exit_code == 0, res.stderr


def test_mapping_mistakes_are_one_line_errors_naming_both_names(tmp_path, renamed):
    out = tmp_path / "o.parquet"
    res = rladv("compute", renamed, "--estimator", "grpo", "--column", "uid=group", "-o", out)
    assert res.exit_code == 2 and res.stderr == f"Error: {renamed}: --column uid=group: the file has no column group\n"
    res = rladv("compute", renamed, "--estimator", "grpo", "--column", "uid=prompt", "-o", out)
    assert res.stderr.endswith("--column uid=prompt: the file has no column prompt (did you mean prompt_id?)\n")
    res = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "--column", "uid=step", "-o", out)
    assert "--column uid=step: the file has a column uid too; map one of them" in res.stderr
    res = rladv("compute", renamed, "--estimator", "grpo", "--column", "uidd=prompt_id", "-o", out)
    assert "uidd is not a column rladv reads or writes; did you mean uid?" in res.stderr
    res = rladv("compute", renamed, "--estimator", "grpo", "--column", "uid", "-o", out)
    assert res.stderr == "Error: --column uid: write NAME=COLUMN, the contract's name and yours (uid=prompt_id)\n"
    assert not out.exists()
    with pytest.raises(ConfigError):
        rladv_cli.Config(estimator="grpo", columns={"uid": "a", "score": "a"})
    with pytest.raises(InputError):
        rladv_cli.compute(pa.table({"response_mask": [[1]], "score": [1.0]}), estimator="grpo", columns={"uid": "x"})
