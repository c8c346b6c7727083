"""Every worked example of docs/semantics.md, through the library, with the numbers from the document."""
import math
import re

import numpy as np
import pyarrow as pa
import pytest
import torch

import rladv_cli
from conftest import run, table
from rladv_cli.estimators.registry import ESTIMATORS
from rladv_cli.stages.shaping import KLController, kl_penalty


def example_table(rm_scores, masks, uids=None, **lists) -> pa.Table:
    """A worked example's rows: per-token scores, response masks, uids (when given) and further token lists."""
    return table(response_mask=masks, rm_scores=rm_scores, **({"uid": uids} if uids is not None else {}), **lists)


def computed(t, estimator, **settings):
    """(advantages, returns, report) of ``t`` computed on the CPU, the columns as Python lists."""
    out, report = run(t, estimator, **settings)
    return out["advantages"].to_pylist(), out["returns"].to_pylist(), report


def close(got, want, atol=1e-6):
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64), rtol=0, atol=atol)


# --- §7.1 GAE -------------------------------------------------------------------------------------------
def test_gae_chapter_example():
    t = example_table([[0, 0, 1]], [[1, 1, 1]], values=[[0.2, 0.3, 0.4]])
    adv, ret, _ = computed(t, "gae", gamma=1.0, lam=0.95)
    close(ret, [[0.9365, 0.97, 1.0]])
    close(adv, [[0.9913445, 0.0170926, -1.0084344]])


def test_gae_skips_an_observation_and_bootstraps_across_it():
    t = example_table([[0, 0, 1]], [[1, 0, 1]], values=[[0.2, 0.3, 0.4]])
    adv, ret, _ = computed(t, "gae", gamma=1.0, lam=0.95)
    close(ret, [[0.97, 0.0, 1.0]])  # rladv writes 0 where response_mask is 0 (verl: 0.9)
    close(adv, [[0.7071065, 0.0, -0.7071065]])


# --- §7.2 GRPO ------------------------------------------------------------------------------------------
ONE_GROUP = example_table([[1.0], [0.0], [0.5]], [[1], [1], [1]], ["a", "a", "a"])


def test_grpo_one_group():
    adv, ret, _ = computed(ONE_GROUP, "grpo")
    close(adv, [[0.999998], [-0.999998], [0.0]])
    assert np.float32(adv[0][0]) == np.float32(0.9999980)
    assert ret == adv


def test_grpo_without_std_is_dr_grpo():
    adv, _, _ = computed(ONE_GROUP, "grpo", norm_adv_by_std=False)
    close(adv, [[0.5], [-0.5], [0.0]])


def test_grpo_broadcasts_to_actor_tokens_only():
    t = example_table([[0, 0, 0, 0, 1.0], [0.0], [0.5]], [[1, 1, 0, 0, 1], [1], [1]], ["a", "a", "a"])
    adv, _, _ = computed(t, "grpo")
    close(adv[:1], [[0.999998, 0.999998, 0, 0, 0.999998]])


def test_grpo_two_groups_one_all_zero():
    t = example_table([[1.0], [0.0], [0.5], [0.0], [0.0], [0.0]], [[1]] * 6, ["A", "A", "A", "B", "B", "B"])
    adv, _, report = computed(t, "grpo")
    close(adv, [[0.999998], [-0.999998], [0], [0], [0], [0]])
    assert "all_equal_group" in report.warning_codes()


def test_grpo_singleton_keeps_its_score_and_is_reported():
    t = example_table([[1.0], [0.0], [0.5]], [[1], [1], [1]], ["a", "a", "b"])
    adv, _, report = computed(t, "grpo")
    close(adv, [[0.7071058], [-0.7071058], [0.4999995]])
    (w,) = [w for w in report.warnings if w.code == "singleton_group"]
    assert w.count == 1 and w.rows == [2] and "R/(1+eps)" in w.message


# --- §7.3 grpo_vectorized ([P]) -------------------------------------------------------------------------
def test_grpo_vectorized_ignores_the_std_flag():
    a1, _, _ = computed(ONE_GROUP, "grpo_vectorized", norm_adv_by_std=False)
    close(a1, [[0.999998], [-0.999998], [0.0]])


def test_grpo_vectorized_low_variance_group_equals_grpo():
    t = example_table([[1.0], [1.0005]], [[1], [1]], ["a", "a"])
    a_vec, _, _ = computed(t, "grpo_vectorized")
    a_grpo, _, _ = computed(t, "grpo")
    close(a_vec, [[-0.7051], [0.7051]], atol=1e-4)
    close(a_vec, a_grpo, atol=1e-5)


def test_grpo_vectorized_all_equal_group_shows_verls_ulp_noise():
    t = example_table([[0.8132702]] * 3, [[1]] * 3, ["a"] * 3)
    adv, _, _ = computed(t, "grpo_vectorized")
    assert sorted(abs(round(a[0], 4)) for a in adv) == [0.0555, 0.0555, 0.0555]


# §2.3: grpo_vectorized forms groups with verl's as_torch_index, which converts the uids of a batch with int()
# when all of them convert; verl 0.9.1 gives [0.7071058, -0.7071058, 0.7071047, -0.7071047] here
NUMERIC_UIDS = example_table([[1.0], [0.0], [0.5], [0.0]], [[1]] * 4, ["1", "01", "2", "2"])


def merge_warning(report):
    return next((w for w in report.warnings if w.code == "uid_merge_grpo_vectorized"), None)


def test_grpo_vectorized_merges_uids_that_convert_to_one_integer_as_verl():
    adv, _, report = computed(NUMERIC_UIDS, "grpo_vectorized")
    close(adv, [[0.7071058], [-0.7071058], [0.7071047], [-0.7071047]])
    assert report.groups.count == 2 and report.groups.singletons == 0
    w = merge_warning(report)
    assert w.count == 1 and w.rows == [0, 1] and "'1'/'01'" in w.message


def test_other_estimators_and_batches_with_a_non_integer_uid_keep_them_apart():
    adv, _, report = computed(NUMERIC_UIDS, "grpo")
    close(adv, [[0.999999], [0.0], [0.7071047], [-0.7071047]])
    assert report.groups.count == 3 and merge_warning(report) is None
    t = example_table([[1.0], [0.0], [0.5], [0.0]], [[1]] * 4, ["1", "01", "x", "x"])  # "x" does not convert
    adv, _, report = computed(t, "grpo_vectorized")
    close(adv, [[0.999999], [0.0], [0.7071047], [-0.7071047]])
    assert merge_warning(report) is None


def test_grpo_vectorized_merges_within_each_batch_only():
    t = NUMERIC_UIDS.append_column("step", pa.array([0, 0, 1, 1])).set_column(
        2, "uid", pa.array(["1", "01", "1", "x"]))
    adv, _, report = computed(t, "grpo_vectorized", batch_key="step")
    close(adv, [[0.7071058], [-0.7071058], [0.5 / (1 + 1e-6)], [0.0]])
    assert report.groups.count == 3 and merge_warning(report).count == 1


# --- §7.5 / §7.6 RLOO -----------------------------------------------------------------------------------
def test_rloo_examples():
    close(computed(ONE_GROUP, "rloo")[0], [[0.75], [-0.75], [0.0]])
    t = example_table([[1.0], [0.0], [0.5]], [[1], [1], [1]], ["a", "a", "b"])
    close(computed(t, "rloo")[0], [[1.0], [-1.0], [0.5]])
    close(computed(t, "rloo_vectorized")[0], [[1.0], [-1.0], [0.0]])


# --- §7.7 REINFORCE++ -----------------------------------------------------------------------------------
def test_reinforce_plus_plus_full_mask_is_all_zero():
    adv, ret, report = computed(example_table([[0, 0, 1]], [[1, 1, 1]]), "reinforce_plus_plus")
    close(adv, [[0, 0, 0]])
    close(ret, [[1, 1, 1]])
    # all valid values equal: verl's float32 mean leaves noise here (±2.98e-4 for 0.3 over 7 tokens); said so
    assert "whitening_ill_conditioned" in report.warning_codes()


def test_whitening_of_nearly_constant_values_is_flagged_per_batch():
    """Returns 0.90006 with a std of 5.1e-5: one float32 ulp of the mean (6e-8) over that std moves every
    advantage by 5.3e-4 (on such data verl's float32 sum left advantages 9.8e-4 away from rladv's)."""
    near = [[0, 0, 0, 0.9], [0, 0, 0, 0.90012], [0, 0, 0, 0.90005]]
    spread = [[0, 0, 1.0], [0, 0, 0.0], [0, 0, 0.5]]
    t = example_table(near + spread, [[1] * 4] * 3 + [[1] * 3] * 3).append_column("step", pa.array([0, 0, 0, 1, 1, 1]))
    _, _, report = computed(t, "reinforce_plus_plus", batch_key="step")
    w = next(w for w in report.warnings if w.code == "whitening_ill_conditioned")
    assert w.count == 1 and w.rows == [0] and "by up to 5.3e-04" in w.message
    _, _, report = computed(t.slice(3), "reinforce_plus_plus")
    assert "whitening_ill_conditioned" not in report.warning_codes()


def test_reinforce_plus_plus_carry_by_default_and_reset_one_row():
    """verl 0.9.1's default ``carry``: the return flows through the mask-0 position; ``reset`` (the chapter's
    form) restarts it there, which cuts the first token's credit."""
    t = example_table([[0, 0, 1]], [[1, 0, 1]])
    adv, ret, report = computed(t, "reinforce_plus_plus")
    close(adv, [[0, 0, 0]])
    close(ret, [[1, 0, 1]])
    assert "as verl 0.9.1 does" in _message(report, "credit_reset_at_mask")  # the row where the modes differ
    adv, ret, report = computed(t, "reinforce_plus_plus", rpp_mask_mode="reset")
    close(adv, [[-0.7071068, 0, 0.7071068]])
    close(ret, [[0, 0, 1]])  # [S] G = [0, 1, 1]; the mask-0 position is written as 0
    assert "in reset mode cut a reward off" in _message(report, "credit_reset_at_mask")


def _message(report, code: str) -> str:
    return next(w.message for w in report.warnings if w.code == code)


def test_reinforce_plus_plus_two_rows():
    t = example_table([[0, 0, 1], [0, 0, 0]], [[1, 0, 1], [1, 1, 1]])
    adv, _, _ = computed(t, "reinforce_plus_plus")
    close(adv[:1], [[1.0954452, 0, 1.0954452]])
    adv, _, report = computed(t, "reinforce_plus_plus", rpp_mask_mode="reset")
    close(adv, [[-0.4472136, 0, 1.7888542], [-0.4472136] * 3])
    assert "whitening_ill_conditioned" not in report.warning_codes()


def test_reinforce_plus_plus_discounted():
    t = example_table([[0, 0, 1], [0, 0, 0]], [[1, 1, 1], [1, 1, 0]])
    adv, ret, _ = computed(t, "reinforce_plus_plus", gamma=0.9)
    close(ret[:1], [[0.8099999, 0.9, 1.0]])
    close(adv, [[0.5367303, 0.7169757, 0.9172483], [-1.0854772, -1.0854772, 0]])


# --- §7.8 REINFORCE++ with baseline ---------------------------------------------------------------------
def test_reinforce_plus_plus_baseline_example():
    t = example_table([[0, 0, 1.0], [0, 0, 0], [0, 0, 0.5], [0, 0, 0.2]],
              [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], ["a", "a", "a", "b"])
    adv, ret, _ = computed(t, "reinforce_plus_plus_baseline")
    close(adv, [[0.9612808] * 3, [-1.5832859, -1.5832859, 0], [-0.3110026, 0, 0], [0.1979108] * 3])
    assert ret == adv


# --- §11 pipeline: KL on the original mask, then rejection, then the estimator --------------------------
def test_kl_then_rejection_then_grpo_and_rloo():
    s = [[0, 0, 1], [0, 0, 0]]
    old = [[-1, -2, -0.5], [-1, -1, -1]]
    ref = [[-1.5, -1, -0.5], [-1, -1.2, -1]]
    # rollout log-probs that make token 1 of row 0 the only one outside the token_k1 band [1/2, 2]
    rollout = [[-1, -3, -0.5], [-1, -1, -1]]
    t = example_table(s, [[1, 1, 1], [1, 1, 0]], ["u", "u"], old_log_probs=old, ref_log_prob=ref,
                      rollout_log_probs=rollout)
    settings = dict(kl_coef=0.1, kl_penalty="kl", rollout_rs="token_k1", rollout_rs_threshold="2.0")
    out, report = rladv_cli.compute(t, estimator="grpo", device="cpu", **settings)
    close(out["token_level_rewards"].to_pylist(), [[-0.05, 0.1, 1.0], [0, -0.02, 0]])
    assert out["response_mask"].to_pylist() == [[1, 0, 1], [1, 1, 0]]
    assert out["loss_mask"].to_pylist() == [[1, 1, 1], [1, 1, 0]]
    assert report.kl.mean == pytest.approx(-0.0333333, abs=1e-6)
    close(out["advantages"].to_pylist(), [[0.7071058, 0, 0.7071058], [-0.7071058, -0.7071058, 0]])
    assert {"kl_raises_reward", "rejected_in_group_baseline"} <= set(report.warning_codes())
    out, _ = rladv_cli.compute(t, estimator="rloo", device="cpu", **settings)
    close(out["advantages"].to_pylist(), [[1.07, 0, 1.07], [-1.07, -1.07, 0]], atol=1e-6)


def test_kl_chapter_example():
    kld = [0.1, 0.2, 0.3]
    t = example_table([[0, 0, 1]], [[1, 1, 1]], ["u"], old_log_probs=[kld], ref_log_prob=[[0, 0, 0]])
    out, _ = rladv_cli.compute(t, estimator="grpo", device="cpu", kl_coef=0.01, kl_penalty="kl")
    got = np.asarray(out["token_level_rewards"].to_pylist()[0], dtype=np.float32)
    np.testing.assert_array_equal(got, np.float32([-0.0010000000475, -0.0020000000950, 0.9969999790]))


# --- §4 KL estimates and controllers --------------------------------------------------------------------
@pytest.mark.parametrize(
    "mode, want",
    [("kl", 0.5), ("k1", 0.5), ("abs", 0.5), ("mse", 0.125), ("k2", 0.125),
     ("low_var_kl", math.exp(-0.5) + 0.5 - 1), ("k3", math.exp(-0.5) + 0.5 - 1), ("k1+", 0.5), ("k3+", math.exp(-0.5) + 0.5 - 1)],
)
def test_kl_penalty_modes(mode, want):
    assert kl_penalty(torch.tensor([-1.0]), torch.tensor([-1.5]), mode).item() == pytest.approx(want, rel=1e-6)


def test_kl_signed_and_clamped():
    assert kl_penalty(torch.tensor([-2.0]), torch.tensor([-1.0]), "kl").item() == -1.0
    assert kl_penalty(torch.tensor([-100.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0


def test_adaptive_controller_step():
    ctrl = KLController("adaptive", 0.1, target=0.1, horizon=10000)
    ctrl.update(current_kl=0.5, n_steps=100)  # error clipped to 0.2
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 100 / 10000))
    fixed = KLController("fixed", 0.1, target=0.1, horizon=10000)
    fixed.update(current_kl=0.5, n_steps=100)
    assert fixed.value == 0.1


# --- §1 score placement ---------------------------------------------------------------------------------
def test_scalar_score_on_last_position_even_an_observation():
    t = pa.table({
        "uid": ["a", "a"],
        "response_mask": pa.array([[1, 1, 0], [1, 1]], pa.list_(pa.int8())),
        "score": pa.array([1.0, 0.0], pa.float32()),
    })
    out, report = rladv_cli.compute(t, estimator="grpo", device="cpu")
    assert out["token_level_rewards"].to_pylist() == [[0, 0, 1.0], [0, 0]]
    assert "score_on_masked_position" in report.warning_codes()


def test_scalar_score_before_padding():
    t = pa.table({
        "uid": ["a", "a"],
        "response_mask": pa.array([[1, 1, 0, 0], [1, 1, 1, 1]], pa.list_(pa.int8())),
        "attention_mask": pa.array([[1, 1, 0, 0], [1, 1, 1, 1]], pa.list_(pa.int8())),
        "score": pa.array([1.0, 0.5], pa.float32()),
    })
    out, report = rladv_cli.compute(t, estimator="grpo", device="cpu")
    assert out["token_level_rewards"].to_pylist() == [[0, 1.0, 0, 0], [0, 0, 0, 0.5]]
    assert report.tokens.padding == 2 and report.tokens.observation == 0


# --- §7.4 grpo_passk ------------------------------------------------------------------------------------
def test_grpo_passk_only_the_best_row_learns():
    adv, _, _ = computed(ONE_GROUP, "grpo_passk")
    close(adv, [[0.999998], [0.0], [0.0]])
    adv, _, _ = computed(ONE_GROUP, "grpo_passk", norm_adv_by_std=False)
    close(adv, [[0.5], [0.0], [0.0]])


def test_grpo_passk_ties_give_zero_and_singletons_stop_the_run():
    tie = example_table([[1.0], [1.0], [0.0]], [[1]] * 3, ["a"] * 3)
    assert computed(tie, "grpo_passk")[0] == [[0.0], [0.0], [0.0]]
    single = example_table([[1.0], [0.0], [0.5]], [[1]] * 3, ["a", "a", "lonely"])
    with pytest.raises(rladv_cli.ComputeError, match="at least 2 samples per group. Got 1 for group lonely"):
        computed(single, "grpo_passk")


# --- §7.9 remax -----------------------------------------------------------------------------------------
def test_remax_example():
    t = example_table([[0.1, 0, 1.0]], [[1, 1, 1]]).append_column("reward_baselines", pa.array([0.5], pa.float32()))
    adv, ret, _ = computed(t, "remax")
    close(ret, [[1.1, 1.0, 1.0]])
    close(adv, [[0.6, 0.5, 0.5]])


# --- §7.10 opo ------------------------------------------------------------------------------------------
def test_opo_length_weighted_baseline():
    t = example_table([[0, 0, 1.0], [0.0], [0, 0.5]], [[1, 1, 1], [1], [1, 1]], ["a", "a", "a"])
    adv, _, _ = computed(t, "opo")
    close(adv, [[1 / 3] * 3, [-2 / 3], [-1 / 6] * 2])


# --- §7.11 gpg ------------------------------------------------------------------------------------------
def test_gpg_examples():
    close(computed(ONE_GROUP, "gpg")[0], [[0.75], [-0.75], [0.0]])
    t = example_table([[1.0], [0.0], [0.0], [0.0]], [[1]] * 4, ["a", "a", "b", "b"])
    close(computed(t, "gpg")[0], [[2.0], [-2.0], [0.0], [0.0]])


# --- §7.13 gdpo -----------------------------------------------------------------------------------------
def test_gdpo_single_component_form():
    t = example_table([[0, 0, 1.0], [0.0, 0, 0], [0, 0, 0.5]], [[1, 1, 1], [1, 0, 0], [1, 1, 0]], ["a", "a", "a"])
    adv, ret, _ = computed(t, "gdpo")
    close(adv, [[0.8164966] * 3, [-1.6329931, 0, 0], [-0.4082482, -0.4082482, 0]])
    assert ret == adv


def test_gdpo_weighted_components_without_a_score_column():
    t = pa.table({
        "uid": ["a", "a", "b", "b"],
        "response_mask": pa.array([[1, 1], [1], [1], [1, 1]], pa.list_(pa.int8())),
        "accuracy": pa.array([1.0, 0.0, 1.0, 1.0], pa.float32()),
        "fmt": pa.array([0.0, 1.0, 0.5, 0.0], pa.float32()),
    })
    out, _ = rladv_cli.compute(t, estimator="gdpo", reward_components=["accuracy", "fmt"], reward_weights=[1.0, 0.5],
                               device="cpu")
    # per component grpo (groups of 2: ±1/(sqrt(0.5)+eps) = ±0.7071058, equal -> 0), weighted sum per token
    a = np.float32(0.7071058)
    a_sum = [[a - 0.5 * a] * 2, [-a + 0.5 * a], [0.5 * a], [-0.5 * a] * 2]
    flat = np.concatenate([np.asarray(r, dtype=np.float64) for r in a_sum])
    mu, sd = flat.mean(), flat.std(ddof=1)
    close(out["advantages"].to_pylist(), [[(v - mu) / sd for v in r] for r in a_sum], atol=2e-6)
    assert out["token_level_rewards"].to_pylist() == [[0, 0], [0], [0], [0, 0]]


def test_gdpo_groups_are_judged_on_their_components():
    """Group a has equal scores but different components (non-zero advantages); group b has equal components
    (each component's group-normalised advantage is 0): b is the all-equal group, and the outcome split ranks
    rows by the weighted component sum."""
    t = pa.table({"uid": ["a", "a", "a", "b", "b", "b"],
                  "response_mask": pa.array([[1, 1, 1]] * 6, pa.list_(pa.int8())),
                  "score": pa.array([1, 1, 1, 0, 1, 0.5], pa.float32()),
                  "acc": pa.array([1, 0, 0.5, 1, 1, 1], pa.float32()),
                  "fmt": pa.array([0, 1, 0, 1, 1, 1], pa.float32())})
    out, report = rladv_cli.compute(t, estimator="gdpo", reward_components=["acc", "fmt"], device="cpu")
    assert report.groups.all_equal == 1
    w = next(w for w in report.warnings if w.code == "all_equal_group")
    assert w.rows == [3] and "equal reward components" in w.message
    close(out["advantages"].to_pylist()[3:], [[0] * 3] * 3)  # 0 before whitening; whitening shifts by ~1e-7
    parts = {p.label: p.rows for p in report.distributions.advantage_splits.by_outcome}
    assert parts == {"above group mean": 2, "below group mean": 1, "all-equal group": 3}  # acc+fmt: 1, 1, .5


@pytest.mark.parametrize("estimator", [name for name, e in ESTIMATORS.items() if not e.groups])
def test_estimators_without_groups_do_not_blame_groups(estimator):
    """Equal totals in a uid group mean nothing to an estimator that does not use groups: no group warning, no
    group cause in the verdict."""
    t = example_table([[0, 0, 1.0], [0, 0, 1.0], [0, 1.0, 0]], [[1, 1, 1]] * 3, ["a", "a", "b"],
              values=[[0.1, 0.5, 0.2], [0.3, 0.1, 0.9], [0.2, 0.2, 0.2]])
    t = t.append_column("reward_baselines", pa.array([0.5, 0.2, 0.1], pa.float32()))
    _, report = rladv_cli.compute(t, estimator=estimator, device="cpu")
    assert not {w.code for w in report.warnings} & {"all_equal_group", "singleton_group", "group_size_mismatch"}
    assert set(report.dead_signal["causes"]) == {"rejected", "other"}
    assert not {c.code for c in report.verdict.causes} & {"all_equal_group", "singleton_group"}
    assert report.verdict.groups is None


# --- §3 DAPO overlong shaping ---------------------------------------------------------------------------
def test_dapo_overlong_penalty_example():
    lengths = [15, 16, 18, 20]
    t = pa.table({
        "uid": ["a"] * 4,
        "response_mask": pa.array([[1] * L for L in lengths], pa.list_(pa.int8())),
        "score": pa.array([1.0] * 4, pa.float32()),
    })
    out, report = rladv_cli.compute(t, estimator="grpo", overlong_buffer_len=4, overlong_penalty_factor=1.0,
                                    max_resp_len=20, device="cpu")
    assert [r[-1] for r in out["token_level_rewards"].to_pylist()] == [1.0, 1.0, 0.5, 0.0]
    assert report.overlong == {"rows_penalised": 2, "mean_penalty_of_penalised": -0.75, "min_penalty": -1.0}


def test_dapo_counts_observations_not_padding_and_shapes_rm_scores_too():
    t = pa.table({
        "uid": ["a", "a"],
        "response_mask": pa.array([[1, 0, 0, 1, 0], [1, 1, 1, 0, 0]], pa.list_(pa.int8())),
        "attention_mask": pa.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[0, 0, 0, 0, 1.0], [0, 0, 1.0, 0, 0]], pa.list_(pa.float32())),
    })
    out, _ = rladv_cli.compute(t, estimator="grpo", overlong_buffer_len=2, overlong_penalty_factor=1.0,
                               max_resp_len=5, device="cpu")
    # L = 5 (observations count) -> exceed 2 -> -1.0 at position 4; L = 3 (padding does not) -> 0
    assert out["token_level_rewards"].to_pylist() == [[0, 0, 0, 0, 0.0], [0, 0, 1.0, 0, 0]]


def test_dapo_needs_max_resp_len():
    with pytest.raises(rladv_cli.ConfigError, match="needs max_resp_len"):
        rladv_cli.Config(estimator="grpo", overlong_buffer_len=4)


# --- §8 multi-output sessions ---------------------------------------------------------------------------
def sessions_table():
    # uid u: session s1 has outputs 0 and 1 (final: row 1, R = 1), session s2 one output (R = 0);
    # the copied reward sits on every output of s1, as verl's reward loop does.
    return pa.table({
        "uid": ["u", "u", "u"],
        "session_id": ["s1", "s1", "s2"],
        "output_index": pa.array([0, 1, 0], pa.int64()),
        "response_mask": pa.array([[1, 1], [1, 1, 0], [1]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[0, 1.0], [0, 0, 1.0], [0.0]], pa.list_(pa.float32())),
    })


def test_grpo_folds_each_session_to_its_final_output():
    out, report = rladv_cli.compute(sessions_table(), estimator="grpo", device="cpu")
    # group of the two final outputs: R = [1, 0] -> ±0.7071058; s1's first output takes s1's advantage
    close(out["advantages"].to_pylist(), [[0.7071058] * 2, [0.7071058, 0.7071058, 0], [-0.7071058]])
    assert report.sessions["folded"] is True and report.sessions["sessions"] == 2


def test_adaptive_kl_steps_on_verls_float32_current_kl():
    """verl's apply_kl_penalty: current_kl = torch.mean(masked_mean(kld, mask, axis=-1)) on the batch padded to
    [B, T], all float32; the controller steps on it. A float64 mean gives another coefficient, and at token
    rewards around 20 that moved a shaped reward by one float32 ulp (found by the verl pipeline differential)."""
    g = torch.Generator().manual_seed(7)
    lengths = [int(n) for n in torch.randint(1, 40, (24,), generator=g)]
    old = [(torch.randn(n, generator=g) * 3 - 1).tolist() for n in lengths]
    ref = [(torch.randn(n, generator=g) * 3 - 1).tolist() for n in lengths]
    step = [1] * 12 + [2] * 12
    t = pa.table({"uid": [f"u{i // 4}" for i in range(24)], "step": step,
                  "response_mask": pa.array([[1] * n for n in lengths], pa.list_(pa.int8())),
                  "old_log_probs": pa.array(old, pa.list_(pa.float32())),
                  "ref_log_prob": pa.array(ref, pa.list_(pa.float32())),
                  "rm_scores": pa.array([[0.0] * (n - 1) + [1.0] for n in lengths], pa.list_(pa.float32()))})
    # verl's numbers: batch 1 padded to its longest response, float32 throughout, then the controller
    rows = range(12)
    width = max(lengths[i] for i in rows)
    pad = lambda lists: torch.tensor([lists[i] + [0.0] * (width - lengths[i]) for i in rows])  # noqa: E731
    mask = torch.tensor([[1] * lengths[i] + [0] * (width - lengths[i]) for i in rows])
    kld = (pad(old) - pad(ref)) * mask
    current_kl = torch.mean((kld * mask).sum(-1) / (mask.sum(-1) + 1e-8), dim=0).item()
    target = current_kl * 1.1  # |current_kl / target - 1| < 0.2: the step depends on current_kl's every bit
    want = 0.05 * (1 + float(np.clip(current_kl / target - 1, -0.2, 0.2)) * 12 / 50)
    _, report = rladv_cli.compute(t, estimator="grpo", kl_coef=0.05, kl_ctrl="adaptive", kl_target=target,
                                  kl_horizon=50, batch_key="step", device="cpu")
    assert [b.coef for b in report.kl.batches] == [0.05, want]
    assert report.kl.batches[0].kl == current_kl


@pytest.mark.parametrize("estimator", [name for name, e in ESTIMATORS.items() if e.rounding])  # the optimal-token baselines
def test_an_optimal_token_baseline_whose_weights_cancel_is_reported(estimator):
    """w = 1 - 2π + Σπ² is negative where sum_pi_squared < π² (never for a policy's own Σπ²): the baseline
    ΣGW / ΣW then divides by a sum that cancels, and float32 rounding of the sums (verl's) moves it far."""
    pi, spsq = [0.5, 0.6, 0.5, 0.5], [0.2, 0.000001, 0.3, 0.3]  # w = [0.2, -0.199999, 0.3, 0.3]
    t = pa.table({"uid": ["a", "a", "b", "b"], "response_mask": pa.array([[1]] * 4, pa.list_(pa.int8())),
                  "rm_scores": pa.array([[1.0], [0.5], [1.0], [0.0]], pa.list_(pa.float32())),
                  "old_log_probs": pa.array([[math.log(p)] for p in pi], pa.list_(pa.float32())),
                  "sum_pi_squared": pa.array([[s] for s in spsq], pa.list_(pa.float32()))})
    out, report = rladv_cli.compute(t, estimator=estimator, device="cpu")
    warning = next(w for w in report.warnings if w.code == "baseline_ill_conditioned")
    assert (warning.count, warning.rows) == (1, [0])  # group "a" only
    assert [(w.count, w.rows) for w in report.warnings if w.code == "negative_token_weight"] == [(1, [1])]
    # b = (1·0.2 - 0.5·0.199999) / ~1e-6 ≈ 1e5; 2^-24·(Σ|GW| + |b|·Σ|W|) / |ΣW| ≈ 6e-8·(0.3 + 1e5·0.4) / 1e-6
    assert 1e3 < float(re.search(r"by up to ([0-9.]+e[+-][0-9]+)", warning.message).group(1)) < 1e4
    _, report = rladv_cli.compute(t.set_column(4, "sum_pi_squared", pa.array([[0.3]] * 4, pa.list_(pa.float32()))),
                                  estimator=estimator, device="cpu")
    assert not {"baseline_ill_conditioned", "negative_token_weight"} & {w.code for w in report.warnings}


def test_sessions_that_verl_would_key_alike_stay_apart_and_are_reported():
    """verl 0.9.1 keys a session by the string f"{uid}_{session_id}": ("a_b", "c") and ("a", "b_c") are one
    session there. rladv keeps the (uid, session_id) pairs apart and names the rows."""
    t = pa.table({"uid": ["a_b", "a_b", "a", "a", "z", "z"], "session_id": ["c", "d", "b_c", "e", "b_c", "x"],
                  "output_index": pa.array([0, 0, 1, 0, 0, 0], pa.int64()),
                  "response_mask": pa.array([[1, 1]] * 6, pa.list_(pa.int8())),
                  "score": [1.0, 0.0, 0.5, 0.25, 1.0, 1.0]})
    out, report = rladv_cli.compute(t, estimator="grpo", device="cpu")
    # groups {0, 1}: R = [1, 0], ±0.5 / (0.7071068 + 1e-6); {2, 3}: R = [0.5, 0.25], ±0.125 / (0.1767767 + 1e-6);
    # {4, 5} all equal. verl: rows 0 and 2 are one session (final output row 2), row 0 takes row 2's advantage
    close(out["advantages"].to_pylist(), [[0.7071058] * 2, [-0.7071058] * 2, [0.7071028] * 2, [-0.7071028] * 2,
                                          [0.0] * 2, [0.0] * 2])
    warning = next(w for w in report.warnings if w.code == "session_key_collision")
    assert warning.count == 2 and warning.rows == [0, 2]
    _, report = rladv_cli.compute(t.set_column(1, "session_id", pa.array(["c", "d", "bc", "e", "b_c", "x"])),
                                  estimator="grpo", device="cpu")
    assert "session_key_collision" not in {w.code for w in report.warnings}
    _, report = rladv_cli.compute(t, estimator="rloo", device="cpu")  # verl folds sessions for grpo only
    assert "session_key_collision" not in {w.code for w in report.warnings}


def test_other_estimators_count_every_output():
    out, report = rladv_cli.compute(sessions_table(), estimator="rloo", device="cpu")
    close(out["advantages"].to_pylist(), [[0.5] * 2, [0.5, 0.5, 0], [-1.0]])
    assert report.sessions["folded"] is False


def test_dead_signal_accounting_by_cause():
    t = example_table([[1.0], [0.0], [0.5], [0.0], [0.0], [0.0], [0.0, 0.0]], [[1]] * 6 + [[1, 1]],
              ["A", "A", "A", "B", "B", "B", "lonely"])
    _, report = rladv_cli.compute(t, estimator="rloo_vectorized", device="cpu")
    # A: the 0.5 row sits on the mean (other); B is all-equal (3 tokens); the singleton gets 0 (2 tokens)
    assert report.dead_signal == {"actor_tokens": 8, "zero_advantage_tokens": 6, "share": 0.75,
                                  "causes": {"rejected": 0, "all_equal_group": 3, "singleton": 2, "other": 1}}
