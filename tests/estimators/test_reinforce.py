"""estimators/reinforce.py: ``credit_cut_rows`` (the ``credit_reset_at_mask`` warning of REINFORCE++)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref

from rladv_cli.config.settings import Config
from rladv_cli.estimators.inputs import Inputs
from rladv_cli.estimators.reinforce import credit_cut_rows
from rladv_cli.tensors.batch import Batch


def _rows_where_the_modes_differ(batch: Batch, gamma: float) -> list[bool]:
    """The definition, from the oracle (tests/reference.py): the rows whose returns on their actor tokens differ
    between ``--rpp-mask-mode carry`` and ``reset``."""
    bounds = list(zip(batch.row_offsets[:-1].tolist(), batch.row_offsets[1:].tolist()))
    r = [batch.token_level_rewards[a:b].numpy() for a, b in bounds]
    m = [batch.response_mask[a:b].numpy() for a, b in bounds]
    carry = ref.reinforce_plus_plus_returns(r, m, gamma, mode="carry")
    reset = ref.reinforce_plus_plus_returns(r, m, gamma, mode="reset")
    return [bool(((c != s) & (mask == 1)).any()) for c, s, mask in zip(carry, reset, m)]


@st.composite
def batches(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=10))
    n = sum(lengths)
    mask = draw(st.lists(st.sampled_from([0.0, 1.0, 1.0]), min_size=n, max_size=n))
    rewards = draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.5]), min_size=n, max_size=n))
    offsets = torch.tensor([0] + lengths).cumsum(0)
    m, r = torch.tensor(mask), torch.tensor(rewards)
    return Batch(row_offsets=offsets, original_mask=m, response_mask=m, token_level_scores=r,
                 token_level_rewards=r, row_index=torch.arange(len(lengths)))


@pytest.mark.slow  # hypothesis property
@settings(max_examples=300, deadline=None)
@given(batch=batches(), gamma=st.sampled_from([1.0, 0.99, 0.5, 0.0]))
def test_credit_cut_rows_are_the_rows_where_carry_and_reset_differ(batch, gamma):
    """The rows do not depend on the mode: the warning names the same rows in both, with the mode's wording."""
    expected = _rows_where_the_modes_differ(batch, gamma)
    for mode in ("carry", "reset"):
        cfg = Config(estimator="reinforce_plus_plus", gamma=gamma, rpp_mask_mode=mode)
        assert credit_cut_rows(batch, Inputs(), cfg.params()).tolist() == expected, mode


def test_a_return_across_an_observation_marks_its_row_and_a_reward_on_a_mask_zero_position_does_not():
    m = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    r = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0])
    # row 0: actor, observation, rewarded actor; row 1: observation first; row 2: a reward on its mask-0 token
    offsets = torch.tensor([0, 3, 6, 8])
    batch = Batch(row_offsets=offsets, original_mask=m, response_mask=m, token_level_scores=r, token_level_rewards=r,
                  row_index=torch.arange(3))
    for mode in ("carry", "reset"):
        params = Config(estimator="reinforce_plus_plus", rpp_mask_mode=mode).params()
        assert credit_cut_rows(batch, Inputs(), params).tolist() == [True, False, False], mode
    assert _rows_where_the_modes_differ(batch, 1.0) == [True, False, False]
