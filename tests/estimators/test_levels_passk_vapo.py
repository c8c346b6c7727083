"""grpo_norm, pkpo, passk_analytic and vapo (docs/semantics.md §7.16–§7.19): the worked examples, computed by hand
here, through the library; their own settings drawn at random against the oracle (tests/reference.py); chunking
and batches; and the one-line errors of their settings."""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest
import reference as ref
import strategies as S
import torch
from conftest import assert_one_line_error, rladv, run, table, write
from hypothesis import event, given
from hypothesis import strategies as st
from strategies import attempt, examples, failed, needs
from test_properties import ATOL, RTOL, assert_same_outcome, comparable_rows, rows_of

from rladv_cli.errors import ComputeError, ConfigError
from rladv_cli.estimators.inputs import Inputs
from rladv_cli.config.settings import Params
from rladv_cli.estimators.registry import ESTIMATORS
from rladv_cli.estimators.vapo import vapo
from rladv_cli.tensors.batch import from_arrow

EPS = 1e-6
LEVELS = ("group", "batch", "none")


def scalar_rows(totals, uids, **columns) -> pa.Table:
    """One token per row holding its total, mask 1."""
    return table(uid=uids, response_mask=[[1]] * len(totals), rm_scores=[[float(x)] for x in totals], **columns)


def advantages(t: pa.Table, estimator: str, **settings) -> list[float]:
    """The first position's advantage of each row."""
    out, _ = run(t, estimator, **settings)
    return [row[0] for row in out["advantages"].to_pylist()]


def close(got, want, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=0, atol=atol)


# --- §7.16 grpo_norm ----------------------------------------------------------------------------------------
# groups A: R = [1, 0, .5] (μ = .5, σ = .5) and B: R = [0, 1, 1] (μ = 2/3, σ = sqrt(1/3) = .5773503);
# the batch: μ = 3.5/6 = .5833333, Σ (R − μ)² = 1.2083333, σ = sqrt(1.2083333/5) = .4915960
TWO_GROUPS = scalar_rows([1, 0, 0.5, 0, 1, 1], ["A", "A", "A", "B", "B", "B"])
S_A, S_B, S_BATCH = 0.5 + EPS, 0.5773503 + EPS, 0.4915960 + EPS  # each std + ε
GROUP_CENTRED = (0.5, -0.5, 0, -2 / 3, 1 / 3, 1 / 3)
BATCH_CENTRED = (0.4166667, -0.5833333, -0.0833333, -0.5833333, 0.4166667, 0.4166667)


@pytest.mark.parametrize("mean, std, want", [
    ("group", "group", [x / s for x, s in zip(GROUP_CENTRED, [S_A] * 3 + [S_B] * 3)]),
    ("batch", "batch", [x / S_BATCH for x in BATCH_CENTRED]),
    ("group", "batch", [x / S_BATCH for x in GROUP_CENTRED]),  # LitePPO, TRL's scale_rewards="batch"
    ("batch", "group", [x / s for x, s in zip(BATCH_CENTRED, [S_A] * 3 + [S_B] * 3)]),
    ("group", "none", GROUP_CENTRED),
    ("none", "batch", [x / S_BATCH for x in (1, 0, 0.5, 0, 1, 1)]),
    ("batch", "none", BATCH_CENTRED),
    ("none", "none", [1, 0, 0.5, 0, 1, 1]),
])
def test_grpo_norm_levels(mean, std, want):
    close(advantages(TWO_GROUPS, "grpo_norm", mean_level=mean, std_level=std), want)


def test_grpo_norm_group_group_is_grpo_to_the_bit():
    t = scalar_rows([0.8132702, 0.8132702, 0.8132702, 1.0, 1.0005, 3.7], ["a", "a", "a", "b", "b", "c"])
    assert run(t, "grpo_norm")[0]["advantages"].equals(run(t, "grpo")[0]["advantages"])


def test_grpo_norm_a_level_of_one_row_has_mean_0_and_std_1():
    one = scalar_rows([0.5], ["s"])  # a singleton group in a one-row batch: R/(1 + ε) at either level
    for mean in LEVELS:
        for std in LEVELS:
            want = 0.5 / (1 + EPS) if std != "none" else 0.5
            close(advantages(one, "grpo_norm", mean_level=mean, std_level=std), [want])


def test_grpo_norm_batch_level_is_the_batch_key_batch():
    t = scalar_rows([1, 0, 0.5, 0, 1, 1], ["A", "A", "A", "B", "B", "B"], step=[0, 0, 0, 1, 1, 1])
    got = advantages(t, "grpo_norm", mean_level="batch", std_level="batch", batch_key="step")
    close(got, [0.999998, -0.999998, 0, -1.1547005, 0.5773503, 0.5773503], atol=3e-6)  # each batch one group here
    close(advantages(t, "grpo_norm", mean_level="batch", std_level="batch"), got)  # the step column, by default
    whole = advantages(t, "grpo_norm", mean_level="batch", std_level="batch", batch_key="none")
    close(whole, [x / S_BATCH for x in BATCH_CENTRED])


def test_grpo_norm_epsilon_has_no_effect_without_a_std(tmp_path):
    path = write(tmp_path / "a.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]])
    result = rladv("compute", path, "--estimator", "grpo_norm", "--std-level", "none", "--epsilon", "0.1")
    assert_one_line_error(result, "--epsilon has no effect", "--std-level none")
    result = rladv("compute", path, "--estimator", "grpo_norm", "--mean-level", "median")
    assert result.exit_code != 0 and "median" in result.output and "Traceback" not in result.output


# --- §7.17 pkpo ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k, want", [
    # A = [1, 0, .5], k = 2: subsets {1,0} {1,.5} {0,.5}; row 1 gains 1 and .5, row .5 gains .5: [1.5, 0, .5] / 3
    # B = [0, 1, 1]: each 1 gains 1 in {0,1} and 0 in {1,1}: 1/3 each (ties share one value)
    (2, [0.5, 0, 1 / 6, 0, 1 / 3, 1 / 3]),
    (3, [0.5, 0, 0, 0, 0, 0]),  # one subset: the best row gains best − second best
    (1, [1 / 3, 0, 0.5 / 3, 0, 1 / 3, 1 / 3]),  # k = 1: R / n (the max of an empty set counts 0)
])
def test_pkpo_examples(k, want):
    close(advantages(TWO_GROUPS, "pkpo", k=k), want)


def test_pkpo_four_rows_and_negative_totals():
    # [0, .25, .5, 1], k = 2 (6 subsets): 1 gains 1 + .75 + .5, .5 gains .5 + .25, .25 gains .25
    close(advantages(scalar_rows([0, 0.25, 0.5, 1], ["g"] * 4), "pkpo"), [0, 0.25 / 6, 0.75 / 6, 2.25 / 6])
    close(advantages(scalar_rows([-1, -2], ["g", "g"]), "pkpo"), [1, 0])  # the gain over the other row's −2
    close(advantages(scalar_rows([-1, -2], ["g", "g"]), "pkpo", k=1), [-0.5, -1])


def test_pkpo_groups_need_k_rows(tmp_path):
    with pytest.raises(ComputeError, match=r"pkpo requires at least 4 samples per group \(k=4\). Got 3 for group A"):
        run(TWO_GROUPS, "pkpo", k=4)
    path = write(tmp_path / "a.parquet", uid=["a", "a", "b"], response_mask=[[1]] * 3, rm_scores=[[1.0], [0.0], [1.0]])
    assert_one_line_error(rladv("compute", path, "--estimator", "pkpo"), "at least 2 samples", "(--k 2)", "group b")
    assert_one_line_error(rladv("compute", path, "--estimator", "pkpo", "--k", "0"), "--k")
    with pytest.raises(ConfigError, match="^k: "):
        run(TWO_GROUPS, "pkpo", k=0)


# --- §7.18 passk_analytic -------------------------------------------------------------------------------------
@pytest.mark.parametrize("totals, k, want", [
    # n = 4, c = 1, k = 2: ρ = 1 − C(3,2)/C(4,2) = .5, σ = .5; correct (1 − .5)/σ; incorrect (.5 − C(2,1)/C(3,1))/σ
    ([1, 0, 0, 0], 2, [0.5 / 0.500001, *[(0.5 - 2 / 3) / 0.500001] * 3]),
    # k = 1 is GRPO with the population std: ρ = .25, σ = sqrt(.1875)
    ([1, 0, 0, 0], 1, [0.75 / (np.sqrt(0.1875) + EPS), *[-0.25 / (np.sqrt(0.1875) + EPS)] * 3]),
    # c = 2: ρ = 1 − 1/6, σ = sqrt(5)/6; incorrect (1/6 − C(1,1)/C(3,1))/σ
    ([1, 1, 0, 0], 2, [(1 / 6) / (np.sqrt(5) / 6 + EPS)] * 2 + [(1 / 6 - 1 / 3) / (np.sqrt(5) / 6 + EPS)] * 2),
    ([1, 1, 1, 0], 2, [0, 0, 0, 0]),  # n − c < k: every 2-subset passes, ρ = 1
    ([0, 0, 0, 0], 2, [0, 0, 0, 0]),  # c = 0: ρ = 0
])
def test_passk_analytic_examples(totals, k, want):
    close(advantages(scalar_rows(totals, ["g"] * 4), "passk_analytic", k=k), want)


def test_passk_analytic_refuses_a_non_binary_total(tmp_path):
    path = write(tmp_path / "r.parquet", uid=["a", "a", "a"], response_mask=[[1], [1], [1, 1]],
                 rm_scores=[[1.0], [0.0], [0.5, 0.0]])
    line = assert_one_line_error(rladv("compute", path, "--estimator", "passk_analytic"), "r.parquet", "passk_analytic",
                                 "neither 0 nor 1", row=2)
    assert "total reward 0.5" in line
    # KL shaping moves the totals off 0 and 1
    path = write(tmp_path / "kl.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]],
                 old_log_probs=[[-0.5], [-0.5]], ref_log_prob=[[-0.4], [-0.4]])
    assert_one_line_error(rladv("compute", path, "--estimator", "passk_analytic", "--kl-coef", "0.1"), "neither 0 nor 1")


# --- §7.19 vapo -----------------------------------------------------------------------------------------------
def raw_vapo(t: pa.Table, **settings):
    """vapo's raw (unwhitened) advantages and returns of ``t``, one chunk, the C loops or not."""
    b = from_arrow(t, 0, torch.device("cpu"))
    adv, ret = vapo(b, Inputs(), Params(**settings))
    offsets = b.row_offsets.tolist()
    rows = list(pairwise(offsets))
    return [adv[a:z].tolist() for a, z in rows], [ret[a:z].tolist() for a, z in rows]


def test_vapo_lambda_from_the_row_length():
    t = table(response_mask=[[1, 1, 1, 1]], rm_scores=[[0, 0, 1, 0]], values=[[0, 0, 0, 0]])
    adv, ret = raw_vapo(t, vapo_alpha=0.5)  # l = 4: λ = 1 − 1/(0.5·4) = 0.5; δ = r
    close(adv, [[0.25, 0.5, 1, 0]])
    close(ret, [[1, 1, 1, 0]])  # --value-lam 1: reward-to-go
    _, ret = raw_vapo(t, vapo_alpha=0.5, value_lam=0.0)
    close(ret, [[0, 0, 1, 0]])  # λ = 0: r_t + V_(t+1)


def test_vapo_short_rows_get_lambda_0_and_observations_are_skipped():
    t = table(response_mask=[[1, 1], [1, 0, 0, 1]], rm_scores=[[0, 1], [0, 0, 0, 1]],
              values=[[0.5, 0.5], [0.2, 9, 9, 0.4]])
    adv, ret = raw_vapo(t, vapo_alpha=0.05)  # l = 2: 1 − 1/0.1 < 0 → λ = 0; δ_0 = 0 + .5 − .5
    close(adv[0], [0, 0.5])
    close(adv[1], [0.2, 0.6, 0.6, 0.6])  # λ = 0; position 0 bootstraps from V_3 = .4 across the observation
    close(ret[1][0], 1.0)
    out, _ = run(t, "vapo")
    valid = np.array([0, 0.5, 0.2, 0.6])  # whitened over the batch's 4 valid tokens: mean .325
    close(out["advantages"].to_pylist()[0], (valid[:2] - 0.325) / np.sqrt(np.var(valid, ddof=1) + 1e-8))
    assert out["advantages"].to_pylist()[1][1:3] == [0, 0]


def test_vapo_equals_gae_when_every_row_has_one_length():
    t = table(uid=list("aab"), response_mask=[[1, 1, 0, 1]] * 3, rm_scores=[[0, 0.5, 0, 1], [1, 0, 0, 0], [0, 0, 0, -1]],
              values=[[0.1, 0.2, 0.3, 0.4], [0.5, -0.5, 0, 0.25], [0, 0, 0, 0]])
    lam = 1 - 1 / (0.5 * 3)  # l = 3 valid tokens
    for gamma in (1.0, 0.9):
        v, _ = run(t, "vapo", gamma=gamma, vapo_alpha=0.5, value_lam=0.8)
        policy, _ = run(t, "gae", gamma=gamma, lam=lam)
        critic, _ = run(t, "gae", gamma=gamma, lam=0.8)
        close(rows_flat(v, "advantages"), rows_flat(policy, "advantages"))
        assert v["returns"].equals(critic["returns"])


def rows_flat(t: pa.Table, column: str) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float64) for x in t[column].to_pylist()])


def test_vapo_alpha_must_be_positive():
    with pytest.raises(ConfigError, match="^vapo_alpha: "):
        run(TWO_GROUPS.append_column("values", pa.array([[0.0]] * 6, pa.list_(pa.float32()))), "vapo", vapo_alpha=0)


def test_their_settings_are_refused_with_other_estimators(tmp_path):
    path = write(tmp_path / "a.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]])
    assert_one_line_error(rladv("compute", path, "--estimator", "grpo", "--k", "3"), "--k has no effect",
                          "--estimator grpo")
    assert_one_line_error(rladv("compute", path, "--estimator", "grpo", "--mean-level", "batch"),
                          "--mean-level has no effect")


# --- properties: the estimators' own settings drawn, against the oracle ------------------------------------------
def _compare(name, rollout, out, s, rewards=None):
    """The library's advantages and returns against the oracle's at the mask-1 positions ``comparable_rows`` keeps."""
    rewards = rewards if rewards is not None else ref.assemble_scores(rollout.lengths, score=rollout.score,
                                                                      rm_scores=rollout.rm_scores)
    masks = [np.asarray(m, np.float32) for m in rollout.masks]
    want_adv, want_ret = ref.ORACLE[name](rewards, masks, rollout, s)
    keep, why = comparable_rows(name, rollout, rewards, {"norm_adv_by_std": True, **s}, False)
    if why:
        event(why)
    for i, m in enumerate(rollout.masks):
        m = np.asarray(m) == 1
        if keep[i]:
            np.testing.assert_allclose(rows_of(out, "advantages")[i][m], want_adv[i][m], atol=ATOL, rtol=RTOL,
                                       err_msg=f"{name} advantages row {i}")
        if keep[i] or name == "vapo":
            np.testing.assert_allclose(rows_of(out, "returns")[i][m], want_ret[i][m], atol=ATOL, rtol=RTOL,
                                       err_msg=f"{name} returns row {i}")


@pytest.mark.slow
@examples(25)
@given(data=st.data(), mean=st.sampled_from(LEVELS), std=st.sampled_from(LEVELS))
def test_grpo_norm_every_level_against_the_oracle(data, mean, std):
    rollout = data.draw(S.rollouts(**needs("grpo_norm")), label="rollout")
    out = run(rollout.table(), "grpo_norm", one_chunk=True, mean_level=mean, std_level=std)[0]
    rewards = ref.assemble_scores(rollout.lengths, score=rollout.score, rm_scores=rollout.rm_scores)
    masks = [np.asarray(m, np.float32) for m in rollout.masks]
    want, _ = ref.grpo_norm(rewards, masks, rollout.uids, None, mean, std)
    # dyadic scores: a level's totals are equal or 1/8 apart, so no std is near their rounding noise
    for i, m in enumerate(rollout.masks):
        m = np.asarray(m) == 1
        np.testing.assert_allclose(rows_of(out, "advantages")[i][m], want[i][m], atol=ATOL, rtol=RTOL, err_msg=f"row {i}")


@pytest.mark.slow
@examples(10)
@given(data=st.data(), mean=st.sampled_from(LEVELS), std=st.sampled_from(LEVELS), kl=S.kl_settings())
def test_grpo_norm_batches_and_chunks(data, mean, std, kl):
    """--batch-key: each step's rows get what that step alone gets; --chunk-rows changes nothing."""
    rollout = data.draw(S.rollouts(**needs("grpo_norm"), steps=3, min_rows=4), label="rollout")
    settings = {"mean_level": mean, "std_level": std, **kl}
    chunk = data.draw(st.integers(1, rollout.num_rows), label="chunk_rows")
    out = run(rollout.table(), "grpo_norm", batch_key="step", chunk_rows=chunk, **settings)[0]
    assert_same_outcome(out, run(rollout.table(), "grpo_norm", batch_key="step", one_chunk=True, **settings)[0])
    for step in sorted(set(rollout.step)):
        rows = [i for i, v in enumerate(rollout.step) if v == step]
        alone = run(rollout.take(rows).table(), "grpo_norm", **settings)[0]
        part = out.take(pa.array(rows, pa.int64()))
        assert part["advantages"].equals(alone["advantages"]), step


@pytest.mark.slow
@examples(25)
@given(data=st.data(), kl=S.kl_settings())
def test_pkpo_any_k_against_the_oracle(data, kl):
    rollout = data.draw(S.rollouts(**needs("pkpo"), max_rows=16), label="rollout")
    sizes = {u: rollout.uids.count(u) for u in rollout.uids}
    k = data.draw(st.integers(1, min(sizes.values()) + 1), label="k")
    out = attempt(run, rollout.table(), "pkpo", one_chunk=True, k=k, **kl)
    if k > min(sizes.values()):
        assert failed(out) and f"(k={k})" in str(out)
        return
    rewards = ref.assemble_scores(rollout.lengths, score=rollout.score, rm_scores=rollout.rm_scores)
    if kl["kl_coef"] > 0:
        rewards = ref.apply_kl(rewards, rollout.old_log_probs, rollout.ref_log_prob, rollout.masks, kl["kl_coef"],
                               kl["kl_penalty"])[0]
    _compare("pkpo", rollout, out[0], {"k": k}, rewards)
    chunk = data.draw(st.integers(1, rollout.num_rows), label="chunk_rows")
    assert_same_outcome(run(rollout.table(), "pkpo", chunk_rows=chunk, k=k, **kl)[0], out[0])


@pytest.mark.slow
@examples(25)
@given(data=st.data())
def test_passk_analytic_any_k_against_the_oracle(data):
    rollout = data.draw(S.rollouts(**needs("passk_analytic"), max_rows=16), label="rollout")
    k = data.draw(st.integers(1, min(rollout.uids.count(u) for u in rollout.uids)), label="k")
    out = run(rollout.table(), "passk_analytic", one_chunk=True, k=k)[0]
    _compare("passk_analytic", rollout, out, {"k": k})
    chunk = data.draw(st.integers(1, rollout.num_rows), label="chunk_rows")
    assert_same_outcome(run(rollout.table(), "passk_analytic", chunk_rows=chunk, k=k)[0], out)


@pytest.mark.slow
@examples(25)
@given(data=st.data(), gamma=S.unit_interval, value_lam=S.unit_interval,
       alpha=st.sampled_from([0.01, 0.05, 0.1, 0.5, 2.0]))
def test_vapo_any_alpha_against_the_oracle(data, gamma, value_lam, alpha):
    rollout = data.draw(S.rollouts(**needs("vapo"), min_valid=2), label="rollout")
    settings = {"gamma": gamma, "vapo_alpha": alpha, "value_lam": value_lam}
    out = run(rollout.table(), "vapo", one_chunk=True, **settings)[0]
    _compare("vapo", rollout, out, settings)
    chunk = data.draw(st.integers(1, rollout.num_rows), label="chunk_rows")
    assert_same_outcome(run(rollout.table(), "vapo", chunk_rows=chunk, **settings)[0], out)


@pytest.mark.parametrize("name", ["grpo_norm", "pkpo", "passk_analytic", "vapo"])
def test_registered_with_their_settings(name):
    e = ESTIMATORS[name]
    assert set(e.settings) <= {"mean_level", "std_level", "epsilon", "k", "gamma", "vapo_alpha", "value_lam"}
    assert e.min_group(Params(k=5)) == (5 if e.min_group_setting else e.min_group_size)
