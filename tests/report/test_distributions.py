"""The report's histograms count exactly what they claim: bin ``i`` is ``[edges[i], edges[i+1])`` (the last one
closed), for the exact-array ``histogram`` and for every histogram built from a ``Sketch`` (whole, per label,
and paired), whatever the values (signs, signed zeros, powers of two, bucket boundaries, repeats), however
coarse the sketch got, and however the values were chunked."""
from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import rladv_cli
from conftest import SAMPLES
from rladv_cli.report.distributions import _SHIFT, MANTISSA_BITS, Sketch, edges_for, histogram

FINITE32 = 0x7F7FFFFF
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------- strategies
def _f32(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


@st.composite
def boundary(draw) -> float:
    """A bucket boundary at some level (low bits zero), or one float32 ulp either side of it, either sign."""
    shift = draw(st.integers(_SHIFT, 30))
    bits = min(draw(st.integers(0, FINITE32)) >> shift << shift, FINITE32 >> shift << shift)
    bits = min(max(bits + draw(st.sampled_from([-1, 0, 0, 1])), 0), FINITE32)
    return -_f32(bits) if draw(st.booleans()) else _f32(bits)


ELEMENT = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.floats(-4, 4, width=32),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1024.0, -2.0 ** -20, 2.0 ** -126, -2.0 ** -149]),
    st.integers(-130, 127).flatmap(lambda k: st.sampled_from([2.0 ** k, -2.0 ** k])),
    boundary(),
)


@st.composite
def values32(draw, max_pool: int = 40) -> np.ndarray:
    """float32 values with repeats: a pool of distinct-ish values, each repeated a few times, shuffled."""
    pool = draw(st.lists(ELEMENT, min_size=1, max_size=max_pool))
    reps = draw(st.lists(st.integers(1, 6), min_size=len(pool), max_size=len(pool)))
    v = np.repeat(np.asarray(pool, dtype=np.float32), reps)
    return v[np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1))).permutation(v.size)]


def cuts_for(draw, n: int) -> list[int]:
    return sorted(set(draw(st.lists(st.integers(0, n), max_size=6))))


# ----------------------------------------------------------------- checks
def exact(values: np.ndarray, edges) -> list[int]:
    """np.histogram's counts (half-open bins, the last one closed) on the reported edges."""
    return np.histogram(np.asarray(values, dtype=np.float64), bins=np.asarray(edges, dtype=np.float64))[0].tolist()


def check_edges(edges, values: np.ndarray) -> None:
    e = np.asarray(edges, dtype=np.float64)
    assert e.size >= 2 and np.all(np.diff(e) > 0), edges
    lo, hi = float(np.min(values)), float(np.max(values))
    if lo == hi:  # one value: one bin of width 1 around it (wider where 0.5 is lost in the value)
        assert e.size == 2 and e[0] < lo < e[1] and e[1] - e[0] >= 1 - 1e-12 * max(1.0, abs(lo))
    else:
        assert e[0] == lo and e[-1] == hi


def fed(values: np.ndarray, cuts, max_keys: int, labels=None, y=None, merge: bool = False) -> Sketch:
    """A sketch fed ``values`` in the chunks ``cuts`` gives (by ``add``, or by merging one sketch per chunk)."""
    paired = y is not None
    sk = Sketch(paired=paired, max_keys=max_keys)
    lab = np.split(labels, cuts) if labels is not None else [None] * (len(cuts) + 1)
    ys = np.split(y, cuts) if paired else [None] * (len(cuts) + 1)
    for x, la, yy in zip(np.split(values, cuts), lab, ys):
        if merge:
            part = Sketch(paired=paired, max_keys=max_keys)
            part.add(x, label=la, y=yy)
            sk.merge(part)
        else:
            sk.add(x, label=la, y=yy)
    return sk


# ----------------------------------------------------------------- properties
@SETTINGS
@given(data=st.data(), values=values32(), max_keys=st.sampled_from([2, 3, 5, 9, 40, Sketch.MAX_KEYS]))
def test_sketch_histogram_counts_are_exact_for_its_edges(data, values, max_keys):
    sk = fed(values, [], max_keys)
    h = sk.histogram()
    check_edges(h.edges, values)
    assert h.counts == exact(values, h.edges), (sk.level, h.edges)
    # any chunking, fed or merged, reaches the same level and the same histogram
    cuts = cuts_for(data.draw, values.size)
    for merge in (False, True):
        other = fed(values, cuts, max_keys, merge=merge)
        assert other.level == sk.level and other.histogram() == h
        assert other.histogram().edges == h.edges and other.histogram().counts == h.counts


@SETTINGS
@given(data=st.data(), values=values32(), max_keys=st.sampled_from([6, 7, 12, 50, Sketch.MAX_KEYS]))
def test_label_counts_are_exact_for_the_sketch_edges(data, values, max_keys):
    labels = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=values.size, max_size=values.size)))
    sk = fed(values, [], max_keys, labels=labels)
    edges = sk.edges()
    check_edges(edges, values)
    cuts = cuts_for(data.draw, values.size)
    other = fed(values, cuts, max_keys, labels=labels, merge=data.draw(st.booleans()))
    assert other.level == sk.level and np.array_equal(other.edges(), edges)
    total = np.zeros(edges.size - 1, dtype=np.int64)
    for label in range(3):
        got = sk.label_counts(edges, lambda high: high == label)
        assert got == exact(values[labels == label], edges), (label, sk.level, edges)
        assert other.label_counts(edges, lambda high: high == label) == got
        total += got
    assert total.tolist() == sk.histogram().counts == exact(values, edges)


@SETTINGS
@given(data=st.data(), x=values32(), max_keys=st.sampled_from([4, 5, 9, 30, Sketch.MAX_KEYS]))
def test_pairs_counts_are_exact_for_both_axes(data, x, max_keys):
    y = data.draw(values32()) if data.draw(st.booleans()) else x[::-1].copy()
    y = np.resize(y, x.size).astype(np.float32)
    sk = fed(x, [], max_keys, y=y)
    y_edges, x_edges, counts, means = sk.pairs()
    check_edges(y_edges, y)
    check_edges(x_edges, x)
    want, _, _ = np.histogram2d(y.astype(np.float64), x.astype(np.float64), bins=[y_edges, x_edges])
    assert np.asarray(counts).tolist() == want.astype(np.int64).tolist(), (sk.level, y_edges, x_edges)
    # the same through any chunking
    other = fed(x, cuts_for(data.draw, x.size), max_keys, y=y, merge=data.draw(st.booleans()))
    o_y, o_x, o_counts, o_means = other.pairs()
    assert np.array_equal(o_y, y_edges) and np.array_equal(o_x, x_edges) and o_counts == counts and o_means == means
    # the per-value-bin mean of x is approximate: from bucket midpoints clipped to [min, max] of x
    y_bin = np.clip(np.searchsorted(y_edges, y.astype(np.float64), side="right") - 1, 0, y_edges.size - 2)
    for b, mean in enumerate(means):
        sel = y_bin == b
        assert (mean is None) == (not sel.any())
        if mean is None:
            continue
        assert x_edges[0] <= mean <= x_edges[-1] or x.min() == x.max()
        if sk.level <= MANTISSA_BITS:  # each value counts at its bucket's midpoint, within the bucket's width
            exact_mean = math.fsum(x[sel].astype(np.float64).tolist()) / int(sel.sum())
            width = max(float(np.abs(x[sel]).astype(np.float64).max()) * 2.0 ** (sk.level - MANTISSA_BITS),
                        2.0 ** (_SHIFT + sk.level - 149))  # a subnormal bucket's width: 2^(shift) steps of 2^-149
            assert abs(mean - exact_mean) <= width, (b, mean, exact_mean, sk.level)
        if sk.level == 0:  # a bucket spans 2^-MANTISSA_BITS of its value (or less)
            xs = x[sel].astype(np.float64)
            tol = 2.0 ** -MANTISSA_BITS * np.abs(xs).max() + 2.0 ** (_SHIFT - 149)
            assert abs(mean - xs.mean()) <= tol * (1 + 1e-9)


@SETTINGS
@given(data=st.data(), max_keys=st.sampled_from([2, 9, Sketch.MAX_KEYS]))
def test_edges_sit_on_bucket_boundaries_near_the_linear_ones(data, max_keys):
    """At level 0 every interior edge is within a bucket (2^-MANTISSA_BITS of its value) of a linear edge;
    at any level, every bucket lies in one bin (checked via the counts above) and no edge is -0.0."""
    values = data.draw(values32())
    sk = fed(values, [], max_keys)
    edges = sk.edges()
    assert not any(math.copysign(1.0, e) < 0 and e == 0 for e in edges.tolist())
    if sk.level == 0 and values.min() < values.max():
        linear = edges_for(float(values.min()), float(values.max()), values.size)
        for e in edges[1:-1]:
            near = np.abs(linear - e).min()
            assert near <= 2.0 ** -MANTISSA_BITS * abs(e) + 2.0 ** (_SHIFT - 148), (e, linear)


@SETTINGS
@given(values=st.lists(st.one_of(st.floats(-1e30, 1e30), st.floats(-3, 3), st.sampled_from([0.0, -0.0, 0.1, 0.3])),
                        min_size=1, max_size=200))
def test_exact_histogram_counts_match_numpy(values):
    v = np.asarray(values, dtype=np.float64)
    h = histogram(v)
    check_edges(h.edges, v)
    assert h.counts == exact(v, h.edges)


@SETTINGS
@given(lo=st.floats(-100, 100), width=st.floats(1e-3, 1e3), nb=st.integers(2, 12))
@example(lo=2.1, width=2.5, nb=3)
def test_exact_histogram_values_on_the_edges(lo, width, nb):
    """Values exactly equal to the linear edges belong to the bin that starts there."""
    hi = lo + width
    assume(hi > lo)
    e = np.linspace(lo, hi, nb + 1)
    v = np.concatenate([e, np.full(nb * nb - (nb + 1), lo)])  # nb^2 values: nb bins
    h = histogram(v)
    assert len(h.counts) == nb and np.array_equal(np.asarray(h.edges), e)
    assert h.counts == exact(v, h.edges)


# ----------------------------------------------------------------- regressions
def test_values_just_inside_a_linear_edge_stay_in_their_bin():
    """The audit's case in small: a linear edge a quarter into a bucket; before, the bucket's whole count
    went to the bin of its midpoint, across the edge."""
    w = 2.0 ** -MANTISSA_BITS
    hi = 2 * (1 + w / 4)  # linear edges [0, 1 + w/4, hi]: 1.0 sits just below the middle one
    for sign in (1, -1):
        values = (sign * np.array([0.0, 1.0, hi, hi])).astype(np.float32)
        sk = Sketch()
        sk.add(values)
        h = sk.histogram()
        assert h.counts == exact(values, h.edges), h
        assert h.edges[1] == (1.0 if sign > 0 else -float(np.nextafter(np.float32(1), np.float32(0))))
    v = np.array([2.1, *np.linspace(2.1, 4.6, 4)[1:3], 4.6, 2.1, 2.1, 4.6, 4.6, 4.6])
    assert histogram(v).counts == exact(v, histogram(v).edges) == [3, 1, 5]


def test_negative_bucket_next_to_zero():
    """-0.0 counts as 0.0; the negative bucket of magnitude key 0 is (-b0, 0): an edge snapped to 0 splits them."""
    tiny = 2.0 ** -149
    values = np.array([-1.0, -tiny, -0.0, 0.0, tiny, 1.0], dtype=np.float32)
    for max_keys in (Sketch.MAX_KEYS, 2, 3):
        sk = Sketch(max_keys=max_keys)
        sk.add(values)
        h = sk.histogram()
        check_edges(h.edges, values)
        assert h.counts == exact(values, h.edges), (sk.level, h)


@pytest.mark.parametrize("estimator, data, settings_", [
    ("reinforce_plus_plus", "groups", {}), ("grpo", "groups", {}), ("gae", "multiturn", dict(lam=0.95))])
def test_report_histograms_match_numpy_on_the_output(estimator, data, settings_):
    """The audit's repro: the report's histograms of the advantages (whole and split by length) and of returns
    against values count the output's valid tokens exactly as np.histogram does on the same edges."""
    table = pq.read_table(SAMPLES / f"{data}.parquet")
    out, report = rladv_cli.compute(table, estimator=estimator, device="cpu", **settings_)
    mask = [np.asarray(m) > 0 for m in out["response_mask"].to_pylist()]

    def tokens(column):
        return np.concatenate([np.asarray(a, np.float32)[m] for a, m in zip(out[column].to_pylist(), mask)])

    d = report.distributions
    adv = tokens("advantages")
    assert d.advantages.counts == exact(adv, d.advantages.edges)
    length = np.array([max(int(m.sum()), 1).bit_length() - 1 for m in mask])
    row_of = np.repeat(np.arange(len(mask)), [int(m.sum()) for m in mask])
    for part in d.advantage_splits.by_length:
        k = int(part.label.split("-")[0].replace(",", "")).bit_length() - 1
        assert part.counts == exact(adv[length[row_of] == k], d.advantages.edges), part.label
    if d.returns is not None:
        assert d.returns.counts == exact(tokens("returns"), d.returns.edges)
    rv = d.returns_vs_values
    if estimator == "gae":
        r, v = tokens("returns").astype(np.float64), tokens("values").astype(np.float64)
        want, _, _ = np.histogram2d(v, r, bins=[rv.value_edges, rv.return_edges])
        assert rv.counts == want.astype(np.int64).tolist()


def test_token_sketches_count_on_their_threads_what_one_thread_counts(monkeypatch):
    """``TokenSketches`` counts each sketch on a thread of its own, never more than ``BEHIND`` chunks behind the
    pass; what it counted is what counting every chunk in turn, here, gives."""
    from types import SimpleNamespace

    from rladv_cli.report.diagnostics import LENGTH_LABELS, TokenSketches

    monkeypatch.setattr(TokenSketches, "BEHIND", 1)
    rng = np.random.default_rng(3)
    threaded = TokenSketches(with_values=True)
    advantages, returns, pairs = Sketch(), Sketch(), Sketch(paired=True)
    for _ in range(12):
        lengths = rng.integers(1, 30, rng.integers(1, 20))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        valid = rng.random(offsets[-1]) > 0.2
        a = (rng.normal(size=valid.size) * valid).astype(np.float32)
        r, values = ((a + 1) * valid).astype(np.float32), rng.normal(size=valid.size).astype(np.float32)
        outcome, count = rng.integers(0, 3, lengths.size), np.add.reduceat(valid.astype(np.int64), offsets[:-1])
        threaded.add(SimpleNamespace(row_offsets=offsets, values=values), a, r, valid, outcome, count)
        assert len(threaded._counted) <= 1
        length = np.maximum(np.frexp(count)[1].astype(np.int64) - 1, 0)
        advantages.add_rows(a, valid, offsets, label=outcome * LENGTH_LABELS + length)
        returns.add_rows(r, valid, offsets)
        pairs.add_rows(r, valid, offsets, y=values)
    threaded.done()
    for got, want in ((threaded.advantages, advantages), (threaded.returns, returns), (threaded.pairs, pairs)):
        assert want.count > 0 and got.count == want.count and got.level == want.level
        assert np.array_equal(got.keys, want.keys) and np.array_equal(got.counts, want.counts)
    assert not threaded.returns_are_advantages
