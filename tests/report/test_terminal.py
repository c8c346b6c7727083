"""Terminal tables: cells fold instead of being cut, so a narrow terminal never shows part of a number."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from conftest import SAMPLES, rladv
from rladv_cli.report.terminal import Table

GROUPS, MULTITURN = SAMPLES / "groups.parquet", SAMPLES / "multiturn.parquet"


def test_a_cell_too_wide_folds_and_keeps_every_character():
    for declared in (True, False):  # a column declared, or made by add_row
        out = io.StringIO()
        t = Table(box=None, show_header=False, pad_edge=False)
        if declared:
            t.add_column("value")
        t.add_row("-7.451e-08")
        Console(file=out, width=6).print(t)
        lines = out.getvalue().split()
        assert len(lines) > 1 and "".join(lines) == "-7.451e-08", out.getvalue()


@pytest.mark.parametrize("args", [
    ("compute", MULTITURN, "--estimator", "gae", "--kl-coef", "0.1"),
    ("inspect", MULTITURN, "--estimator", "grpo"),
    ("explain", MULTITURN, "--row", "3", "--estimator", "gae", "--kl-coef", "0.1"),
    ("inspect", MULTITURN, "--row", "3", "--estimator", "gae"),
    ("compare", GROUPS, "--run", "a: --estimator grpo", "--run", "b: --estimator rloo"),
    ("offpolicy", MULTITURN, "--rollout-rs", "token_k1", "--thresholds", "0.5_2.0,0.8_1.25"),
    ("estimators",),
])
@pytest.mark.parametrize("width", [80, 50])
def test_no_command_cuts_a_cell(tmp_path, args, width):
    extra = ("-o", tmp_path / "o.parquet") if args[0] == "compute" else ()
    res = rladv(*args, *extra, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    assert "…" not in res.output


def test_explain_fits_a_row_of_gae_numbers_in_80_columns():
    """Nine numbers of six significant digits per token, one line each at 80 columns."""
    res = rladv("explain", MULTITURN, "--row", "3", "--estimator", "gae", env={"COLUMNS": "80"})
    tokens = json.loads(rladv("explain", MULTITURN, "--row", "3", "--estimator", "gae", "--json").stdout)["tokens"]
    lines = res.output.splitlines()
    for values in tokens[:3]:
        cells = ["" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in values]
        assert any(line.split() == [c for c in cells if c] for line in lines), cells
