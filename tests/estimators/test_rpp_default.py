"""reinforce_plus_plus runs verl 0.9.1's carry mode by default; credit_reset_at_mask then names the rows that
--rpp-mask-mode reset would change."""
from __future__ import annotations

import torch
from conftest import SAMPLES, rladv
from hypothesis import given, settings
from hypothesis import strategies as st

import rladv_cli
from rladv_cli.estimators.inputs import Inputs
from rladv_cli.estimators.reinforce import credit_cut_rows, reinforce_plus_plus
from rladv_cli.tensors.batch import Batch


def test_the_default_is_verls_carry_mode():
    assert rladv_cli.Config(estimator="reinforce_plus_plus").rpp_mask_mode == "carry"
    table = __import__("pyarrow.parquet", fromlist=["x"]).read_table(SAMPLES / "multiturn.parquet")
    default, report = rladv_cli.compute(table, estimator="reinforce_plus_plus")
    carry, _ = rladv_cli.compute(table, estimator="reinforce_plus_plus", rpp_mask_mode="carry")
    reset, _ = rladv_cli.compute(table, estimator="reinforce_plus_plus", rpp_mask_mode="reset")
    assert default["advantages"].equals(carry["advantages"]) and not default["advantages"].equals(reset["advantages"])
    warning = next(w for w in report.warnings if w.code == "credit_reset_at_mask")
    assert "--rpp-mask-mode reset (verl before 0.9, the chapter) would cut it off there" in warning.message


def test_a_verl_config_of_reinforce_plus_plus_gives_carry(tmp_path):
    yaml = tmp_path / "ppo.yaml"
    yaml.write_text("algorithm:\n  adv_estimator: reinforce_plus_plus\n")
    res = rladv("compute", SAMPLES / "multiturn.parquet", "--config", yaml, "-o", tmp_path / "o.parquet", "--report",
                tmp_path / "r.json", "-q")
    assert res.exit_code == 0, res.stderr
    assert '"rpp_mask_mode": "carry"' in (tmp_path / "r.json").read_text()


@st.composite
def batches(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=10))
    n = sum(lengths)
    mask = torch.tensor(draw(st.lists(st.sampled_from([0.0, 1.0, 1.0]), min_size=n, max_size=n)))
    rewards = torch.tensor(draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.5]), min_size=n, max_size=n)))
    offsets = torch.tensor([0] + lengths).cumsum(0)
    return Batch(row_offsets=offsets, original_mask=mask, response_mask=mask, token_level_scores=rewards,
                 token_level_rewards=rewards, row_index=torch.arange(len(lengths)))


@settings(max_examples=300, deadline=None)
@given(batch=batches(), gamma=st.sampled_from([1.0, 0.99, 0.5, 0.0]))
def test_in_carry_mode_the_check_flags_exactly_the_rows_reset_would_change(batch, gamma):
    carry = rladv_cli.Config(estimator="reinforce_plus_plus", gamma=gamma).params()
    reset = rladv_cli.Config(estimator="reinforce_plus_plus", gamma=gamma, rpp_mask_mode="reset").params()
    a, _ = reinforce_plus_plus(batch, Inputs(), carry)
    b, _ = reinforce_plus_plus(batch, Inputs(), reset)
    offsets = batch.row_offsets.tolist()
    differ = [not torch.equal(a[s:e], b[s:e]) for s, e in zip(offsets[:-1], offsets[1:])]
    assert credit_cut_rows(batch, Inputs(), carry).tolist() == differ
