"""Each loss aggregation rule's per-row scale ``c_i`` on one hand-built step (docs/weights.md), every number
worked out by hand from the trainer's formula in the comments; and the mini- and micro-batch cuts."""
from __future__ import annotations

import numpy as np
import pytest

from rladv_cli.errors import ComputeError
from rladv_cli.loss.modes import AGGREGATIONS
from rladv_cli.loss.scale import RowFacts, Settings, split, weigh

# One step of six rows. loss_tokens: actor tokens before rollout rejection; tokens: after it (row 1 lost one);
# width: response positions (tool observations included, padding not); prompt: uid groups, consecutive.
FACTS = RowFacts(step=np.zeros(6, dtype=np.int64), loss_tokens=np.array([4, 2, 0, 6, 3, 1]),
                 tokens=np.array([4, 1, 0, 6, 3, 1]), width=np.array([6, 2, 3, 8, 3, 5]),
                 prompt=np.array([0, 0, 1, 1, 2, 2]))
BIG = None  # a row without tokens: its c_i is whatever the formula gives (its weights are 0 anyway)


def scale(convention: str, mode: str, **settings) -> np.ndarray:
    return weigh(AGGREGATIONS[convention].mode(mode), FACTS, Settings(**settings)).scale


def check(got: np.ndarray, expected: list) -> None:
    for g, e in zip(got, expected):
        if e is not BIG:
            assert g == pytest.approx(e, rel=1e-6), (got, expected)


CASES = [
    # verl 0.9.1, mini-batches of 3 rows: T0 counts loss_mask tokens (before rejection): 4+2+0 = 6, 6+3+1 = 10
    ("verl", "token-mean", dict(mini=3), [1 / 6] * 3 + [1 / 10] * 3),
    ("verl", "token-sum", dict(mini=3), [1.0] * 6),
    ("verl", "seq-mean-token-sum", dict(mini=3), [1 / 3] * 6),  # G = the configured 3 rows, the empty one counts
    ("verl", "seq-mean-token-sum", dict(), [1 / 6] * 6),  # no --mini-batch-size: the step's 6 rows
    ("verl", "seq-mean-token-mean", dict(mini=3), [1 / 12, 1 / 3, BIG, 1 / 18, 1 / 9, 1 / 3]),  # 1/(u·3)
    # one row per micro-batch: the padded width is the row's own
    ("verl", "seq-mean-token-sum-norm", dict(mini=3, micro=1), [1 / 18, 1 / 6, 1 / 9, 1 / 24, 1 / 9, 1 / 15]),
    ("verl", "seq-mean-token-sum-norm", dict(mini=3), [1 / 18] * 3 + [1 / 24] * 3),  # widths 6 and 8
    ("verl", "seq-mean-token-sum-norm", dict(mini=3, factor=10), [1 / 30] * 6),
    # TRL 1.16.0, the step (6 rows) one optimizer step of 3 micro-batches of 2 rows: GA 3, S 3; T_step = 15
    ("trl", "dapo", dict(micro=2), [1 / 15] * 6),  # normaliser 15 · 3 / 3
    ("trl", "dapo", dict(mini=3, micro=1), [2 / 15] * 6),  # GA 3, S 6: 15 · 3 / 6 = 7.5
    ("trl", "vespo", dict(micro=2), [1 / 15] * 6),
    ("trl", "cispo", dict(micro=2), [0.2 / 15] * 6),  # min(1, epsilon_high 0.2)
    ("trl", "cispo", dict(micro=2, epsilon_high=5.0), [1 / 15] * 6),
    ("trl", "grpo", dict(micro=2), [1 / 24, 1 / 6, 1 / 6, 1 / 36, 1 / 18, 1 / 6]),  # 1/(GA 3 · B 2 · max(u,1))
    ("trl", "sapo", dict(micro=2), [1 / 24, 1 / 6, 1 / 6, 1 / 36, 1 / 18, 1 / 6]),
    ("trl", "bnpo", dict(micro=2), [1 / 15] * 2 + [1 / 18] * 2 + [1 / 12] * 2),  # micro tokens 5, 6, 4
    ("trl", "dr_grpo", dict(micro=2), [1 / 3072] * 6),  # 1/(3 · 2 · 512)
    ("trl", "dr_grpo", dict(micro=2, factor=100), [1 / 600] * 6),
    ("trl", "luspo", dict(micro=2), [1 / 6] * 6),
    # OpenRLHF 0.11.2, mini-batches of 3: T 5 and 10; rows with tokens 2 and 3
    ("openrlhf", "token-mean", dict(mini=3), [1 / 5] * 3 + [1 / 10] * 3),
    ("openrlhf", "token-mean", dict(mini=3, micro=1), [1 / 5] * 3 + [1 / 10] * 3),  # DeepSpeed's 1/gas cancels
    ("openrlhf", "seq-mean-token-mean", dict(mini=3), [1 / 8, 1 / 2, BIG, 1 / 18, 1 / 9, 1 / 3]),
    # NeMo-RL: token_level over the global batch's tokens; sequence_level over all its rows (3)
    ("nemo_rl", "token_level", dict(mini=3), [1 / 5] * 3 + [1 / 10] * 3),
    ("nemo_rl", "sequence_level", dict(mini=3), [1 / 12, 1 / 3, BIG, 1 / 18, 1 / 9, 1 / 3]),
    # SkyRL 0.3.0
    ("skyrl", "token_mean", dict(mini=3), [1 / 5] * 3 + [1 / 10] * 3),
    ("skyrl", "token_mean_legacy", dict(mini=3, micro=1), [1 / 12, 1 / 3, 1 / 3, 1 / 18, 1 / 9, 1 / 3]),
    ("skyrl", "sequence_mean", dict(mini=3), [1 / 12, 1 / 3, 1 / 3, 1 / 18, 1 / 9, 1 / 3]),
    ("skyrl", "seq_mean_token_sum_norm", dict(mini=3, factor=10), [1 / 30] * 6),
    # prompts start at rows 0, 2, 4: mini-batch 0 holds prompt 0 (5 tokens) and the start of prompt 1 (row 2, 0
    # tokens -> 1): P = 2; row 3, the rest of prompt 1, weighs 0; mini-batch 1: prompt 2 alone, 4 tokens
    ("skyrl", "prompt_mean", dict(mini=3), [1 / 10, 1 / 10, 1 / 2, 0.0, 1 / 4, 1 / 4]),
]


@pytest.mark.parametrize("convention, mode, settings, expected", CASES,
                         ids=[f"{c}-{m}-{i}" for i, (c, m, _, _) in enumerate(CASES)])
def test_the_scale_of_every_mode_by_hand(convention, mode, settings, expected):
    got = scale(convention, mode, **settings)
    assert got.dtype == np.float32
    check(got, expected)


def test_every_mode_has_a_hand_checked_case():
    covered = {(c, m) for c, m, _, _ in CASES}
    assert covered == {(a.convention, m) for a in AGGREGATIONS.values() for m in a.modes}


def test_mini_and_micro_batches_are_consecutive_rows_of_each_step():
    facts = RowFacts(step=np.array([1, 0, 1, 0, 1, 0, 1, 0]), loss_tokens=np.ones(8), tokens=np.ones(8),
                     width=np.ones(8))
    sp = split(facts, Settings(mini=2, micro=1))
    # each step's rows in dataset order: step 1 rows 0,2 | 4,6 and step 0 rows 1,3 | 5,7
    assert sp.mini.tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert sp.micro.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert sp.accumulation.tolist() == [2] * 8 and sp.per_step.tolist() == [4] * 8


def test_a_step_that_does_not_divide_stops_the_run():
    with pytest.raises(ComputeError, match=r"mini_batch_size=4: the dataset has 6 rows, not a multiple of 4"):
        scale("verl", "token-mean", mini=4)
    with pytest.raises(ComputeError, match=r"micro_batch_size=2: the dataset has 3 rows of a mini-batch"):
        scale("trl", "grpo", mini=3, micro=2)


def test_a_required_factor_and_non_consecutive_prompts_are_refused():
    with pytest.raises(ComputeError, match="seq_mean_token_sum_norm' needs loss_scale_factor"):
        scale("skyrl", "seq_mean_token_sum_norm")
    shuffled = RowFacts(step=np.zeros(4, dtype=np.int64), loss_tokens=np.ones(4), tokens=np.ones(4), width=np.ones(4),
                        prompt=np.array([0, 1, 0, 1]))
    with pytest.raises(ComputeError, match="row 2: its uid appears again after other uids"):
        weigh(AGGREGATIONS["skyrl"].mode("prompt_mean"), shuffled, Settings())
