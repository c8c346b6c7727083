"""The trainer conventions (``--convention``, docs/conventions.md): hand-checked worked examples of each
trainer's estimators, their grouping rules, the settings each refuses, and invariants (chunking, masks). The
differential tests against the trainers' own code are in tests/against_peers (optional)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from conftest import run, table
from rladv_cli.errors import ComputeError, ConfigError
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


def test_blocks_that_mix_uids_are_flagged():
    t = rows([1.0, 0.0, 0.0, 1.0], uid=["a", "b", "a", "b"])
    _, report = advantages(t, "grpo", convention="trl", group_size=2)
    flagged = {w.code: w for w in report.warnings}["block_mixes_uids"]
    assert flagged.count == 2 and flagged.rows == [0, 2]


@pytest.mark.parametrize("t, settings, words", [
    (rows([1.0, 0.0, 1.0]), {"group_size": 2}, ["blocks of 2 rows", "has 3 rows"]),
    (rows([1.0, 0.0, 1.0]), {}, ["--group-size N", "no uid column"]),
    (rows([1.0, 0.0, 1.0], uid=["a", "a", "b"]), {}, ["2 sizes", "--group-size N"]),
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


def test_skyrl_grpo_is_verl_grpo():
    t = rows([1.0, 0.0, 0.5, 0.7], uid=["a", "a", "a", "s"])
    assert advantages(t, "grpo", convention="skyrl")[0] == advantages(t, "grpo")[0]


# ------------------------------------------------------------------ what each convention refuses
@pytest.mark.parametrize("settings, words", [
    ({"convention": "trl", "estimator": "grpo", "kl_coef": 0.1}, ["--kl-coef", "TRL puts KL in the loss"]),
    ({"convention": "nemo_rl", "estimator": "grpo", "rollout_rs": "token_k1", "rollout_rs_threshold": "2.0"},
     ["--rollout-rs", "verl's pipeline", "--convention verl"]),
    ({"convention": "openrlhf", "estimator": "group_norm", "kl_coef": 0.1, "kl_penalty": "low_var_kl"},
     ["--kl-penalty low_var_kl", "k1, k2, k3"]),
    ({"convention": "openrlhf", "estimator": "group_norm", "kl_coef": -0.1}, ["<= 0 as 0"]),
    ({"convention": "trl", "estimator": "group_norm"}, ["not", "group_norm is an estimator of --convention openrlhf"]),
    ({"convention": "trll", "estimator": "grpo"}, ["unknown convention 'trll'", "did you mean trl?"]),
])
def test_settings_a_convention_has_no_counterpart_for_are_refused(settings, words):
    from rladv_cli.config.settings import Config

    with pytest.raises(ConfigError) as err:
        Config(**settings)
    message = str(err.value)
    assert "\n" not in message and all(w.replace("not", "unknown estimator") in message for w in words), message


def test_a_trainers_hard_coded_epsilon_is_not_a_setting():
    from rladv_cli.config.resolve import refused_inert
    from rladv_cli.config.settings import Config

    cfg = Config(convention="trl", estimator="grpo", epsilon=1e-3)
    assert refused_inert(cfg, {"epsilon": 1e-3}, ray_engine=False) == (
        "--epsilon has no effect with --estimator grpo --convention trl, which reads --scale-rewards")


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
