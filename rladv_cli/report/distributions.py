"""Histograms for the report's plots, from whole per-row arrays or from sketches fed chunk by chunk (numpy only).

Every histogram counts exactly what its edges say: bin ``i`` is ``[edges[i], edges[i+1])``, the last one closed
at the max (as ``np.histogram``); values are put in bins with ``np.searchsorted`` on the edges themselves.

A ``Sketch`` counts float32 values in fixed buckets (sign, exponent and the top ``MANTISSA_BITS`` mantissa bits,
so a bucket spans about 0.1% of its value; fewer bits, at a higher ``level``, when there are too many distinct
buckets to keep), each under a small integer label or paired with a second value's bucket. The counts are exact
integers and the buckets do not depend on the order of the values, so any split of them into chunks gives the
same sketch. Its histograms span the exact ``[min, max]``; the interior edges are the linear ones snapped to
bucket boundaries at the sketch's final level (``snap_edges``: within a bucket, about 0.1% of the value, of the
linear spacing at level 0), so that every bucket lies wholly in one bin and the counts are exact for the edges
given. A positive bucket is ``[a, b)``; a negative one, bucketed by magnitude, is ``(-b, -a]`` and ``-0.0``
counts as ``0.0``, so a negative-side edge sits one float32 step toward zero from ``-a``.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .model import Histogram

try:  # the C key counter (setup.py builds it when a compiler is there)
    from ..tensors import _rows
except ImportError:  # pragma: no cover - depends on the install
    _rows = None

MAX_BINS = 40
MAX_PAIR_BINS = 24
MANTISSA_BITS = 10
_SHIFT = 23 - MANTISSA_BITS
BUCKET_BITS = 32 - _SHIFT
_LOW = (1 << BUCKET_BITS) - 1


def bucket(values: np.ndarray, level: int = 0) -> np.ndarray:
    """The bucket of each float32 value at ``level`` (``level`` mantissa bits fewer; ``-0.0`` counts as
    ``0.0``); ``(n,)`` int64 in ``[0, 2^(BUCKET_BITS - level))``."""
    v = np.asarray(values, dtype=np.float32) + np.float32(0.0)
    return (v.view(np.uint32) >> np.uint32(_SHIFT + level)).astype(np.int64)


def bucket_mid(keys: np.ndarray, level: int = 0) -> np.ndarray:
    """The midpoint of each bucket (its low end when the high end overflows to inf/nan); float64."""
    k, shift = np.asarray(keys, dtype=np.uint32), np.uint32(_SHIFT + level)
    low = (k << shift).view(np.float32).astype(np.float64)
    high = ((k + np.uint32(1)) << shift).view(np.float32).astype(np.float64)
    return np.where(np.isfinite(high), (low + high) / 2, low)


def edges_for(lo: float, hi: float, n: int, integer: bool = False, bins: Optional[int] = None) -> np.ndarray:
    """Bin edges for ``n`` values in ``[lo, hi]``: ``bins`` bins, by default about sqrt(n), at most ``MAX_BINS``;
    integer data gets integer-wide bins centred on the integers; one value gets one bin of width 1 around it."""
    nb = bins or max(1, min(MAX_BINS, math.ceil(math.sqrt(max(n, 1)))))
    if integer:
        width = max(1, math.ceil((hi - lo + 1) / nb))
        nb = max(1, math.ceil((hi - lo + 1) / width))
        return lo - 0.5 + width * np.arange(nb + 1, dtype=np.float64)
    if hi == lo:  # (a value so large that 0.5 is lost in it gets the float64 spacing at it instead)
        half = max(0.5, float(np.spacing(abs(lo))))
        return np.array([lo - half, lo + half])
    return np.unique(np.linspace(lo, hi, nb + 1))  # unique: a span of a few subnormals has fewer distinct edges


def bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bin of each value among the increasing ``edges``: ``i`` where ``edges[i] <= v < edges[i+1]``, the
    last bin closed (values outside go to the end bins); int64. ``np.searchsorted`` on the edges themselves, so
    a value equal to an edge lands in the bin that starts there, as in ``np.histogram``."""
    idx = np.searchsorted(edges, np.asarray(values, dtype=np.float64), side="right") - 1
    return np.clip(idx, 0, edges.size - 2).astype(np.int64)


def bin_counts(values: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> list[int]:
    """``weights`` (integer counts) summed per bin of ``edges``."""
    return _summed(bin_index(values, edges), weights, edges.size - 1)


def _summed(bins: np.ndarray, weights: np.ndarray, n: int) -> list[int]:
    """``weights`` (integer counts, exact in float64) summed per bin ``bins (k,)`` in ``[0, n)``."""
    return [int(c) for c in np.bincount(bins, weights=weights, minlength=n).round()]


def _magnitude(keys: np.ndarray, level: int) -> np.ndarray:
    """The float32 magnitude at which each magnitude key (no sign bit) begins at ``level``, inf past the
    largest finite one; float64."""
    bits = np.asarray(keys, dtype=np.int64) << (_SHIFT + level)
    finite = bits < 0x7F800000
    low = np.where(finite, bits, 0).astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(finite, low, np.inf)


def snap_edges(edges: np.ndarray, level: int) -> np.ndarray:
    """``edges`` with the outer two kept and the interior ones moved to bucket boundaries at ``level``, so that
    every bucket's float32 values fall in one bin ``[edges[i], edges[i+1])``: on the positive side, to the
    nearest boundary ``a`` (buckets are ``[a, b)``); on the negative side, to the float32 just above ``-a`` for
    the nearest boundary ``a`` of the magnitude (buckets are ``(-b, -a]``), or to 0 (``-0.0`` counts as 0, so
    the negative bucket next to 0 is ``(-b, 0)``). Interior edges that leave ``(edges[0], edges[-1])`` or
    meet another are dropped: strictly increasing, possibly fewer bins."""
    lo, hi = float(edges[0]), float(edges[-1])
    inner = np.asarray(edges[1:-1], dtype=np.float64)
    if inner.size == 0:
        return np.asarray(edges, dtype=np.float64)
    mag = np.abs(inner)
    key = (mag.astype(np.float32).view(np.uint32) >> np.uint32(_SHIFT + level)).astype(np.int64)
    below, above = _magnitude(key, level), _magnitude(key + 1, level)
    # the float32 rounding of |edge| is within half an ulp of it: the nearest boundary is one of these two
    a = np.where(above - mag < mag - below, above, below)
    step_in = np.nextafter(a.astype(np.float32), np.float32(0)).astype(np.float64)  # 0 stays 0
    snapped = np.where(inner < 0, -step_in, a) + 0.0  # + 0.0: no -0.0 edge
    inside = snapped[(snapped > lo) & (snapped < hi)]
    return np.concatenate([[lo], np.unique(inside), [hi]])


def histogram(values: np.ndarray, integer: bool = False) -> Optional[Histogram]:
    """Histogram of the finite entries of ``values (n,)`` over ``[min, max]``; None when there are none."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    edges = edges_for(float(v.min()), float(v.max()), v.size, integer)
    return Histogram(edges=edges.tolist(), counts=bin_counts(v, np.ones(v.size), edges))


def _reduce(keys: np.ndarray, counts: np.ndarray, ordered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the summed counts of each; ``ordered``: the keys are sorted already."""
    if keys.size == 0:
        return keys, counts
    if not ordered:
        order = np.argsort(keys)  # counts are summed: the order among equal keys does not matter
        keys, counts = keys[order], counts[order]
    start = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[start], np.add.reduceat(counts, start)


class Sketch:
    """Exact counts of keys ``(high << BUCKET_BITS) | bucket(x, level)``, where ``high`` is a label, or the
    bucket of a paired value ``y`` (``paired``); the exact min and max of ``x`` (and ``y``).

    Memory is bounded: when the sketch holds more than ``max_keys`` distinct keys, every bucket drops one more
    mantissa bit (``level`` += 1) and equal keys merge. Counting a prefix of the values never gives more keys
    than counting them all, so the final ``level`` is the smallest at which all the values fit, whatever the
    chunking: the sketch stays independent of it.
    """

    MAX_KEYS = 1 << 17

    def __init__(self, paired: bool = False, max_keys: int = MAX_KEYS) -> None:
        self.paired, self.max_keys, self.level = paired, max_keys, 0
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.lo = [math.inf, math.inf]
        self.hi = [-math.inf, -math.inf]
        self._binned: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None  # see _bins

    def add(self, x: np.ndarray, label: Optional[np.ndarray] = None, y: Optional[np.ndarray] = None) -> None:
        """Count finite float32 ``x (n,)``, each under an int ``label (n,)`` in ``[0, 2^24)``, or with ``y (n,)``
        in a paired sketch."""
        x = np.asarray(x, dtype=np.float32)
        if x.size == 0:
            return
        high = np.asarray(label, dtype=np.int64) if label is not None else np.zeros(x.size, dtype=np.int64)
        if self.paired:
            y = np.asarray(y, dtype=np.float32)
            high = bucket(y, self.level)
            self.lo[1], self.hi[1] = min(self.lo[1], float(y.min())), max(self.hi[1], float(y.max()))
        self.lo[0], self.hi[0] = min(self.lo[0], float(x.min())), max(self.hi[0], float(x.max()))
        self.count += int(x.size)
        keys, counts = np.unique((high << BUCKET_BITS) | bucket(x, self.level), return_counts=True)
        self._absorb(keys, counts)

    def add_rows(self, x: np.ndarray, valid: np.ndarray, offsets: np.ndarray, label: Optional[np.ndarray] = None,
                 y: Optional[np.ndarray] = None) -> None:
        """Count the valid tokens of a chunk of rows: ``x (N,)`` float32 and ``valid (N,)`` bool per token, row
        ``offsets (B+1,)`` from 0 to N, and each row's ``label (B,)`` or, paired, each token's ``y (N,)``. The
        same counts as ``add`` of the valid tokens; in one linear pass in C where it was built (no sort), which
        drops mantissa bits as soon as the chunk alone holds more than ``max_keys`` distinct keys."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets[0] != 0 or offsets[-1] != x.size or valid.size != x.size or (y is not None and y.size != x.size) \
                or (label is not None and label.size != offsets.size - 1):
            raise ValueError("Sketch.add_rows: offsets, values, valid flags and labels do not line up")
        if _rows is None:
            high = None if label is None else np.repeat(label, np.diff(offsets))[valid]
            self.add(x[valid], label=high, y=None if y is None else y[valid])
            return
        n = int(np.count_nonzero(valid))
        if n == 0:
            return
        x, valid = np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(valid, dtype=np.bool_).view(np.uint8)
        label = None if label is None else np.ascontiguousarray(label, dtype=np.int64)
        y = None if y is None else np.ascontiguousarray(y, dtype=np.float32)
        keys, counts = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        distinct, levels, x_lo, x_hi, y_lo, y_hi = _rows.count_keys(
            x.ctypes.data, valid.ctypes.data, 0 if label is None else label.ctypes.data, 0 if y is None else y.ctypes.data,
            offsets.ctypes.data, offsets.size - 1, _SHIFT + self.level, BUCKET_BITS, self.max_keys,
            min(self.keys.size, n), keys.ctypes.data, counts.ctypes.data)
        for _ in range(levels):  # the chunk alone held more keys than fit: the kept ones drop the same bits
            self._coarsen()
        self.lo[0], self.hi[0] = min(self.lo[0], x_lo), max(self.hi[0], x_hi)
        if self.paired:
            self.lo[1], self.hi[1] = min(self.lo[1], y_lo), max(self.hi[1], y_hi)
        self.count += n
        self._absorb(keys[:distinct], counts[:distinct])

    def merge(self, other: "Sketch") -> None:
        """Add what ``other`` counted: the result is the sketch of both sets of values. Both are brought to the
        coarser level first; each level is at most the final one, so the final level is the same as one sketch
        fed everything would reach."""
        if other.count == 0:
            return
        while other.level < self.level:
            other._coarsen()
        while self.level < other.level:
            self._coarsen()
        self.count += other.count
        self.lo = [min(a, b) for a, b in zip(self.lo, other.lo)]
        self.hi = [max(a, b) for a, b in zip(self.hi, other.hi)]
        self._absorb(other.keys, other.counts)

    def _absorb(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Add counts of keys at this level, then coarsen while over ``max_keys``."""
        self.keys, self.counts = _reduce(np.concatenate([self.keys, keys]), np.concatenate([self.counts, counts]))
        while self.keys.size > self.max_keys:
            self._coarsen()

    def _coarsen(self) -> None:
        """One mantissa bit fewer in every bucket (and in a paired value's bucket); equal keys merge."""
        self.level += 1
        high, low = self.keys >> BUCKET_BITS, (self.keys & _LOW) >> 1
        # a label stays and the bucket halves: sorted keys stay sorted; a paired value's bucket halves too
        self.keys, self.counts = _reduce(((high >> 1 if self.paired else high) << BUCKET_BITS) | low, self.counts,
                                         ordered=not self.paired)

    def _inside(self, keys: np.ndarray) -> np.ndarray:
        """A float32 value inside each bucket (its bits with the lowest one set: never a boundary nor 0), which
        ``bin_index`` puts in the bin that holds the whole bucket when the edges are ``snap_edges``'s; float64."""
        bits = (np.asarray(keys, dtype=np.int64) << (_SHIFT + self.level)) | 1
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)

    def _edges(self, axis: int, bins: Optional[int] = None) -> np.ndarray:
        """The bins of ``x`` (axis 0) or ``y`` (1): linear over the exact ``[min, max]`` (``edges_for``), the
        interior edges snapped to bucket boundaries at the final level."""
        lo, hi = self.lo[axis] + 0.0, self.hi[axis] + 0.0  # + 0.0: -0.0 as 0.0, whichever of the two came first
        return snap_edges(edges_for(lo, hi, self.count, bins=bins), self.level)

    def edges(self) -> Optional[np.ndarray]:
        """The bins of ``x``: over its exact ``[min, max]``, the interior edges on bucket boundaries (within a
        bucket of a linear spacing), so that each bucket's count belongs to one bin; None when nothing was
        counted."""
        return self._edges(0) if self.count else None

    def histogram(self) -> Optional[Histogram]:
        """All of ``x`` over ``edges()``: exact counts (each bucket lies in one bin)."""
        edges = self.edges()
        if edges is None:
            return None
        return Histogram(edges=edges.tolist(), counts=self.label_counts(edges, lambda high: np.ones(high.size, bool)))

    def label_counts(self, edges: np.ndarray, select) -> list[int]:
        """Counts per bin of ``edges`` (this sketch's ``edges()``, for exact counts) of the keys whose label
        satisfies ``select(labels) -> bool array``."""
        keep = select(self.keys >> BUCKET_BITS)
        return _summed(self._bins(edges)[keep], self.counts[keep].astype(np.float64), edges.size - 1)

    def _bins(self, edges: np.ndarray) -> np.ndarray:
        """The bin of ``edges`` of each key's bucket ``(k,)``, kept while the keys and the edges stay the same (the
        report asks for one label after another on the same edges)."""
        if self._binned is None or self._binned[0] is not self.keys or not np.array_equal(self._binned[1], edges):
            self._binned = (self.keys, np.array(edges), bin_index(self._inside(self.keys & _LOW), edges))
        return self._binned[2]

    def pairs(self) -> tuple[np.ndarray, np.ndarray, list[list[int]], list[Optional[float]]]:
        """A paired sketch as ``(y_edges, x_edges, counts[y bin][x bin], mean x per y bin)``. Both axes' interior
        edges sit on bucket boundaries at the final level (``y``'s buckets coarsen with it too), so the counts are
        exact for these edges. The means are approximate: each bucket counts at its midpoint (clipped to
        ``[min, max]`` of ``x``), within a bucket's width of its values; None for an empty bin. About
        2·n^(1/4) bins per axis (at most ``MAX_PAIR_BINS``), so the cells of a 2-D histogram fill about as well
        as a 1-D histogram's bins."""
        bins = min(MAX_PAIR_BINS, math.ceil(2 * self.count ** 0.25))
        y_edges, x_edges = self._edges(1, bins), self._edges(0, bins)
        high, low = self.keys >> BUCKET_BITS, self.keys & _LOW
        y_bin = bin_index(self._inside(high), y_edges)
        nx, ny = x_edges.size - 1, y_edges.size - 1
        n = self.counts.astype(np.float64)
        cells = _summed(y_bin * nx + bin_index(self._inside(low), x_edges), n, ny * nx)
        counts = [cells[b * nx:(b + 1) * nx] for b in range(ny)]
        # each y bin's weighted x, summed exactly (math.fsum: the order of the keys does not matter)
        order = np.argsort(y_bin, kind="stable")
        weighted = (np.clip(bucket_mid(low, self.level), self.lo[0], self.hi[0]) * n)[order]
        bounds = np.searchsorted(y_bin[order], np.arange(ny + 1)).tolist()
        totals = [sum(row) for row in counts]
        means = [math.fsum(weighted[bounds[b]:bounds[b + 1]].tolist()) / totals[b] if totals[b] else None
                 for b in range(ny)]
        return y_edges, x_edges, counts, means
