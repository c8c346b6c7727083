"""Segmented kernels against plain loops; results must not depend on a row's neighbours."""
import os

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rladv_cli.tensors import kernels
from rladv_cli.tensors.groups import group_stats


def offsets_of(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.long)


def loop_scan(a, b, off) -> np.ndarray:
    """The oracle: h_t = b_t + a_t * h_{t+1}, right to left inside each row, one token at a time."""
    want = np.zeros(a.numel())
    for i in range(off.numel() - 1):
        acc = 0.0
        for t in range(int(off[i + 1]) - 1, int(off[i]) - 1, -1):
            acc = float(b[t]) + float(a[t]) * acc
            want[t] = acc
    return want


ragged = st.lists(st.integers(1, 70), min_size=1, max_size=12)

native = pytest.mark.skipif(not kernels.NATIVE_SCAN, reason="the C scan was not built (no compiler at install)")
# Both implementations of the reverse scan: the C one the CPU uses, and the log-depth one GPUs use.
SCANS = [
    pytest.param(kernels.log_depth_scan, id="log_depth"),
    pytest.param(kernels.reverse_linear_scan, id="native", marks=native),
]


def float32_loop_scan(a, b, off) -> np.ndarray:
    """verl's order and rounding: one float32 multiply, then one add, right to left; ``a = 0`` takes ``b``."""
    a, b = a.numpy(), b.numpy()
    out = np.empty_like(b)
    for i in range(off.numel() - 1):
        h = np.float32(0)
        for t in range(int(off[i + 1]) - 1, int(off[i]) - 1, -1):
            h = b[t] if a[t] == 0 or t == int(off[i + 1]) - 1 else np.float32(b[t] + np.float32(a[t] * h))
            out[t] = h
    return out


def test_the_native_scan_is_built_where_ci_requires_it():
    """.ci/run sets RLADV_REQUIRE_NATIVE=1: there a failed C build must fail the run, not slow it down."""
    if os.environ.get("RLADV_REQUIRE_NATIVE") != "1":
        pytest.skip("RLADV_REQUIRE_NATIVE is not set")
    assert kernels.NATIVE_SCAN and kernels._rows is not None


@native
@settings(max_examples=60, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1), reset_p=st.floats(0, 0.5), skip_p=st.floats(0, 0.5))
def test_native_scan_rounds_exactly_like_the_float32_loop(lengths, seed, reset_p, skip_p):
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    a = torch.full((n,), 0.95 * 0.97, dtype=torch.float32)
    a[torch.rand(n, generator=g) < skip_p] = 1.0
    a[torch.rand(n, generator=g) < reset_p] = 0.0
    b = torch.randn(n, generator=g) * (a != 1.0)
    assert np.array_equal(kernels.reverse_linear_scan(a, b, off).numpy(), float32_loop_scan(a, b, off))


@pytest.mark.parametrize("scan", SCANS)
def test_a_reset_lets_nothing_from_the_right_enter(scan):
    off = torch.tensor([0, 4])
    a = torch.tensor([0.5, 0.0, 1.0, 1.0])
    b = torch.tensor([1.0, -0.0, float("inf"), 2.0])
    h = scan(a, b, off)
    assert h[1].item() == 0.0 and torch.signbit(h[1]) and h[0].item() == 1.0
    assert torch.isinf(h[2:3]).all()


def test_native_scan_refuses_offsets_that_do_not_cover_the_tokens():
    if not kernels.NATIVE_SCAN:
        pytest.skip("the C scan was not built")
    with pytest.raises(ValueError, match="offsets must run"):
        kernels.reverse_linear_scan(torch.ones(3), torch.ones(3), torch.tensor([0, 5]))


@pytest.mark.parametrize("scan", SCANS)
@settings(max_examples=60, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1), reset_p=st.floats(0, 0.5))
def test_reverse_linear_scan_equals_the_loop(scan, lengths, seed, reset_p):
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    a = torch.rand(n, generator=g) * (torch.rand(n, generator=g) > reset_p)
    b = torch.randn(n, generator=g)
    h = scan(a, b, off)
    want = loop_scan(a, b, off)
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scan", SCANS)
@settings(max_examples=30, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1), cut=st.integers(0, 12))
def test_scan_and_row_sums_of_a_row_do_not_depend_on_its_neighbours(scan, lengths, seed, cut):
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    a, b = torch.rand(n, generator=g), torch.randn(n, generator=g)
    whole = scan(a, b, off)
    width = torch.full((len(lengths),), max(lengths) + 3)
    sums = kernels.padded_row_sum(b, off, width)
    k = min(cut, len(lengths) - 1)
    lo, hi = int(off[k]), int(off[k + 1])
    alone = scan(a[lo:hi], b[lo:hi], torch.tensor([0, hi - lo]))
    assert torch.equal(whole[lo:hi], alone)
    assert torch.equal(sums[k:k + 1], kernels.padded_row_sum(b[lo:hi], torch.tensor([0, hi - lo]), width[:1]))


@pytest.mark.parametrize("sparse", [False, True])
def test_padded_row_sum_is_torch_sum_of_the_zero_padded_rows(sparse):
    """Dense rows take the padded sum; sparse ones (no, one or two non-zeros, signed zeros, inf) the shortcut."""
    g = torch.Generator().manual_seed(0)
    lengths = [5, 40, 17, 1, 33, 9, 12, 3]
    off = offsets_of(lengths)
    x = torch.randn(int(off[-1]), generator=g)
    if sparse:
        x = torch.where(torch.rand(x.numel(), generator=g) < 0.1, x, torch.zeros_like(x))
        x[int(off[5]):int(off[6])] = -0.0
        x[int(off[6]) + 4] = float("inf")
        x[int(off[7]):int(off[8])] = torch.tensor([-0.0, 1e-30, -0.0])
    for width in (40, 64, 97):
        padded = torch.zeros(len(lengths), width)
        for i, L in enumerate(lengths):
            padded[i, :L] = x[off[i]:off[i + 1]]
        got = kernels.padded_row_sum(x, off, torch.full((len(lengths),), width))
        want = padded.sum(dim=1)
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=30), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool]))
def test_broadcast_rows_on_the_cpu_is_repeat_interleave(lengths, seed, dtype):
    """The CPU path (``numpy.repeat``) gives torch's ``repeat_interleave``, dtype and rows of length 0
    included, and a tensor that owns its memory."""
    off = offsets_of(lengths)
    per_row = torch.from_numpy(np.random.default_rng(seed).normal(size=len(lengths)) * 4).to(dtype)
    before = per_row.clone()
    got = kernels.broadcast_rows(per_row, off)
    assert got.dtype == dtype and torch.equal(got, torch.repeat_interleave(per_row, torch.tensor(lengths)))
    got.zero_()
    assert torch.equal(per_row, before)


def test_segment_ops_and_shift():
    off = offsets_of([2, 3])
    x = torch.tensor([1.0, -2.0, 3.0, 4.0, -5.0])
    assert kernels.segment_sum(x, off).tolist() == [-1.0, 2.0]
    assert kernels.segment_max(x, off).tolist() == [1.0, 4.0]
    assert kernels.segment_min(x, off).tolist() == [-2.0, -5.0]
    assert kernels.shift_left_in_row(x, off).tolist() == [-2.0, 0.0, 4.0, -5.0, 0.0]
    assert kernels.broadcast_rows(torch.tensor([7, 9]), off).tolist() == [7, 7, 9, 9, 9]
    tokens, new = kernels.select_rows(torch.tensor([False, True]), off)
    assert tokens.tolist() == [2, 3, 4] and new.tolist() == [0, 3]


def test_group_stats_match_torch_mean_and_std_of_each_group():
    g = torch.Generator().manual_seed(1)
    gid = torch.tensor([0, 1, 0, 2, 1, 0, 3, 3, 3, 3])
    total = torch.randn(10, generator=g)
    valid = torch.tensor([3, 0, 2, 5, 1, 4, 2, 2, 6, 1])
    stats = group_stats(total, gid, 4, valid)
    for k in range(4):
        members, n = total[gid == k], valid[gid == k]
        assert stats.size[k] == members.numel()
        if members.numel() > 1:
            assert stats.mean[k] == members.mean() and stats.std[k] == members.std()
            assert stats.length_weighted_mean[k] == (n * members).sum() / n.sum()
            best = torch.topk(members, 2).values
            assert stats.top_gap[k] == best[0] - best[1]
            assert total[stats.top_row[k]] == best[0] and gid[stats.top_row[k]] == k
        else:
            assert stats.mean[k] == 0 and stats.std[k] == 1 and stats.top_row[k] == -1
        np.testing.assert_allclose(stats.seq_mean[k], members.double().mean(), rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8), copies=st.integers(2, 4),
       seed=st.integers(0, 2**31 - 1), base=st.sampled_from([0.625, 0.8132702, 3.7, 1e4]))
def test_group_std_is_each_groups_own_1d_torch_std_when_groups_share_a_size(sizes, copies, seed, base):
    """verl stacks each group into its own 1-D tensor; several groups of one size (reduced together here)
    must round as those do, also when the totals are a few ulps apart (σ ~ ulp, where rounding shows)."""
    g = torch.Generator().manual_seed(seed)
    gid = torch.tensor([k for k, s in enumerate(sizes * copies) for _ in range(s)])
    gid = gid[torch.randperm(gid.numel(), generator=g)]
    ulps = torch.randint(-8, 9, (gid.numel(),), generator=g).float()
    total = base + ulps * torch.finfo(torch.float32).eps * base
    stats = group_stats(total, gid, len(sizes) * copies, torch.ones_like(gid))
    for k in range(len(sizes) * copies):
        members = total[gid == k].clone()
        if members.numel() > 1:
            assert stats.mean[k] == torch.mean(members) and stats.std[k] == torch.std(members), k


@pytest.mark.parametrize("estimator", ["grpo", "grpo_passk"])
def test_a_near_tied_group_beside_another_of_its_size_gets_verls_advantages(estimator):
    """The repro that found the bucketed std (tests/against_verl/test_verl_pipeline_differential.py): verl 0.9.1's grpo
    gives row 0 0.18367821 (σ = 2.9802322e-07 about the float32 mean); a [2, 2] std gave 0.18410304."""
    from rladv_cli import compute
    table = pa.table({"uid": ["a", "a", "b", "b"], "responses": [[1]] * 4, "response_mask": [[1]] * 4,
                      "score": [0.625, 0.6249995827674866, 1.0, 2.0]})
    advantages = compute(table, estimator=estimator)[0].column("advantages").to_pylist()
    if estimator == "grpo":
        assert advantages[0][0] == pytest.approx(0.18367821, abs=1e-7)
    else:  # pass@k: the best row gets (r1 - r2) / (σ + ε), the other 0
        assert advantages[0][0] == pytest.approx((0.625 - 0.6249995827674866) / (2.9802322e-07 + 1e-6), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1), split=st.integers(1, 11))
def test_row_moments_combine_to_the_batch_moments(lengths, seed, split):
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    x = torch.randn(n, generator=g) * 3 + 1
    m = (torch.rand(n, generator=g) > 0.3).float()
    c, s, q = kernels.row_moments(x, m, off)
    N, mean, m2 = kernels.combine_moments(c, s, q)
    v = x.double().numpy()[m.numpy() > 0]
    assert N == v.size
    if v.size:
        np.testing.assert_allclose(mean, v.mean(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m2, ((v - v.mean()) ** 2).sum(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("scan", SCANS)
@settings(max_examples=60, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1), reset_p=st.floats(0, 0.6), cut=st.integers(0, 12))
def test_undiscounted_scan_equals_the_loop_and_ignores_neighbours(scan, lengths, seed, reset_p, cut):
    """Undiscounted scans with resets (a in {0, 1}, the default γ = λ = 1): the loop, row by row."""
    g = torch.Generator().manual_seed(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    a = (torch.rand(n, generator=g) > reset_p).float()
    b = torch.randn(n, generator=g)
    h = scan(a, b, off)
    want = loop_scan(a, b, off)
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-6, atol=1e-5)
    k = min(cut, len(lengths) - 1)
    lo, hi = int(off[k]), int(off[k + 1])
    assert torch.equal(h[lo:hi], scan(a[lo:hi], b[lo:hi], torch.tensor([0, hi - lo])))


@pytest.mark.skipif(kernels._rows is None, reason="the C row sums were not built (no compiler at install)")
@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 400), min_size=1, max_size=12), seed=st.integers(0, 2**31 - 1),
       zeros=st.floats(0, 1))
def test_row_sums_in_c_equal_torchs_float64_segment_sums_bit_for_bit(lengths, seed, zeros):
    """``segment_sum`` and ``padded_row_sum`` on CPU float32 (one C pass) give the bits of the torch path they
    replace (a float64 copy reduced by ``torch.segment_reduce``), over magnitudes from 1e-30 to 1e30."""
    from unittest import mock

    rng = np.random.default_rng(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    x[rng.random(n) < zeros] = 0.0
    x = torch.from_numpy(x)
    width = torch.full((len(lengths),), max(lengths))
    got = kernels.segment_sum(x, off), kernels.padded_row_sum(x, off, width)
    with mock.patch.object(kernels, "_rows", None):
        want = kernels.segment_sum(x, off), kernels.padded_row_sum(x, off, width)
    assert got[0].dtype == torch.float64 and torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1])
    assert torch.equal(got[0], torch.tensor([in_order(x[a:b].double().numpy()) for a, b in zip(off[:-1], off[1:])],
                                            dtype=torch.float64))


def in_order(v: np.ndarray) -> float:
    total = 0.0
    for x in v.tolist():
        total += x
    return total


@pytest.mark.skipif(kernels._rows is None, reason="the C row summaries were not built (no compiler at install)")
@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 70), min_size=1, max_size=12), seed=st.integers(0, 2**31 - 1),
       valid_p=st.floats(0, 1), special=st.sampled_from(["none", "inf", "nan"]))
def test_row_summary_in_c_equals_the_torch_reductions_bit_for_bit(lengths, seed, valid_p, special):
    """The report's per-row summaries: the C pass (CPU) and the segment reductions (GPU, or no compiler) give
    the same bits, and both match a plain loop (empty rows, signed zeros, huge values, non-finite values)."""
    from unittest import mock

    rng = np.random.default_rng(seed)
    off = offsets_of(lengths)
    n = int(off[-1])
    x = rng.choice([0.0, -0.0, 1.5, -2.25, 3e38, -3e38], n).astype(np.float32) * (rng.random(n) < 0.3)
    x = np.where(rng.random(n) < 0.5, rng.normal(size=n).astype(np.float32), x).astype(np.float32)
    if special != "none" and n:
        x[rng.integers(n)] = np.inf if special == "inf" else np.nan
    valid = rng.random(n) < valid_p
    got = kernels.row_summary(torch.from_numpy(x), torch.from_numpy(valid), off)
    with mock.patch.object(kernels, "_rows", None):
        want = kernels.row_summary(torch.from_numpy(x), torch.from_numpy(valid), off)
    assert list(got) == list(want) == list(kernels.SUMMARY_FIELDS)
    for name in kernels.SUMMARY_FIELDS:
        assert torch.equal(got[name].isnan(), want[name].isnan()), name
        same = got[name].isnan() | (got[name] == want[name])
        assert bool(same.all()), (name, got[name], want[name])
    for i in range(len(lengths)):
        v = x[int(off[i]):int(off[i + 1])][valid[int(off[i]):int(off[i + 1])]].astype(np.float64)
        assert got["count"][i] == v.size and got["positive"][i] == (v > 0).sum() and got["zero"][i] == (v == 0).sum()
        if np.isfinite(v).all():  # float64 sums in token order (huge values cancel in that order)
            assert got["min"][i] == (v.min() if v.size else np.inf) and got["max"][i] == (v.max() if v.size else -np.inf)
            assert float(got["sum"][i]) == in_order(v)
            assert float(got["mass_negative"][i]) == in_order(v[v < 0])
            mean = in_order(v) / max(v.size, 1)
            assert float(got["m2"][i]) == in_order((v - mean) ** 2)
        else:
            assert not np.isfinite(float(got["sum"][i]))
