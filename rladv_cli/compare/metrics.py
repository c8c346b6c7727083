"""The comparison's arithmetic, over numpy arrays only (no I/O): each run's advantages of a chunk as one flat
float32 array with NaN where that run's ``response_mask`` is 0, and the chunk's layout (``Block``).

For runs A and B, over the tokens valid in both (``response_mask`` 1 in both runs):

- correlation: Pearson's ``r = S_ab / sqrt(S_aa · S_bb)`` with ``S_xy = Σ (x - x̄)(y - ȳ)``, accumulated in
  float64 chunk by chunk with Chan's pairwise update (``Moments``); None when either run's advantages are constant;
- scale: ``k = Σab / Σaa`` when ``B = k·A`` on every token, i.e. ``1 - (Σab)² / (Σaa Σbb) <= PROPORTIONAL`` (the
  uncentred sums from the same moments); a correlation of 1 says B is an affine function of A, the scale that
  it is A scaled (rloo against Dr. GRPO on groups of one size n: ``n / (n - 1)``);
- weight changed: ``|b| > 2|a|`` or ``|a| > 2|b|`` (either way round: the rule is symmetric). A token whose
  advantage is 0 in one run and not in the other counts (its weight grew from nothing, or went to nothing);
  one that is 0 in both does not; exactly 2x does not;
- mean and largest ``|a - b|``, and per uid group the mean ``|a - b|`` (``GroupTally``);

and over rows (a row's advantage is the mean over its own valid tokens, in float64): a sign flip is a row whose
advantage is ``> 0`` in one run and ``< 0`` in the other, among the rows with valid tokens in both.

Counts are the same whatever the chunks are; float64 sums and moments are merged chunk after chunk, so chunks
change them by rounding only. The scatter's sample is the tokens with the smallest keys of their dataset-wide
position (``position_keys``), so it depends on the data only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

SAMPLE_SIZE = 2000  # points of each pair's scatter
PROPORTIONAL = 1e-10  # 1 - cos²(A, B) at most: float32 rounding of the same ratio stays far below it


@dataclass(frozen=True)
class Block:
    """A chunk's layout: its rows' ``lengths`` (tokens each), its first dataset row and first dataset-wide token
    position, and each row's group ``(rows,)`` (None without ``uid``)."""

    lengths: np.ndarray
    first_row: int
    first_token: int
    group: Optional[np.ndarray] = None

    @property
    def rows(self) -> int:
        return int(self.lengths.size)

    @cached_property
    def keys(self) -> np.ndarray:
        """Each token's sample key (``position_keys`` of its dataset-wide position), shared by every pair."""
        return position_keys(self.first_token, int(self.lengths.sum()))


def row_sums(values: np.ndarray, lengths: np.ndarray, dtype=None) -> np.ndarray:
    """``Σ`` of ``values (N,)`` over consecutive rows of ``lengths (rows,)`` tokens (0 for an empty row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(lengths.size, dtype=dtype or values.dtype)
    has = lengths > 0
    if values.size:
        out[has] = np.add.reduceat(values, np.concatenate([[0], np.cumsum(lengths[has])[:-1]]), dtype=dtype)
    return out


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """``Σ x·y`` in float64 without BLAS (whose threads, where it has several, spin against the pipeline's)."""
    return float(np.einsum("i,i->", x, y))


def row_means(values: np.ndarray, block: Block) -> np.ndarray:
    """Each row's mean over its valid (not NaN) tokens, float64 ``(rows,)``; NaN for a row without any (a run's
    report has them too: its row table's ``advantage_mean``, up to the order of the additions)."""
    valid = ~np.isnan(values)
    sums = row_sums(np.where(valid, values, 0).astype(np.float64), block.lengths)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / row_sums(valid, block.lengths, np.int64)


@dataclass(frozen=True)
class RunChunk:
    """One run's advantages over a chunk, prepared once for every pair the run is in: ``values (N,)`` as given,
    ``valid (N,)``, the valid values ``kept (M,)`` (float32) and their ``magnitudes`` (``mag``, ``twice``),
    their ``mean`` and ``dx = kept - mean`` (float64) with ``s_xx = dx·dx``, each row's valid tokens
    ``row_counts (rows,)`` and its mean ``row_mean (rows,)`` (NaN without valid tokens)."""

    values: np.ndarray
    valid: np.ndarray
    kept: np.ndarray
    mag: np.ndarray
    twice: np.ndarray
    mean: float
    dx: np.ndarray
    s_xx: float
    row_counts: np.ndarray
    row_mean: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, block: Block, row_mean: Optional[np.ndarray] = None) -> "RunChunk":
        """``values (N,)`` float32 with NaN where the run's mask is 0; ``row_mean`` when already known."""
        valid = ~np.isnan(values)
        kept = values[valid]
        mean = float(kept.mean(dtype=np.float64)) if kept.size else 0.0
        dx = np.subtract(kept, mean, dtype=np.float64)
        counts = row_sums(valid, block.lengths, np.int64)
        return cls(values, valid, kept, *magnitudes(kept), mean, dx, _dot(dx, dx), counts,
                   row_means(values, block) if row_mean is None else row_mean)


def sign_flips(mean_a: np.ndarray, mean_b: np.ndarray) -> tuple[int, int]:
    """``(rows compared, rows whose sign flips)``: rows with a mean in both runs (not NaN), and those among
    them strictly positive in one run and strictly negative in the other."""
    both = ~np.isnan(mean_a) & ~np.isnan(mean_b)
    flipped = both & (((mean_a > 0) & (mean_b < 0)) | ((mean_a < 0) & (mean_b > 0)))
    return int(both.sum()), int(flipped.sum())


def magnitudes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(|v|, 2|v|)`` in float32, where doubling is exact (past float32's largest value it gives inf, which
    compares right as well)."""
    mag = np.abs(values.astype(np.float32, copy=False))
    with np.errstate(over="ignore"):
        return mag, mag * np.float32(2)


def weight_changed(mag_a: np.ndarray, twice_a: np.ndarray, mag_b: np.ndarray, twice_b: np.ndarray) -> np.ndarray:
    """Per token, whether its magnitude changes by more than 2x between the runs: ``|b| > 2|a|`` or
    ``|a| > 2|b|``, from each run's ``magnitudes``."""
    return (mag_b > twice_a) | (mag_a > twice_b)


@dataclass(frozen=True)
class Moments:
    """Count, means and centred second moments of paired values ``(a, b)``; ``merge`` combines two disjoint
    sets exactly as if their values had been summed together (Chan et al.)."""

    n: int = 0
    mean_a: float = 0.0
    mean_b: float = 0.0
    s_aa: float = 0.0
    s_bb: float = 0.0
    s_ab: float = 0.0

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> "Moments":
        if a.size == 0:
            return cls()
        a, b = a.astype(np.float64), b.astype(np.float64)
        ma, mb = float(a.mean()), float(b.mean())
        da, db = a - ma, b - mb
        return cls(int(a.size), ma, mb, _dot(da, da), _dot(db, db), _dot(da, db))

    def merge(self, other: "Moments") -> "Moments":
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        da, db = other.mean_a - self.mean_a, other.mean_b - self.mean_b
        w = self.n * other.n / n
        return Moments(n, self.mean_a + da * other.n / n, self.mean_b + db * other.n / n,
                       self.s_aa + other.s_aa + da * da * w, self.s_bb + other.s_bb + db * db * w,
                       self.s_ab + other.s_ab + da * db * w)

    @property
    def scale(self) -> Optional[float]:
        """``k`` with ``b = k·a`` on every pair (module docstring), or None when no such ``k`` holds."""
        ab = self.s_ab + self.n * self.mean_a * self.mean_b
        aa = self.s_aa + self.n * self.mean_a ** 2
        bb = self.s_bb + self.n * self.mean_b ** 2
        if self.n == 0 or aa <= 0 or bb <= 0 or 1.0 - ab * ab / (aa * bb) > PROPORTIONAL:
            return None
        return ab / aa

    @property
    def correlation(self) -> Optional[float]:
        """Pearson's r in [-1, 1]; None with fewer than 2 pairs or when either side is constant."""
        if self.n < 2 or self.s_aa <= 0 or self.s_bb <= 0:
            return None
        return max(-1.0, min(1.0, self.s_ab / math.sqrt(self.s_aa * self.s_bb)))


def position_keys(first: int, count: int) -> np.ndarray:
    """A pseudo-random ``uint64`` key for each dataset-wide token position ``first .. first + count - 1``:
    splitmix64's finaliser, a bijection, so no two positions share a key."""
    z = np.arange(first, first + count, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Sample:
    """The ``size`` pairs ``(a, b)`` with the smallest keys among all those added: a uniform sample that
    depends on the keys only, not on the order or the chunks they came in."""

    def __init__(self, size: int = SAMPLE_SIZE):
        self.size = size
        self.keys = np.zeros(0, dtype=np.uint64)
        self.a = np.zeros(0, dtype=np.float32)
        self.b = np.zeros(0, dtype=np.float32)

    @property
    def threshold(self) -> np.uint64:
        """Keys at or above this cannot enter: the largest held once full (keys are distinct), else none."""
        return self.keys.max() if self.keys.size == self.size else np.uint64(np.iinfo(np.uint64).max)

    def add(self, keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        keys, a, b = np.concatenate([self.keys, keys]), np.concatenate([self.a, a]), np.concatenate([self.b, b])
        if keys.size > self.size:
            keep = np.argpartition(keys, self.size - 1)[:self.size]
            keys, a, b = keys[keep], a[keep], b[keep]
        self.keys, self.a, self.b = keys, a, b

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept pairs, ordered by key."""
        order = np.argsort(self.keys)
        return self.a[order], self.b[order]


@dataclass(frozen=True)
class GroupDiff:
    """One group's mean ``|a - b|`` over its ``tokens`` valid in both runs, its ``rows`` with such tokens, and
    ``row``: the dataset row with the largest mean ``|a - b|`` of its own (the first of equals)."""

    group: int
    mean_abs_diff: float
    tokens: int
    rows: int
    row: int


class GroupTally:
    """Per group id: the sum of ``|a - b|`` and the tokens over which it was taken, the rows that had any, and
    the row whose own mean is largest. Arrays grow as group ids appear."""

    def __init__(self) -> None:
        self.sums = np.zeros(0, dtype=np.float64)
        self.tokens = np.zeros(0, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)
        self.best = np.zeros(0, dtype=np.float64)
        self.best_row = np.zeros(0, dtype=np.int64)

    def _grow(self, groups: int) -> None:
        more = groups - self.sums.size
        if more > 0:
            self.sums, self.tokens, self.rows = (np.concatenate([x, np.zeros(more, x.dtype)])
                                                 for x in (self.sums, self.tokens, self.rows))
            self.best = np.concatenate([self.best, np.full(more, -1.0)])
            self.best_row = np.concatenate([self.best_row, np.full(more, -1, dtype=np.int64)])

    def add(self, group: np.ndarray, row: np.ndarray, sums: np.ndarray, tokens: np.ndarray) -> None:
        """Rows ``row`` (dataset rows, ascending) of groups ``group``, each with its sum of ``|a - b|`` over its
        ``tokens`` valid in both runs."""
        if group.size == 0:
            return
        self._grow(int(group.max()) + 1)
        has = tokens > 0
        g, r, s, t = group[has], row[has], sums[has], tokens[has]
        np.add.at(self.sums, g, s)
        np.add.at(self.tokens, g, t)
        np.add.at(self.rows, g, 1)
        mean = s / t
        order = np.lexsort((r, -mean, g))  # per group: largest mean first, then the earliest row
        first = order[np.r_[True, g[order][1:] != g[order][:-1]]] if order.size else order
        better = mean[first] > self.best[g[first]]  # strictly: an earlier row keeps its place on a tie
        self.best[g[first][better]] = mean[first][better]
        self.best_row[g[first][better]] = r[first][better]

    def top(self, k: int) -> list[GroupDiff]:
        """The ``k`` groups with the largest mean ``|a - b|`` (ties: the group seen first), among those with
        tokens valid in both runs."""
        seen = np.flatnonzero(self.tokens > 0)
        mean = self.sums[seen] / self.tokens[seen]
        order = seen[np.lexsort((seen, -mean))][:k]
        return [GroupDiff(int(g), float(self.sums[g] / self.tokens[g]), int(self.tokens[g]), int(self.rows[g]),
                          int(self.best_row[g])) for g in order]


class PairTally:
    """Everything compared between runs A and B, added chunk by chunk."""

    def __init__(self, sample_size: int = SAMPLE_SIZE):
        self.moments = Moments()
        self.tokens_only_a = self.tokens_only_b = self.changed = 0
        self.abs_diff_sum = self.max_abs_diff = 0.0
        self.rows = self.flips = 0
        self.groups = GroupTally()
        self.sample = Sample(sample_size)

    def add(self, a: RunChunk, b: RunChunk, block: Block) -> None:
        """One chunk of both runs. Where their masks agree (no rejection, or the same) what was prepared per
        run is used as it is; otherwise it is taken at the tokens valid in both."""
        if a.valid is b.valid or np.array_equal(a.valid, b.valid):
            both, x, y, row_counts = a.valid, a.kept, b.kept, a.row_counts
            moments = Moments(int(x.size), a.mean, b.mean, a.s_xx, b.s_xx, _dot(a.dx, b.dx))
            changed = weight_changed(a.mag, a.twice, b.mag, b.twice)
        else:
            both = a.valid & b.valid
            ia, ib = both[a.valid], both[b.valid]
            x, y, row_counts = a.kept[ia], b.kept[ib], row_sums(both, block.lengths, np.int64)
            moments = Moments.of(x, y)
            changed = weight_changed(a.mag[ia], a.twice[ia], b.mag[ib], b.twice[ib])
            self.tokens_only_a += int(a.kept.size - x.size)
            self.tokens_only_b += int(b.kept.size - x.size)
        self.moments = self.moments.merge(moments)
        self.changed += int(np.count_nonzero(changed))
        diff = np.abs(np.subtract(x, y, dtype=np.float64))
        self.abs_diff_sum += float(diff.sum())
        self.max_abs_diff = max(self.max_abs_diff, float(diff.max(initial=0.0)))
        rows, flips = sign_flips(a.row_mean, b.row_mean)
        self.rows, self.flips = self.rows + rows, self.flips + flips
        near = np.flatnonzero(block.keys < self.sample.threshold)  # only these can enter the sample
        near = near[both[near]]
        self.sample.add(block.keys[near], a.values[near], b.values[near])
        if block.group is not None:
            self.groups.add(block.group, block.first_row + np.arange(block.rows), row_sums(diff, row_counts),
                            row_counts)

    @property
    def tokens(self) -> int:
        """Tokens valid in both runs."""
        return self.moments.n

    @property
    def mean_abs_diff(self) -> Optional[float]:
        return self.abs_diff_sum / self.tokens if self.tokens else None

    @property
    def changed_share(self) -> Optional[float]:
        return self.changed / self.tokens if self.tokens else None

    @property
    def flip_share(self) -> Optional[float]:
        return self.flips / self.rows if self.rows else None
