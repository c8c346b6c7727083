"""The comparison's arithmetic (``rladv_cli.compare.metrics``): hand-checked numbers, and properties (a run
against itself, A/B symmetry, chunks and order changing nothing) on random advantages."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rladv_cli.compare.metrics import (Block, GroupTally, Moments, PairTally, RunChunk, Sample, magnitudes,
                                       position_keys, row_means, row_sums, sign_flips, weight_changed)

NAN = np.nan


def f32(*xs) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


# ------------------------------------------------------------------------------------ hand-checked
def test_correlation_by_hand():
    """a = 1..4, b = 1,3,2,4: deviations ±1.5, ±0.5, S_ab = 2.25 - 0.25 - 0.25 + 2.25 = 4, S_aa = S_bb = 5."""
    m = Moments.of(f32(1, 2, 3, 4), f32(1, 3, 2, 4))
    assert (m.n, m.mean_a, m.mean_b, m.s_aa, m.s_bb, m.s_ab) == (4, 2.5, 2.5, 5.0, 5.0, 4.0)
    assert m.correlation == pytest.approx(0.8, abs=1e-15)
    assert Moments.of(f32(1, 2, 3), f32(2, 4, 6)).correlation == pytest.approx(1.0, abs=1e-15)
    assert Moments.of(f32(1, 2, 3), f32(6, 4, 2)).correlation == pytest.approx(-1.0, abs=1e-15)


def test_scale_by_hand():
    """b = 0.75 a exactly (rloo against Dr. GRPO on groups of 4): k = Σab / Σaa = 0.75; shifted or perturbed by
    one part in 10^4, no k holds (a correlation of 1 alone would not tell a shift from a scale)."""
    a = f32(1.5, -0.5, -0.5, -0.5, 0.25, 2)
    assert Moments.of(a, a * np.float32(0.75)).scale == pytest.approx(0.75, rel=1e-12)
    assert Moments.of(a, -2 * a).scale == pytest.approx(-2.0, rel=1e-12)
    assert Moments.of(a, a + np.float32(1)).scale is None
    assert Moments.of(a, a * f32(1, 1, 1, 1, 1, 1.0001)).scale is None
    assert Moments.of(f32(0, 0), f32(0, 0)).scale is None and Moments().scale is None
    assert Moments.of(a[:3], a[:3] * 3).merge(Moments.of(a[3:], a[3:] * 3)).scale == pytest.approx(3.0, rel=1e-12)


def test_correlation_is_undefined_for_constant_advantages_or_fewer_than_two_tokens():
    assert Moments.of(f32(1, 2, 3), f32(5, 5, 5)).correlation is None
    assert Moments.of(f32(0, 0), f32(1, 2)).correlation is None
    assert Moments.of(f32(1), f32(2)).correlation is None
    assert Moments().correlation is None


def test_merged_moments_are_those_of_the_whole():
    a, b = f32(1, 2, 3, 4, 10), f32(1, 3, 2, 4, -1)
    whole = Moments.of(a, b)
    parts = Moments.of(a[:2], b[:2]).merge(Moments().merge(Moments.of(a[2:], b[2:])))
    for field in ("n", "mean_a", "mean_b", "s_aa", "s_bb", "s_ab"):
        assert getattr(parts, field) == pytest.approx(getattr(whole, field), rel=1e-12), field


def changed(a: np.ndarray, b: np.ndarray) -> list[bool]:
    return weight_changed(*magnitudes(a), *magnitudes(b)).tolist()


def test_weight_changes_by_more_than_two_fold_either_way_and_the_zero_cases():
    a = f32(1, 1, 1, 0, 0, 2, -1, 1, 3)
    b = f32(2, 2.5, 0.4, 0, 3, -1, 0.5, -3, 0)
    # exactly 2x: no; 2.5x: yes; 0.4x: yes; 0 and 0: no; 0 -> 3: yes; 2 -> -1 (exactly half): no; -1 -> 0.5: no;
    # 1 -> -3 (the sign does not matter): yes; 3 -> 0: yes
    assert changed(a, b) == [False, True, True, False, True, False, False, True, True]
    assert changed(b, a) == changed(a, b)


def test_doubling_the_largest_float32_does_not_overflow():
    big = np.finfo(np.float32).max
    assert changed(f32(big), f32(big)) == [False]
    assert changed(f32(big), f32(big / 4)) == [True]


def test_row_means_and_sign_flips_by_hand():
    """Rows of 2, 2, 1 and 2 tokens; NaN marks a token not valid in that run."""
    block = Block(np.array([2, 2, 1, 2]), first_row=0, first_token=0)
    a = f32(1, -3, 1, -1, NAN, 2, 2)  # means -1, 0, none, 2
    b = f32(1, 1, 3, 3, 5, NAN, 1)  # means 1, 3, 5, 1
    ma, mb = row_means(a, block), row_means(b, block)
    assert ma[[0, 1, 3]].tolist() == [-1.0, 0.0, 2.0] and math.isnan(ma[2])
    assert mb.tolist() == [1.0, 3.0, 5.0, 1.0]
    # compared: rows 0, 1, 3 (row 2 has no valid token in A); flipped: row 0 only (0 against 3 is no flip)
    assert sign_flips(ma, mb) == (3, 1)
    assert sign_flips(mb, ma) == (3, 1)


def test_a_pair_by_hand_with_groups():
    """Two groups: g0 = rows 0 and 2, g1 = row 1. |a - b| per token valid in both:
    row 0: |1-2|, |2-2| = 1, 0; row 1: |0-1| = 1 (its second token valid in A only); row 2: |-1-1| = 2."""
    block = Block(np.array([2, 2, 1]), first_row=10, first_token=100, group=np.array([0, 1, 0]))
    a = f32(1, 2, 0, 5, -1)
    b = f32(2, 2, 1, NAN, 1)
    t = PairTally()
    t.add(RunChunk.of(a, block), RunChunk.of(b, block), block)
    assert (t.tokens, t.tokens_only_a, t.tokens_only_b) == (4, 1, 0)
    assert t.mean_abs_diff == pytest.approx(4 / 4) and t.max_abs_diff == 2.0
    # weight: 1 -> 2 exactly 2x: no; 2 -> 2: no; 0 -> 1: yes; -1 -> 1: no
    assert (t.changed, t.changed_share) == (1, 0.25)
    # row means: A 1.5, 2.5, -1; B 2, 1, 1: row 12 flips
    assert (t.rows, t.flips, t.flip_share) == (3, 1, 1 / 3)
    top = t.groups.top(10)
    assert [(g.group, g.mean_abs_diff, g.tokens, g.rows, g.row) for g in top] == [
        (0, 1.0, 3, 2, 12), (1, 1.0, 1, 1, 11)]  # equal means: the group seen first comes first
    assert top[0].row == 12  # row 12's own mean |a - b| (2) beats row 10's (0.5)


def test_row_sums_over_rows_of_any_length():
    assert row_sums(f32(1, 2, 3, 4), np.array([0, 2, 0, 1, 1, 0])).tolist() == [0, 3, 0, 3, 4, 0]
    assert row_sums(np.array([True, False, True]), np.array([2, 1]), np.int64).tolist() == [1, 1]
    assert row_sums(f32(), np.array([0, 0])).tolist() == [0, 0]


def test_group_best_row_keeps_the_first_of_equals_across_chunks():
    tally = GroupTally()
    tally.add(np.array([0, 0]), np.array([0, 1]), np.array([2.0, 2.0]), np.array([2, 2]))
    tally.add(np.array([0]), np.array([5]), np.array([1.0]), np.array([1]))
    assert [(g.row, g.rows, g.tokens, g.mean_abs_diff) for g in tally.top(1)] == [(0, 3, 5, 1.0)]


def test_groups_without_a_token_valid_in_both_runs_are_not_ranked():
    tally = GroupTally()
    tally.add(np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([0.0, 3.0, 0.0]), np.array([0, 1, 0]))
    assert [g.group for g in tally.top(10)] == [1]


def test_sample_keeps_the_smallest_keys_and_position_keys_are_distinct():
    keys = position_keys(0, 10_000)
    assert np.unique(keys).size == keys.size
    sample = Sample(3)
    sample.add(np.array([9, 4, 7], dtype=np.uint64), f32(0, 1, 2), f32(10, 11, 12))
    sample.add(np.array([1, 8], dtype=np.uint64), f32(3, 4), f32(13, 14))
    a, b = sample.points()
    assert a.tolist() == [3, 1, 2] and b.tolist() == [13, 11, 12]


# ------------------------------------------------------------------------------------ properties
@st.composite
def chunked_pair(draw):
    """Rows of 1..6 tokens, each token valid or not in each run (the same tokens in both, or not), two runs'
    float32 advantages (with ties and zeros), the rows' groups, and a split of the rows into chunks."""
    n_rows = draw(st.integers(1, 30))
    lengths = np.array(draw(st.lists(st.integers(1, 6), min_size=n_rows, max_size=n_rows)))
    n = int(lengths.sum())
    value = st.one_of(st.sampled_from([0.0, 0.5, -0.5, 1.0, 2.0]),
                      st.floats(-4, 4, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False))
    a = np.array(draw(st.lists(value, min_size=n, max_size=n)), dtype=np.float32)
    b = np.array(draw(st.lists(value, min_size=n, max_size=n)), dtype=np.float32)
    a[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = np.nan
    if draw(st.booleans()):  # the same tokens valid in both runs (no rejection): the prepared path
        b[np.isnan(a)] = np.nan
    else:
        b[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = np.nan
    group = np.array(draw(st.lists(st.integers(0, 4), min_size=n_rows, max_size=n_rows)))
    cuts = sorted(set(draw(st.lists(st.integers(1, n_rows), max_size=4))) | {n_rows})
    return lengths, a, b, group, cuts


def tally(lengths, a, b, group, cuts=None) -> PairTally:
    """``PairTally`` over the rows, chunk by chunk at the row indices ``cuts`` (one chunk without)."""
    t = PairTally(sample_size=8)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    start = 0
    for end in cuts or [len(lengths)]:
        lo, hi = offsets[start], offsets[end]
        block = Block(lengths[start:end], start, int(lo), group[start:end])
        t.add(RunChunk.of(a[lo:hi], block), RunChunk.of(b[lo:hi], block), block)
        start = end
    return t


def facts(t: PairTally) -> tuple:
    return (t.tokens, t.changed, t.rows, t.flips, [(g.group, g.tokens, g.rows, g.row) for g in t.groups.top(10)])


@settings(max_examples=150, deadline=None)
@given(chunked_pair())
def test_a_run_against_itself_correlates_1_and_flips_nothing(case):
    lengths, a, _, group, cuts = case
    t = tally(lengths, a, a, group, cuts)
    valid = ~np.isnan(a)
    assert (t.tokens, t.tokens_only_a, t.tokens_only_b) == (int(valid.sum()), 0, 0)
    assert (t.flips, t.changed, t.max_abs_diff) == (0, 0, 0.0)
    assert t.mean_abs_diff in (0.0, None)
    if valid.sum() >= 2 and np.unique(a[valid]).size > 1:
        assert t.moments.correlation == pytest.approx(1.0, abs=1e-9)
    else:
        assert t.moments.correlation is None


@settings(max_examples=150, deadline=None)
@given(chunked_pair())
def test_swapping_a_and_b_changes_only_which_side_is_which(case):
    lengths, a, b, group, cuts = case
    ab, ba = tally(lengths, a, b, group, cuts), tally(lengths, b, a, group, cuts)
    assert facts(ab) == facts(ba)
    assert (ab.tokens_only_a, ab.tokens_only_b) == (ba.tokens_only_b, ba.tokens_only_a)
    assert ab.max_abs_diff == ba.max_abs_diff
    assert ab.mean_abs_diff == ba.mean_abs_diff
    assert (ab.moments.correlation is None) == (ba.moments.correlation is None)
    if ab.moments.correlation is not None:
        assert ab.moments.correlation == pytest.approx(ba.moments.correlation, abs=1e-12)
    pa_, pb_ = ab.sample.points()
    qb, qa = ba.sample.points()
    assert pa_.tolist() == qa.tolist() and pb_.tolist() == qb.tolist()


@settings(max_examples=150, deadline=None)
@given(chunked_pair())
def test_chunks_change_nothing_and_the_figures_match_numpy(case):
    lengths, a, b, group, cuts = case
    chunked, whole = tally(lengths, a, b, group, cuts), tally(lengths, a, b, group)
    assert facts(chunked) == facts(whole)
    assert chunked.sample.points()[0].tolist() == whole.sample.points()[0].tolist()
    both = ~np.isnan(a) & ~np.isnan(b)
    x, y = a[both].astype(np.float64), b[both].astype(np.float64)
    r = chunked.moments.correlation
    if r is None:
        assert x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0
    else:
        assert r == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)
    if x.size:
        assert chunked.mean_abs_diff == pytest.approx(np.abs(x - y).mean(), rel=1e-12, abs=1e-12)
    # the rows' signs, from their exact sums, and the groups' means, from scratch
    row = np.repeat(np.arange(len(lengths)), lengths)

    def exact(v, r) -> tuple[float, bool]:
        """The row's exact sum (NaN without valid tokens), and whether float64 gets its sign for sure: a sum
        that cancels to far below its terms' size has a sign the order of the additions decides."""
        kept = v[(row == r) & ~np.isnan(v)].tolist()
        total, size = (math.fsum(kept), math.fsum(map(abs, kept))) if kept else (math.nan, 0.0)
        return total, size == 0 or abs(total) > 1e-9 * size

    (sa, clear_a), (sb, clear_b) = (zip(*(exact(v, r) for r in range(len(lengths)))) for v in (a, b))
    sa, sb, clear = np.array(sa), np.array(sb), np.array(clear_a) & np.array(clear_b)
    compared = ~np.isnan(sa) & ~np.isnan(sb)
    assert chunked.rows == compared.sum()
    if clear.all():
        assert chunked.flips == (compared & (np.sign(sa) * np.sign(sb) < 0)).sum()
    for g in chunked.groups.top(10):
        tokens = both & (group[row] == g.group)
        assert g.tokens == tokens.sum()
        assert g.mean_abs_diff == pytest.approx(np.abs(a[tokens].astype(np.float64) - b[tokens]).mean(), rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(chunked_pair(), st.floats(2.01, 100))
def test_scaling_a_run_keeps_the_correlation_and_changes_every_non_zero_weight(case, scale):
    lengths, a, _, group, cuts = case
    scaled = (a * np.float32(scale)).astype(np.float32)
    t = tally(lengths, a, scaled, group, cuts)
    valid = ~np.isnan(a)
    assert t.changed == int((a[valid] != 0).sum())
    assert t.flips == 0
    if t.moments.correlation is not None:
        assert t.moments.correlation == pytest.approx(1.0, abs=1e-6)
    if (a[valid] != 0).any():  # b = k·a up to float32 rounding of each product
        assert t.moments.scale == pytest.approx(np.float32(scale), rel=1e-6)
