"""The oracle (tests/reference.py) against docs/semantics.md's worked examples and verl 0.9.1's golden outputs.

Numbers in the worked-example tests are copied from docs/semantics.md; tolerance 1e-6 unless the document
gives fewer digits (then half a unit of its last digit).  Golden data: tests/golden/ (copied from verl
0.9.1 runs; never read from outside the project).
"""

import functools
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import reference as ref
from conftest import GOLDEN, SAMPLES, golden_cases

F32 = np.float32


def close(actual, expected, tol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=0, atol=tol)


def ones(*lengths):
    return [[1] * n for n in lengths]


# --------------------------------------------------------------------------- §1 score placement


def test_scalar_score_goes_to_last_position_of_ragged_rows():
    rows = ref.assemble_scores([3, 1, 4], score=[1.0, 0.5, 2.0])
    assert [r.tolist() for r in rows] == [[0, 0, 1], [0.5], [0, 0, 0, 2]]
    assert all(r.dtype == F32 for r in rows)


def test_scalar_score_is_rounded_to_float32():
    (row,) = ref.assemble_scores([2], score=[0.1])
    assert row[1] == F32(0.1) and row[0] == 0


def test_attention_mask_counts_ones():
    attn = [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    rows = ref.assemble_scores([5, 5, 5], score=[1, 2, 3], attention_mask=attn)
    assert [int(np.argmax(r != 0)) for r in rows] == [2, 0, 4]
    assert [float(r.sum()) for r in rows] == [1, 2, 3]


def test_empty_attention_wraps_to_last_column():
    # p_i = -1: verl's indexing writes the score on column T - 1
    rows = ref.assemble_scores([4, 4], score=[1, 7], attention_mask=[[1, 1, 0, 0], [0, 0, 0, 0]])
    assert rows[0].tolist() == [0, 1, 0, 0]
    assert rows[1].tolist() == [0, 0, 0, 7]


def test_rm_scores_are_taken_verbatim():
    rows = ref.assemble_scores([3], rm_scores=[[0.25, 0, -1]])
    assert rows[0].tolist() == [0.25, 0, -1] and rows[0].dtype == F32


def test_score_on_observation_counts_for_outcome_but_not_for_gae_or_rpp():
    # row ends in a tool observation: the score sits on a mask-0 position (§1, Q5)
    r = ref.assemble_scores([3, 3], score=[1.0, 0.0])
    m = [[1, 1, 0], [1, 1, 1]]
    adv, _ = ref.grpo(r, m, ["u", "u"])
    assert adv[0][0] > 0 > adv[1][0]
    _, returns = ref.gae(r, [[0, 0, 0], [0, 0, 0]], m, 1.0, 1.0)
    assert returns[0][:2].tolist() == [0, 0]
    for mode in ("reset", "carry"):
        _, G = ref.reinforce_plus_plus(r, m, 1.0, mode)
        assert G[0][:2].tolist() == [0, 0]


# --------------------------------------------------------------------------- §2.1 masked whitening


def test_masked_whiten_raises_like_verl():
    with pytest.raises(ValueError, match="At least one element"):
        ref.masked_whiten([[1.0, 2.0]], [[0, 0]])
    with pytest.raises(ValueError, match="sum of the mask is one"):
        ref.masked_whiten([[1.0, 2.0]], [[0, 1]])


def test_masked_whiten_is_computed_at_every_position():
    # μ = 2, unbiased var = 2 over the valid tokens; the masked 10 is whitened too (not zeroed)
    out = ref.masked_whiten([[1.0, 3.0, 10.0]], [[1, 1, 0]])
    close(out[0], np.array([-1, 1, 8]) / math.sqrt(2))


def test_masked_mean_of_empty_row_is_zero():
    assert ref.masked_mean_row(F32([5.0, 6.0]), F32([0, 0])) == 0


# --------------------------------------------------------------------------- §4 KL shaping


def _k3(d):
    k = min(max(-d, -20.0), 20.0)
    return min(max(math.exp(k) - k - 1, -10.0), 10.0)


@pytest.mark.parametrize("mode,fn", [
    ("kl", lambda d: d), ("k1", lambda d: d), ("abs", abs),
    ("mse", lambda d: 0.5 * d * d), ("k2", lambda d: 0.5 * d * d),
    ("low_var_kl", _k3), ("k3", _k3),
])
@pytest.mark.parametrize("plus", ["", "+"])
def test_kl_penalty_values(mode, fn, plus):
    # [P]: '<mode>+' has the value of '<mode>' (straight-through only changes gradients)
    logprob = [-1.0, -2.0, -0.5, -0.25, -30.0, 0.0]
    ref_lp = [-1.5, -1.0, -0.5, -3.0, 0.0, -30.0]
    got = ref.kl_penalty(logprob, ref_lp, mode + plus)
    want = [fn(float(F32(a) - F32(b))) for a, b in zip(logprob, ref_lp)]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got.dtype == F32


def test_low_var_kl_is_clamped_to_10():
    got = ref.kl_penalty([-30.0, 0.0], [0.0, -30.0], "low_var_kl")
    assert got.tolist() == [10.0, 10.0]


def test_plus_mode_is_nan_where_half_d_squared_overflows():
    got = ref.kl_penalty([-1e20, -1.0], [0.0, -1.5], "k1+")
    assert np.isnan(got[0]) and got[1] == F32(0.5)
    assert ref.kl_penalty([-1e20], [0.0], "k1")[0] == F32(-1e20)


@pytest.mark.parametrize("mode", ["full", "full+", "k4", "kl++", ""])
def test_unknown_kl_modes_raise(mode):
    with pytest.raises(NotImplementedError):
        ref.kl_penalty([-1.0], [-1.0], mode)


def test_kl_shaping_chapter_example():
    # §11: s = [0, 0, 1], kld = [.1, .2, .3], β = .01 (k1 with ref = 0 gives kld exactly)
    r, _ = ref.apply_kl([[0, 0, 1]], [[0.1, 0.2, 0.3]], [[0, 0, 0]], [[1, 1, 1]], 0.01, "kl")
    assert r[0].tolist() == [F32(-0.0010000000475), F32(-0.0020000000950), F32(0.9969999790)]


def test_current_kl_counts_rows_without_valid_tokens():
    _, kl = ref.apply_kl([[0, 0], [0, 0]], [[-1, -1], [-1, -1]], [[-1.5, -1.5], [-3, -3]],
                         [[1, 1], [0, 0]], 0.1, "kl")
    close(kl, 0.25)  # mean(0.5, 0): the empty row still counts in the denominator


def test_nan_at_masked_position_survives_kl_shaping():
    # × m0 is a multiplication: NaN · 0 = NaN (§4.2, Q18)
    r, _ = ref.apply_kl([[0, 0]], [[-1, float("nan")]], [[-1, -1]], [[1, 0]], 0.1, "kl")
    assert r[0][0] == 0 and np.isnan(r[0][1])


def test_adaptive_kl_controller_step():
    close(ref.adaptive_kl_step(0.1, 0.2, 0.1, 10000, 100), 0.1 * (1 + 0.2 * 100 / 10000), tol=1e-15)
    close(ref.adaptive_kl_step(0.1, 0.09, 0.1, 1000, 10), 0.1 * (1 - 0.1 * 10 / 1000), tol=1e-15)
    with pytest.raises(AssertionError):
        ref.adaptive_kl_step(0.1, 0.2, 0.1, 0, 1)
    with pytest.raises(ZeroDivisionError):
        ref.adaptive_kl_step(0.1, 0.2, 0.0, 100, 1)


# --------------------------------------------------------------------------- §7.1 GAE


def test_gae_chapter_example():
    adv, ret = ref.gae([[0, 0, 1]], [[0.2, 0.3, 0.4]], [[1, 1, 1]], 1.0, 0.95)
    close(ret[0], [0.9365, 0.97, 1.0])
    close(adv[0], [0.9913445, 0.0170926, -1.0084344])


def test_gae_skips_observation_and_is_not_masked():
    adv, ret = ref.gae([[0, 0, 1]], [[0.2, 0.3, 0.4]], [[1, 0, 1]], 1.0, 0.95)
    close(ret[0], [0.97, 0.9, 1.0])
    close(adv[0], [0.7071065, -0.7071065, -0.7071065])  # middle entry: a mask-0 position


def test_gae_raises_for_one_valid_token():
    with pytest.raises(ValueError, match="sum of the mask is one"):
        ref.gae([[0, 1]], [[0, 0]], [[0, 1]], 1.0, 1.0)


# --------------------------------------------------------------------------- §7.2 grpo


def test_grpo_one_group():
    adv, ret = ref.grpo([[1], [0], [0.5]], ones(1, 1, 1), ["a"] * 3)
    close([a[0] for a in adv], [0.999998, -0.999998, 0])
    assert adv[0][0] == F32(0.9999980)
    close([a[0] for a in ret], [0.999998, -0.999998, 0])


def test_grpo_without_std():
    adv, _ = ref.grpo([[1], [0], [0.5]], ones(1, 1, 1), ["a"] * 3, norm_adv_by_std=False)
    close([a[0] for a in adv], [0.5, -0.5, 0])


def test_grpo_broadcasts_over_the_mask():
    adv, _ = ref.grpo([[1, 0, 0, 0, 0], [0], [0.5]], [[1, 1, 0, 0, 1], [1], [1]], ["a"] * 3)
    close(adv[0], [0.999998, 0.999998, 0, 0, 0.999998])


def test_grpo_two_groups_one_all_equal():
    adv, _ = ref.grpo([[1], [0], [0.5], [0], [0], [0]], ones(*[1] * 6), list("aaabbb"))
    close([a[0] for a in adv], [0.999998, -0.999998, 0, 0, 0, 0])


def test_grpo_singleton_keeps_score_over_one_plus_eps():
    adv, _ = ref.grpo([[1], [0], [0.5]], ones(1, 1, 1), ["a", "a", "b"])
    close([a[0] for a in adv], [0.7071058, -0.7071058, 0.4999995])


# --------------------------------------------------------------------------- §7.3 grpo_vectorized ([P])


def test_grpo_vectorized_low_variance_group_equals_grpo():
    # [P]: two-pass variance without floor, so [1.0, 1.0005] gives grpo's ∓0.7051 (not [S]'s ∓0.2497)
    r, m = [[1.0], [1.0005]], ones(1, 1)
    vec, _ = ref.grpo_vectorized(r, m, ["g", "g"])
    plain, _ = ref.grpo(r, m, ["g", "g"])
    close([a[0] for a in vec], [-0.7051, 0.7051], tol=5e-5)
    close([a[0] for a in vec], [a[0] for a in plain])


def test_grpo_vectorized_all_equal_group():
    vec, _ = ref.grpo_vectorized([[0.8132702]] * 3, ones(1, 1, 1), ["g"] * 3)
    close([abs(a[0]) for a in vec], [0.0555] * 3, tol=5e-5)  # ulp noise × 1e6, sign order-dependent


def test_grpo_vectorized_always_divides_by_std_and_keeps_singletons():
    vec, _ = ref.grpo_vectorized([[1], [0], [0.5]], ones(1, 1, 1), ["a", "a", "b"])
    close([a[0] for a in vec], [0.7071058, -0.7071058, 0.4999995])


# --------------------------------------------------------------------------- §7.5–7.6 rloo


def test_rloo_examples():
    adv, ret = ref.rloo([[1], [0], [0.5]], ones(1, 1, 1), ["a"] * 3)
    close([a[0] for a in adv], [0.75, -0.75, 0])
    close([a[0] for a in ret], [0.75, -0.75, 0])
    adv, _ = ref.rloo([[1], [0], [0.5]], ones(1, 1, 1), ["a", "a", "b"])
    close([a[0] for a in adv], [1, -1, 0.5])  # the singleton keeps its raw score


def test_rloo_vectorized_singleton_gets_zero():
    adv, _ = ref.rloo_vectorized([[1], [0], [0.5]], ones(1, 1, 1), ["a", "a", "b"])
    close([a[0] for a in adv], [1, -1, 0])
    adv, _ = ref.rloo_vectorized([[1], [0], [0.5]], ones(1, 1, 1), ["a"] * 3)
    close([a[0] for a in adv], [0.75, -0.75, 0])


# --------------------------------------------------------------------------- §7.7 REINFORCE++


@pytest.mark.parametrize("mode", ["reset", "carry"])
def test_rpp_full_mask(mode):
    adv, G = ref.reinforce_plus_plus([[0, 0, 1]], [[1, 1, 1]], 1.0, mode)
    assert G[0].tolist() == [1, 1, 1]
    assert adv[0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("mode,G,adv", [
    ("reset", [0, 1, 1], [-0.7071068, 0, 0.7071068]),
    ("carry", [1, 0, 1], [0, 0, 0]),
])
def test_rpp_observation_in_the_middle(mode, G, adv):
    a, g = ref.reinforce_plus_plus([[0, 0, 1]], [[1, 0, 1]], 1.0, mode)
    close(g[0], G)
    close(a[0], adv)


def test_rpp_carry_masked_advantage_is_negative_zero():
    a, _ = ref.reinforce_plus_plus([[0, 0, 1]], [[1, 0, 1]], 1.0, "carry")
    assert np.signbit(a[0][1])


@pytest.mark.parametrize("mode,row0,row1", [
    ("reset", [-0.4472136, 0, 1.7888542], [-0.4472136] * 3),
    ("carry", [1.0954452, 0, 1.0954452], None),
])
def test_rpp_two_rows(mode, row0, row1):
    a, _ = ref.reinforce_plus_plus([[0, 0, 1], [0, 0, 0]], [[1, 0, 1], [1, 1, 1]], 1.0, mode)
    close(a[0], row0)
    if row1 is not None:
        close(a[1], row1)


@pytest.mark.parametrize("mode", ["reset", "carry"])
def test_rpp_discounted(mode):
    a, G = ref.reinforce_plus_plus([[0, 0, 1], [0, 0, 0]], [[1, 1, 1], [1, 1, 0]], 0.9, mode)
    close(G[0], [0.81, 0.9, 1.0])
    close(G[0][0], 0.8099999, tol=5e-8)  # the doc's float32 value: not 0.81
    close(a[0], [0.5367303, 0.7169757, 0.9172483])
    close(a[1], [-1.0854772, -1.0854772, 0])


def test_rpp_rejects_unknown_mode_and_single_token_batches():
    with pytest.raises(ValueError):
        ref.reinforce_plus_plus([[1]], [[1]], 1.0, "sideways")
    with pytest.raises(ValueError, match="sum of the mask is one"):
        ref.reinforce_plus_plus([[0, 1]], [[0, 1]], 1.0, "carry")


# --------------------------------------------------------------------------- §7.8 REINFORCE++ baseline


def test_rpp_baseline_example():
    r = [[1, 0, 0], [0, 0, 0], [0.5, 0, 0], [0.2, 0, 0]]
    m = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]]
    adv, ret = ref.reinforce_plus_plus_baseline(r, m, list("aaab"))
    close(adv[0], [0.9612808] * 3)
    close(adv[1], [-1.5832859, -1.5832859, 0])
    close(adv[2], [-0.3110026, 0, 0])
    close(adv[3], [0.1979108] * 3)
    close(np.concatenate(ret), np.concatenate(adv), tol=0)


# --------------------------------------------------------------------------- §11 pipeline example


def test_pipeline_kl_then_rejection_then_grpo_rloo():
    s = [[0, 0, 1], [0, 0, 0]]
    old = [[-1, -2, -0.5], [-1, -1, -1]]
    ref_lp = [[-1.5, -1, -0.5], [-1, -1.2, -1]]
    m0 = [[1, 1, 1], [1, 1, 0]]
    r, kl = ref.apply_kl(s, old, ref_lp, m0, 0.1, "kl")
    close(r[0], [-0.05, 0.1, 1.0])  # the −1 estimate raises a reward
    close(r[1], [0, -0.02, 0])
    close(kl, -0.0333333)
    m = [[1, 0, 1], [1, 1, 0]]  # rejection removed token 1 of row 0; its +0.1 stays in R_0
    close([float(np.sum(row, dtype=np.float64)) for row in r], [1.05, -0.02])
    adv, _ = ref.grpo(r, m, ["u", "u"])
    close(adv[0], [0.7071058, 0, 0.7071058])
    close(adv[1], [-0.7071058, -0.7071058, 0])
    assert np.signbit(adv[1][2])  # (−a)·0 = −0.0
    adv, _ = ref.rloo(r, m, ["u", "u"])
    close(adv[0], [1.07, 0, 1.07], tol=5e-3)
    close(adv[1], [-1.07, -1.07, 0], tol=5e-3)


# --------------------------------------------------------------------------- golden: verl 0.9.1's numbers

ESTIMATORS = {"gae", "grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
              "reinforce_plus_plus_baseline"}


def _options(args):
    """['--estimator', 'gae', '--no-norm-adv-by-std', ...] -> {'--estimator': 'gae', '--no-norm-adv-by-std': True}."""
    opts, i = {}, 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            opts[args[i]] = True
            i += 1
    return opts


def _golden_cases():
    cases = golden_cases().values()
    picked = []
    for case in cases:
        opts = _options(case["rladv_args"])
        if opts["--estimator"] in ESTIMATORS and "--rollout-rs" not in opts and "--rollout-is" not in opts:
            picked.append(pytest.param(case, opts, id=pathlib.Path(case["expected"]).stem))
    return picked


@functools.lru_cache(maxsize=None)
def _table(path):
    return pq.read_table(GOLDEN / path).to_pydict()


def _group_sigma(R, uids):
    """Per row: the sample std of its group's R (inf for singletons, which are not normalised)."""
    groups = {}
    for i, u in enumerate(uids):
        groups.setdefault(u, []).append(i)
    sigma = np.full(len(R), np.inf)
    for idx in groups.values():
        if len(idx) > 1:
            sigma[idx] = np.std(np.asarray([R[i] for i in idx], dtype=np.float64), ddof=1)
    return sigma


def _reduction_slack(rewards, uids, adv):
    """How far a std-normalised group advantage may move when R_i changes by 2 ulp.

    R_i is a float32 sum whose last bits depend on the reduction order (torch's SIMD cascade vs the
    oracle's sequential loop, docs/semantics.md §0.4, §14); a = (R − μ)/(σ + ε) amplifies that by 1/σ (§7.2):
    |Δa| ≲ 2δ(1 + |a|)/(σ + ε) with δ = 2 ulp(R).  Negligible for ordinary groups (σ ~ 0.5), decisive
    for near-tied groups (KL-shaped scores that differ by ~1e-4).
    """
    R = [float(np.sum(np.asarray(r, dtype=np.float64))) for r in rewards]
    sigma = _group_sigma(R, uids)
    delta = 2 * np.spacing(np.abs(np.asarray(R, dtype=F32)))
    return [2 * d * (1 + np.abs(a)) / (s + 1e-6) for d, a, s in zip(delta, adv, sigma)], sigma


@pytest.mark.parametrize("case,opts", _golden_cases())
def test_golden(case, opts):
    inp, exp = _table(case["input"]), _table(case["expected"])
    est = opts["--estimator"]
    m0, uids = inp["response_mask"], inp["uid"]
    assert exp["uid"] == uids
    # no rejection in these cases: the estimator saw the input mask
    assert all(list(map(int, e)) == list(m) for e, m in zip(exp["response_mask"], m0))

    s = ref.assemble_scores([len(m) for m in m0], score=inp.get("score"), rm_scores=inp.get("rm_scores"))
    if "--kl-coef" in opts:
        s, kl = ref.apply_kl(s, inp["old_log_probs"], inp["ref_log_prob"], m0,
                             float(opts["--kl-coef"]), opts["--kl-penalty"])
        assert kl == pytest.approx(case["metrics"]["actor/reward_kl_penalty"], rel=1e-5, abs=1e-9)
    gamma, lam = float(opts.get("--gamma", 1.0)), float(opts.get("--lam", 1.0))
    normalised = est == "grpo_vectorized" or (est == "grpo" and "--no-norm-adv-by-std" not in opts)
    if est == "gae":
        adv, ret = ref.gae(s, inp["values"], m0, gamma, lam)
    elif est == "grpo":
        adv, ret = ref.grpo(s, m0, uids, norm_adv_by_std=normalised)
    elif est == "reinforce_plus_plus":
        assert opts["--rpp-mask-mode"] == "carry"
        adv, ret = ref.reinforce_plus_plus(s, m0, gamma, mode="carry")
    else:
        adv, ret = getattr(ref, est)(s, m0, uids)

    for mine, want in zip(s, exp["token_level_rewards"]):
        np.testing.assert_allclose(mine, want, rtol=0, atol=1e-6)

    if normalised:
        a_rows = [max((abs(x) for x in a), default=0.0) for a in exp["advantages"]]  # |a_i| (a_i · m)
        slack, sigma = _reduction_slack(s, uids, a_rows)
    else:
        slack, sigma = [0.0] * len(s), np.full(len(s), np.inf)
    for key, got_rows in (("advantages", adv), ("returns", ret)):
        for i, (got, want, m) in enumerate(zip(got_rows, exp[key], exp["response_mask"])):
            valid = np.asarray(m) == 1
            got, want = np.asarray(got, dtype=np.float64)[valid], np.asarray(want, dtype=np.float64)[valid]
            err, tol = np.abs(got - want), 1e-5 + 1e-4 * np.abs(want)
            assert np.all(err <= tol + slack[i]), (key, i, got[:3], want[:3])
            # the reduction-order slack is only ever needed in near-tied groups
            assert np.all(err <= tol) or sigma[i] < 1e-3, (key, i, sigma[i])


def test_golden_selection_covers_every_estimator():
    picked = {p.values[1]["--estimator"] for p in _golden_cases()}
    assert picked == ESTIMATORS
    assert len(_golden_cases()) == 70


# --------------------------------------------------------------------------- sample data


def _without_writer_version(data: bytes) -> bytes:
    """Parquet bytes with the footer's ``created_by`` (its length byte and "parquet-cpp-arrow version X.Y.Z")
    taken out: the one part of the file that names the pyarrow that wrote it."""
    return re.sub(rb".parquet-cpp-arrow version [0-9][0-9A-Za-z.+-]*", b"", data, flags=re.DOTALL)


def test_sample_generator_is_byte_identical(tmp_path):
    subprocess.run([sys.executable, str(SAMPLES / "make_samples.py"), str(tmp_path)], check=True)
    for name in ("groups", "multiturn", "padded"):
        made, committed = ((folder / f"{name}.parquet").read_bytes() for folder in (tmp_path, SAMPLES))
        assert b"parquet-cpp-arrow version" in committed
        assert _without_writer_version(made) == _without_writer_version(committed), name
