"""The trainer conventions (``--convention``, docs/conventions.md): hand-checked worked examples of each
trainer's estimators, their grouping rules, the settings each refuses, and invariants (chunking, masks). The
differential tests against the trainers' own code are in tests/against_peers (optional)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from conftest import run, table
from rladv_cli.errors import ComputeError, ConfigError, InputError
from rladv_cli.estimators.conventions import CONVENTIONS


def rows(scores, masks=None, **columns) -> pa.Table:
    """One scalar score per row; masks default to one actor token; an ``index`` column is int64."""
    masks = masks or [[1]] * len(scores)
    return table(response_mask=masks, score=list(scores), types={"index": pa.int64()}, **columns)


def advantages(t, estimator, **settings):
    out, report = run(t, estimator, **settings)
    return out["advantages"].to_pylist(), report


def first(adv):
    """Each row's advantage at its first position."""
    return [a[0] for a in adv]


def close(got, want, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=0, atol=atol)


# ------------------------------------------------------------------ TRL 1.16.0
def test_trl_grpo_blocks_nanstd_and_its_epsilon():
    # blocks of 2 in file order: [1, 0] -> nanstd = sqrt(mean(0.25, 0.25) * 2/1) = 0.7071068, a = ±0.5/(σ+1e-4);
    # [0.5, 0.5] -> σ = 0, a = 0/(0+1e-4) = 0
    t = rows([1.0, 0.0, 0.5, 0.5])
    adv, report = advantages(t, "grpo", convention="trl", group_size=2)
    close(first(adv), [0.5 / 0.7072068, -0.5 / 0.7072068, 0.0, 0.0])
    assert report.groups.formed_by == "blocks of 2 rows" and report.groups.count == 2


def test_trl_scale_rewards_batch_and_none():
    t = rows([1.0, 0.0, 0.5, 0.5])
    # batch nanstd of [1, 0, .5, .5]: sqrt(mean(.25, .25, 0, 0) * 4/3) = 0.4082483
    close(first(advantages(t, "grpo", convention="trl", group_size=2, scale_rewards="batch")[0]),
          [0.5 / 0.4083483, -0.5 / 0.4083483, 0.0, 0.0])
    close(first(advantages(t, "grpo", convention="trl", group_size=2, scale_rewards="none")[0]), [0.5, -0.5, 0, 0])


def test_trl_one_generation_gives_zero_and_the_group_size_defaults_to_the_uid_groups():
    t = rows([1.0, 0.0], uid=["a", "b"])
    assert first(advantages(t, "grpo", convention="trl")[0]) == [0.0, 0.0]  # num_generations 1: std 0
    t = rows([1.0, 0.0, 0.0, 0.0], uid=["a", "a", "b", "b"])
    adv, report = advantages(t, "grpo", convention="trl")
    assert report.groups.formed_by == "blocks of 2 rows"
    close(first(adv), [0.5 / 0.7072068, -0.5 / 0.7072068, 0, 0])


def test_trl_unscorable_rows_leave_the_block_statistics_and_get_zero():
    # blocks of 3: [1, NaN, 0] -> mean .5 and nanstd sqrt(mean(.25, .25) * 2/1) = .7071068 of the scorable two;
    # [null, 2, .5] -> mean 1.25, nanstd sqrt(mean(.5625, .5625) * 2) = 1.0606602; the unscorable rows get 0
    t = rows([1.0, float("nan"), 0.0, None, 2.0, 0.5])
    adv, report = advantages(t, "grpo", convention="trl", group_size=3)
    close(first(adv), [0.5 / 0.7072068, 0.0, -0.5 / 0.7072068, 0.0, 0.75 / 1.0607602, -0.75 / 1.0607602])
    flagged = {w.code: w for w in report.warnings}["unscorable_row"]
    assert flagged.count == 2 and flagged.rows == [1, 3]
    close(first(advantages(t, "grpo", convention="trl", group_size=3, scale_rewards="none")[0]),
          [0.5, 0.0, -0.5, 0.0, 0.75, -0.75])
    # batch: the nanstd of the four scorable rows [1, 0, 2, .5] (mean .875): sqrt(2.1875/4 * 4/3) = .8539126
    close(first(advantages(t, "grpo", convention="trl", group_size=3, scale_rewards="batch")[0]),
          [0.5 / 0.8540126, 0.0, -0.5 / 0.8540126, 0.0, 0.75 / 0.8540126, -0.75 / 0.8540126])


def test_trl_a_block_with_one_scorable_row_gives_zero():
    # (TRL's test_all_none_reward_conversation_is_unscorable): [NaN, 2] -> the mean is 2, the nanstd of one value
    # NaN, so both advantages are NaN -> 0
    assert first(advantages(rows([None, 2.0]), "grpo", convention="trl", group_size=2)[0]) == [0.0, 0.0]


@pytest.mark.parametrize("convention, estimator", [("verl", "grpo"), ("openrlhf", "dr_grpo"), ("skyrl", "rloo")])
def test_a_missing_score_is_refused_outside_trl(convention, estimator):
    with pytest.raises(InputError) as err:
        run(rows([1.0, None], uid=["a", "a"]), estimator, convention=convention,
            group_size=2 if convention == "openrlhf" else None)
    assert "row 1, column score" in str(err.value) and "null" in str(err.value)


def test_blocks_that_mix_uids_are_flagged():
    t = rows([1.0, 0.0, 0.0, 1.0], uid=["a", "b", "a", "b"])
    _, report = advantages(t, "grpo", convention="trl", group_size=2)
    flagged = {w.code: w for w in report.warnings}["block_mixes_uids"]
    assert flagged.count == 2 and flagged.rows == [0, 2]


@pytest.mark.parametrize("t, settings, words", [
    (rows([1.0, 0.0, 1.0]), {"group_size": 2}, ["blocks of 2 rows", "has 3 rows"]),
    (rows([1.0, 0.0, 1.0]), {}, ["give group_size", "no uid column"]),
    (rows([1.0, 0.0, 1.0], uid=["a", "a", "b"]), {}, ["2 sizes", "give group_size"]),
])
def test_blocks_that_cannot_be_cut_stop_the_run(t, settings, words):
    with pytest.raises(ComputeError) as err:
        run(t, "grpo", convention="trl", **settings)
    assert all(w in str(err.value) for w in words), str(err.value)


# ------------------------------------------------------------------ OpenRLHF 0.11.2
def test_openrlhf_group_norm_epsilon_and_kl_per_token():
    t = table(response_mask=[[1, 1, 1], [1]], score=[1.0, 0.0], old_log_probs=[[0.1, 0.2, -0.3], [0.0]],
              ref_log_prob=[[0.0, 0.0, 0.0], [0.0]])
    a = 0.5 / (0.70710677 + 1e-9)
    close(first(advantages(t, "group_norm", convention="openrlhf", group_size=2)[0]), [a, -a])
    # k1 = old - ref per token, reward: a at the last action token, -0.1 * k1 everywhere; returns summed from t on
    adv, _ = advantages(t, "group_norm", convention="openrlhf", group_size=2, kl_coef=0.1, kl_penalty="k1")
    close(adv[0], [a + 0.0, a + 0.01, a + 0.03], atol=2e-6)
    close(adv[1], [-a])


def test_openrlhf_rloo_dr_grpo_flash_reinforce():
    t = rows([1.0, 0.0, 0.5, 0.5])
    close(first(advantages(t, "rloo", convention="openrlhf", group_size=2)[0]), [1.0, -1.0, 0.0, 0.0])
    close(first(advantages(t, "dr_grpo", convention="openrlhf", group_size=2)[0]), [0.5, -0.5, 0.0, 0.0])
    close(first(advantages(t, "flash_reinforce", convention="openrlhf", group_size=2)[0]), [0.5, -0.5, 0.0, 0.0])


def test_openrlhf_whitened_estimators_use_the_biased_variance():
    # reinforce_baseline: R - block mean = [.5, .5 | -.5 | 0, 0, 0 | 0] over 7 tokens; mean 1/14, biased var
    # 3/28 - 1/196 = 0.1020408, whitened (x - mean) / sqrt(var) (OpenRLHF clamps var at 1e-8, no + 1e-8)
    t = rows([1.0, 0.0, 0.5, 0.5], masks=[[1, 1], [1], [1, 1, 1], [1]])
    adv, _ = advantages(t, "reinforce_baseline", convention="openrlhf", group_size=2)
    sd = 0.1020408 ** 0.5
    close(adv[0] + adv[1] + adv[2] + adv[3], [(0.5 - 1 / 14) / sd] * 2 + [(-0.5 - 1 / 14) / sd] + [(-1 / 14) / sd] * 4,
          atol=2e-6)
    # reinforce: no baseline, returns discounted by gamma before the whitening
    out, _ = run(t, "reinforce", convention="openrlhf", group_size=2, gamma=0.9)
    close(out["returns"].to_pylist()[0] + out["returns"].to_pylist()[2], [0.9, 1.0, 0.405, 0.45, 0.5])


def test_openrlhf_no_std_norm_only_centres():
    # --no-norm-adv-by-std (OpenRLHF's advantage.no_std_norm): the same raw advantages as above, minus their mean
    # 1/14 over the 7 action tokens, not divided
    t = rows([1.0, 0.0, 0.5, 0.5], masks=[[1, 1], [1], [1, 1, 1], [1]])
    adv, _ = advantages(t, "reinforce_baseline", convention="openrlhf", group_size=2, norm_adv_by_std=False)
    close(adv[0] + adv[1] + adv[2] + adv[3], [0.5 - 1 / 14] * 2 + [-0.5 - 1 / 14] + [-1 / 14] * 4)
    # reinforce: returns [.9, 1 | 0 | .405, .45, .5 | .5] with gamma .9, their mean 3.755/7
    adv, _ = advantages(t, "reinforce", convention="openrlhf", group_size=2, gamma=0.9, norm_adv_by_std=False)
    close(adv[0] + adv[1] + adv[2] + adv[3], np.array([0.9, 1.0, 0.0, 0.405, 0.45, 0.5, 0.5]) - 3.755 / 7)


def test_openrlhf_keeps_float64_rewards_in_float64():
    # (OpenRLHF's test_group_advantages_produce_reference_policy_gradient) 1, 1, 1, 1 + 1e-8: in float64 a mean of
    # 1 + 2.5e-9 and a std of 5e-9, so (r - mean) / (std + 1e-9) = -2.5/6 three times and 7.5/6; in float32 a tie
    scores = [1.0, 1.0, 1.0, 1.0 + 1e-8]
    t = table(response_mask=[[1, 1]] * 4, score=scores, types={"score": pa.float64()})
    close(first(advantages(t, "group_norm", convention="openrlhf", group_size=4)[0]), [-2.5 / 6] * 3 + [1.25])
    assert first(advantages(rows(scores), "group_norm", convention="openrlhf", group_size=4)[0]) == [0.0] * 4
    # verl reads float32 whatever the column: a tie
    t64 = table(response_mask=[[1, 1]] * 4, score=scores, uid=["a"] * 4, types={"score": pa.float64()})
    assert first(advantages(t64, "grpo")[0]) == [0.0] * 4
    # the row-score stages run in float64 too: row 0 truncated, (1 + 2e-8) * .5 against .5 -> ±5e-9 (dr_grpo)
    t = table(response_mask=[[1], [1]], score=[1.0 + 2e-8, 0.5], truncated=[True, False],
              types={"score": pa.float64(), "truncated": pa.bool_()})
    adv = first(advantages(t, "dr_grpo", convention="openrlhf", group_size=2, stop_properly_penalty_coef=0.5)[0])
    np.testing.assert_allclose(adv, [5e-9, -5e-9], rtol=1e-6)


def test_openrlhf_overlong_penalty_is_its_own():
    # (OpenRLHF's test_integer_rewards_preserve_fractional_length_penalty) max_new_tokens 2, buffer 1, factor .5:
    # the 2-token row exceeds 2 - 1 by 1 -> -1/1 * .5, reward .5; dr_grpo: .5 - .75 and 1 - .75
    t = table(response_mask=[[1, 1], [1]], score=[1, 1], types={"score": pa.int64()})
    out, report = run(t, "dr_grpo", convention="openrlhf", group_size=2, overlong_buffer_len=1,
                      overlong_penalty_factor=0.5, max_resp_len=2)
    assert out["advantages"].to_pylist() == [[-0.25, -0.25], [0.25]]
    assert out["token_level_rewards"].to_pylist() == [[0.0, 0.5], [1.0]] and report.overlong["rows_penalised"] == 1
    # its length is the span of action tokens, its exceedance capped at the buffer: [1, 0, 0, 1, 0] spans 4, which
    # exceeds 3 - 2 by 3, capped at 2 -> -2/2 * .5 (verl: 5 positions, -(5 - 1)/2 * .5 = -1)
    t = table(response_mask=[[1, 0, 0, 1, 0], [1]], score=[0.0, 0.0])
    settings = dict(overlong_buffer_len=2, overlong_penalty_factor=0.5, max_resp_len=3)
    out, _ = run(t, "dr_grpo", convention="openrlhf", group_size=2, **settings)
    assert out["token_level_rewards"].to_pylist()[0][-1] == -0.5
    close(first(out["advantages"].to_pylist()), [-0.25, 0.25])
    verl, _ = run(t.append_column("uid", pa.array(["a", "a"])), "grpo", **settings)
    assert verl["token_level_rewards"].to_pylist()[0][-1] == -1.0


def test_openrlhf_blocks_follow_the_sample_index():
    # index 2,0,3,1: sorted by it the blocks are rows {1, 3} (scores 0, 0) and {0, 2} (1, 0)
    t = rows([1.0, 0.0, 0.0, 0.0], index=[2, 0, 3, 1])
    close(first(advantages(t, "dr_grpo", convention="openrlhf", group_size=2)[0]), [0.5, 0.0, -0.5, 0.0])
    # without the column: file order, blocks {0, 1} and {2, 3}
    close(first(advantages(rows([1.0, 0.0, 0.0, 0.0]), "dr_grpo", convention="openrlhf", group_size=2)[0]),
          [0.5, -0.5, 0.0, 0.0])


def test_openrlhf_singleton_group_norm_is_refused_as_non_finite():
    with pytest.raises(ComputeError, match="non-finite|NaN|nan"):
        run(rows([1.0, 0.0]), "group_norm", convention="openrlhf", group_size=1)


# ------------------------------------------------------------------ NeMo-RL 0.6.0
def test_nemo_rl_leave_one_out_baseline_and_std():
    # [1, 0, .5]: row 0's others [0, .5]: b = .25, σ = sqrt((.125 - .0625) * 2) = .3535534; row 2's others [1, 0]:
    # b = .5, σ = .7071068; a pair [1, 0]: σ = 0, so a = r - other unscaled; a singleton: 0
    t = rows([1.0, 0.0, 0.5, 1.0, 0.0, 0.7], uid=["a", "a", "a", "p", "p", "s"])
    adv, report = advantages(t, "grpo", convention="nemo_rl")
    close(first(adv), [0.75 / 0.3535544, -0.75 / 0.3535544, 0.0, 1.0, -1.0, 0.0], atol=2e-6)
    assert report.groups.formed_by == "uid"  # no prompts column: the uid stands in


def test_nemo_rl_without_leave_one_out_and_without_normalisation():
    t = rows([1.0, 0.0, 0.5], uid=["a"] * 3)
    # all three: b = .5, σ = sqrt((1.25/3 - .25) * 3/2) = .5
    close(first(advantages(t, "grpo", convention="nemo_rl", leave_one_out=False)[0]), [0.5 / 0.500001, -0.5 / 0.500001, 0])
    close(first(advantages(t, "grpo", convention="nemo_rl", norm_adv_by_std=False)[0]), [0.75, -0.75, 0.0])


def test_nemo_rl_groups_by_prompt_token_ids():
    # the uid says one group; the prompts say two (rows 0, 1 share [1, 2]; row 2 alone)
    t = table(response_mask=[[1]] * 3, score=[1.0, 0.0, 1.0], uid=["a"] * 3,
              prompts=pa.array([[1, 2], [1, 2], [1, 2, 0]], pa.list_(pa.int64())))
    adv, report = advantages(t, "grpo", convention="nemo_rl")
    close(first(adv), [1.0, -1.0, 0.0])
    assert report.groups.formed_by == "prompts" and report.groups.count == 2


def test_nemo_rl_asymmetric_advantage_clip():
    # (NeMo-RL's test_clip_grpo_advantages_respects_config_bounds) pairs without std: [0, 15] -> -15, 15 and
    # [5, 0] -> 5, -5; clamped to [-2, 3], one side at a time, and never the returns
    t = rows([0.0, 15.0, 5.0, 0.0], uid=["p", "p", "q", "q"])
    settings = dict(convention="nemo_rl", norm_adv_by_std=False)
    for bounds, want in (({"adv_clip_low": -2.0, "adv_clip_high": 3.0}, [-2, 3, 3, -2]),
                         ({"adv_clip_low": -2.0}, [-2, 15, 5, -2]), ({"adv_clip_high": 3.0}, [-15, 3, 3, -5]),
                         ({}, [-15, 15, 5, -5])):
        out, _ = run(t, "grpo", **settings, **bounds)
        assert first(out["advantages"].to_pylist()) == want and first(out["returns"].to_pylist()) == [-15, 15, 5, -5]
    # --adv-clip C is the symmetric -C, C
    assert first(advantages(t, "grpo", **settings, adv_clip=3.0)[0]) == [-3, 3, 3, -3]


def test_nemo_rl_stop_properly_penalty_scales():
    # (NeMo-RL's test_stop_properly_penalty_scales_truncated_rewards) the truncated row's reward times .5; a
    # negative coefficient is refused (NeMo-RL asserts 0 <= coef <= 1), which OpenRLHF takes as a replacement
    t = table(response_mask=[[1]] * 3, score=[1.0, 0.0, 1.0], uid=["a"] * 3, truncated=[True, False, False],
              types={"truncated": pa.bool_()})
    out, _ = run(t, "grpo", convention="nemo_rl", norm_adv_by_std=False, stop_properly_penalty_coef=0.5)
    # totals [.5, 0, 1]: each minus the mean of the other two
    close(first(out["advantages"].to_pylist()), [0.0, -0.75, 0.75])


def test_grpo_loo_is_nemo_rl_grpo_over_uids():
    t = rows([1.0, 0.0, 0.5, 1.0, 0.0], uid=["a", "a", "a", "p", "p"])
    close(first(advantages(t, "grpo_loo")[0]), first(advantages(t, "grpo", convention="nemo_rl")[0]), atol=0)


# ------------------------------------------------------------------ SkyRL 0.3.0
def test_skyrl_rloo_and_maxrl():
    t = rows([1.0, 0.0, 0.5, 0.7], uid=["a", "a", "a", "s"])
    # rloo: (R - .5) * 3/2, a singleton 0 (verl's rloo keeps R)
    close(first(advantages(t, "rloo", convention="skyrl")[0]), [0.75, -0.75, 0.0, 0.0])
    close(first(advantages(t, "rloo")[0])[3:], [0.7])
    # maxrl: (R - .5)/(.5 + 1e-6), a singleton keeps R
    want = [0.5 / 0.500001, -0.5 / 0.500001, 0.0, 0.7]
    close(first(advantages(t, "maxrl", convention="skyrl")[0]), want)
    close(first(advantages(t, "maxrl")[0]), want)


STEPS = dict(uid=["grp0"] * 4, response_mask=[[1, 1, 1, 1], [1], [1, 1, 1], [1, 1]], score=[0.0, 2.0, 0.0, 0.0],
             is_last_step=[False, True, False, True])


def test_skyrl_step_wise_trajectories_broadcast_the_last_steps_advantage():
    # (SkyRL's test_calc_advantages_and_returns_step_wise_broadcast) two trajectories of two steps in one group,
    # rewards 2 and 0 at their last steps: grpo without std gives 2 - 1 and 0 - 1 to every step of each
    t = table(**STEPS, types={"is_last_step": pa.bool_()})
    out, report = run(t, "grpo", convention="skyrl", norm_adv_by_std=False)
    assert out["advantages"].to_pylist() == [[1.0] * 4, [1.0], [-1.0] * 3, [-1.0] * 2]
    assert report.sessions["trajectories"] == 2 and report.groups.count == 1
    # rloo: (R - mean) * 2/1; maxrl: (R - 1) / (1 + 1e-6)
    assert first(advantages(t, "rloo", convention="skyrl")[0]) == [2.0, 2.0, -2.0, -2.0]
    close(first(advantages(t, "maxrl", convention="skyrl")[0]), [1 / 1.000001] * 2 + [-1 / 1.000001] * 2)
    # verl's convention reads no steps: four group members, totals [0, 2, 0, 0]
    assert first(advantages(t, "grpo", norm_adv_by_std=False)[0]) == [-0.5, 1.5, -0.5, -0.5]


def test_skyrl_steps_read_only_the_last_steps_reward_and_mask():
    # an earlier step's reward is not read; a last step without actor token still hands its scalar to the others;
    # a one-step trajectory is its own last step (three trajectories: totals 1, 0, 0.5 -> mean .5)
    t = table(uid=["a"] * 5, response_mask=[[1, 1], [0], [1], [1, 1], [1]], score=[9.0, 1.0, 0.0, 3.0, 0.5],
              is_last_step=[0, 1, 1, 0, 1], types={"is_last_step": pa.int8()})
    out, _ = run(t, "grpo", convention="skyrl", norm_adv_by_std=False)
    assert out["advantages"].to_pylist() == [[0.5, 0.5], [0.0], [-0.5], [0.0, 0.0], [0.0]]


def test_skyrl_trajectories_stay_within_their_batch():
    # rows of steps 1 and 2 interleaved: each batch's rows in file order make its trajectories
    t = table(uid=["a"] * 6, step=[1, 2, 1, 2, 1, 2], response_mask=[[1]] * 6, score=[5.0, 5.0, 1.0, 3.0, 0.0, 1.0],
              is_last_step=[False, True, True, False, True, True], types={"is_last_step": pa.bool_()})
    out, _ = run(t, "grpo", convention="skyrl", norm_adv_by_std=False, batch_key="step")
    # step 1: trajectories (rows 0, 2) -> 1 and (row 4) -> 0; step 2: (row 1) -> 5 and (rows 3, 5) -> 1
    assert first(out["advantages"].to_pylist()) == [0.5, 2.0, 0.5, -2.0, -0.5, -2.0]


@pytest.mark.parametrize("last, uid, row, words", [
    ([False, True, False, False], ["grp0"] * 4, 3, "last row of the dataset"),
    ([False, True, False, True], ["grp0", "x", "grp0", "grp0"], 0, "ends at row 1, whose uid differs"),
])
def test_skyrl_malformed_steps_are_refused(last, uid, row, words):
    t = table(**{**STEPS, "is_last_step": last, "uid": uid}, types={"is_last_step": pa.bool_()})
    with pytest.raises(InputError) as err:
        run(t, "grpo", convention="skyrl")
    assert f"row {row}, column is_last_step" in str(err.value) and words in str(err.value), str(err.value)


def test_skyrl_grpo_is_verl_grpo():
    t = rows([1.0, 0.0, 0.5, 0.7], uid=["a", "a", "a", "s"])
    assert advantages(t, "grpo", convention="skyrl")[0] == advantages(t, "grpo")[0]


# ------------------------------------------------------------------ what each convention refuses
@pytest.mark.parametrize("settings, words", [
    ({"convention": "trl", "estimator": "grpo", "kl_coef": 0.1}, ["kl_coef", "TRL puts KL in the loss"]),
    ({"convention": "nemo_rl", "estimator": "grpo", "rollout_rs": "token_k1", "rollout_rs_threshold": "2.0"},
     ["rollout_rs", "verl's pipeline", "convention='verl'"]),
    ({"convention": "openrlhf", "estimator": "group_norm", "kl_coef": 0.1, "kl_penalty": "low_var_kl"},
     ["kl_penalty='low_var_kl'", "k1, k2, k3"]),
    ({"convention": "openrlhf", "estimator": "group_norm", "kl_coef": -0.1}, ["<= 0 as 0"]),
    ({"convention": "nemo_rl", "estimator": "grpo", "stop_properly_penalty_coef": -0.5},
     ["stop_properly_penalty_coef=-0.5", "NeMo-RL only scales", "[0, 1]"]),
    ({"convention": "trl", "estimator": "grpo", "overlong_buffer_len": 2, "max_resp_len": 4},
     ["overlong_buffer_len", "verl's pipeline"]),
    ({"convention": "nemo_rl", "estimator": "grpo", "adv_clip": 1.0, "adv_clip_high": 2.0},
     ["adv_clip C is adv_clip_low -C and adv_clip_high C"]),
    ({"convention": "nemo_rl", "estimator": "grpo", "adv_clip_low": 2.0, "adv_clip_high": 1.0},
     ["adv_clip_low=2 is above adv_clip_high=1"]),
    ({"convention": "trl", "estimator": "group_norm"}, ["not", "group_norm is an estimator of convention openrlhf"]),
    ({"convention": "trll", "estimator": "grpo"}, ["unknown convention 'trll'", "did you mean trl?"]),
])
def test_settings_a_convention_has_no_counterpart_for_are_refused(settings, words):
    from rladv_cli.config.settings import Config

    with pytest.raises(ConfigError) as err:
        Config(**settings)
    message = str(err.value)
    assert "\n" not in message and all(w.replace("not", "unknown estimator") in message for w in words), message


def test_a_trainers_hard_coded_epsilon_is_not_a_setting():
    from rladv_cli.config.flags import to_command_line
    from rladv_cli.config.resolve import refused_inert as refused
    from rladv_cli.config.settings import Config

    def refused_inert(*args, **kwargs):  # as the command line asks: its messages name flags
        with to_command_line():
            return refused(*args, **kwargs)

    cfg = Config(convention="trl", estimator="grpo", epsilon=1e-3)
    assert refused_inert(cfg, {"epsilon": 1e-3}, ray_engine=False) == (
        "--epsilon has no effect with --estimator grpo --convention trl, which reads --scale-rewards")
    # OpenRLHF's no_std_norm is read by its two whitened estimators only
    cfg = Config(convention="openrlhf", estimator="group_norm", norm_adv_by_std=False)
    assert refused_inert(cfg, {"norm_adv_by_std": False}, ray_engine=False) == (
        "--no-norm-adv-by-std has no effect with --estimator group_norm --convention openrlhf, which reads no "
        "estimator setting")
    assert refused_inert(Config(convention="openrlhf", estimator="reinforce_baseline", norm_adv_by_std=False),
                         {"norm_adv_by_std": False}, ray_engine=False) is None


# ------------------------------------------------------------------ invariants
CASES = [("trl", "grpo"), ("openrlhf", "group_norm"), ("openrlhf", "rloo"), ("openrlhf", "dr_grpo"),
         ("openrlhf", "reinforce_baseline"), ("nemo_rl", "grpo"), ("skyrl", "rloo"), ("skyrl", "maxrl")]


@st.composite
def grouped_batches(draw):
    """Blocks of ``n`` rows (uids in blocks, so every convention groups alike), ragged masks with mask-0 spans,
    scores with ties and non-dyadic values, log-probs for KL."""
    n = draw(st.integers(2, 4))
    groups = draw(st.integers(1, 5))
    masks, scores, old, ref = [], [], [], []
    for _ in range(n * groups):
        length = draw(st.integers(1, 6))
        m = draw(st.lists(st.integers(0, 1), min_size=length, max_size=length))
        masks.append(m)
        scores.append(draw(st.sampled_from([0.0, 1.0, 0.5, 0.3, -0.7, 2.25])))
        old.append(draw(st.lists(st.floats(-3, 0, width=32), min_size=length, max_size=length)))
        ref.append(draw(st.lists(st.floats(-3, 0, width=32), min_size=length, max_size=length)))
    uids = [f"g{i // n}" for i in range(n * groups)]
    return n, table(response_mask=masks, score=scores, uid=uids, old_log_probs=old, ref_log_prob=ref)


@pytest.mark.slow
@pytest.mark.parametrize("convention, estimator", CASES)
@hsettings(max_examples=25, deadline=None)
@given(batch=grouped_batches(), kl=st.booleans())
def test_chunked_equals_whole_batch_and_masks_are_respected(convention, estimator, batch, kl):
    n, t = batch
    settings = dict(convention=convention, group_size=n if CONVENTIONS[convention].blocks else None)
    if kl and CONVENTIONS[convention].kl == "token":
        settings.update(kl_coef=0.05, kl_penalty="k3")
    try:
        whole, _ = run(t, estimator, one_chunk=True, **settings)
    except ComputeError as err:  # a one-row block of group_norm (NaN), or nothing to whiten: refused
        assert any(w in str(err) for w in ("non-finite", "NaN", "0 valid token(s)")), str(err)
        return
    chunked, _ = run(t, estimator, chunk_rows=1, **settings)
    assert chunked["advantages"].to_pylist() == whole["advantages"].to_pylist()
    for a, m in zip(whole["advantages"].to_pylist(), t["response_mask"].to_pylist()):
        assert all(x == 0 for x, keep in zip(a, m) if not keep)
    # the rows' order within the file does not matter where groups are labelled, only the blocks' order
    if not CONVENTIONS[convention].blocks:
        order = np.random.default_rng(0).permutation(t.num_rows)
        shuffled, _ = run(t.take(pa.array(order)), estimator, one_chunk=True, **settings)
        np.testing.assert_allclose(np.concatenate([np.asarray(x, np.float64) for x in shuffled["advantages"].to_pylist()] or [np.zeros(0)]),
                                   np.concatenate([np.asarray(whole["advantages"][int(i)].as_py(), np.float64) for i in order] or [np.zeros(0)]),
                                   rtol=1e-5, atol=1e-6)
