"""estimators/reinforce.py: ``credit_cut_rows`` (the ``credit_reset_at_mask`` warning of REINFORCE++)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rladv_cli.config.settings import Config
from rladv_cli.estimators.inputs import Inputs
from rladv_cli.estimators.reinforce import credit_cut_rows
from rladv_cli.tensors.batch import Batch
from rladv_cli.tensors.kernels import broadcast_rows, reverse_linear_scan, shift_left_in_row


def _dense_cut_rows(batch: Batch, gamma: float) -> torch.Tensor:
    """The definition on every token: ``carried_t = r_t + γ·run_{t+1}``; a row is cut where some ``m_t = 0``
    has ``carried_t ≠ 0`` and a running count of its row's ``m = 1`` tokens before ``t`` above 0."""
    m, r, offsets = batch.response_mask, batch.token_level_rewards, batch.row_offsets
    run = reverse_linear_scan(gamma * m, r * m, offsets)
    carried = r + gamma * shift_left_in_row(run, offsets)
    count = m.double().cumsum(0) - m.double()
    kept_before = count - broadcast_rows(count[offsets[:-1]], offsets) > 0
    cut = (m == 0) & (carried != 0) & kept_before
    return torch.stack([cut[a:b].any() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])


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
def test_credit_cut_rows_looks_only_at_mask_zero_positions_and_agrees_with_the_definition(batch, gamma):
    cfg = Config(estimator="reinforce_plus_plus", gamma=gamma)
    assert credit_cut_rows(batch, Inputs(), cfg.params()).tolist() == _dense_cut_rows(batch, gamma).tolist()


def test_a_reward_after_an_observation_cuts_its_row_and_carry_mode_cuts_nothing():
    m = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    r = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    offsets = torch.tensor([0, 3, 6])  # row 0: actor, observation, rewarded actor; row 1: observation first
    batch = Batch(row_offsets=offsets, original_mask=m, response_mask=m, token_level_scores=r, token_level_rewards=r,
                  row_index=torch.arange(2))
    assert credit_cut_rows(batch, Inputs(), Config(estimator="reinforce_plus_plus").params()).tolist() == [True, False]
    carry = Config(estimator="reinforce_plus_plus", rpp_mask_mode="carry")
    assert credit_cut_rows(batch, Inputs(), carry.params()).tolist() == [False, False]
