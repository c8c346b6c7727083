"""Statistics gathered while the data flows: per-row tables, value summaries and the stable warnings."""
from __future__ import annotations

import math
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

import numpy as np

from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .checks import CHECKS
from .distributions import Sketch, histogram
from .model import AdvantageSplits, Distributions, ReportWarning, ReturnsVsValues, SignSplit, SplitPart, Stats

FIRST_ROWS = 5


class RowTable:
    """Per-row values of the whole dataset, appended chunk by chunk in dataset row order; kept on the CPU as
    numpy arrays whatever the arrays given (docs/arrays.md). The facts inspect computes too go by their names in
    ``report.facts.ROW_FACTS``."""

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = defaultdict(list)
        self._whole: dict[str, np.ndarray] = {}

    def add(self, **columns: Array) -> None:
        for name, values in columns.items():
            self._parts[name].append(X.to_numpy(values))
            self._whole.pop(name, None)

    def replace(self, name: str, values: Array) -> None:
        """Put ``values`` (every row) in place of the column ``name``."""
        self._parts[name] = [X.to_numpy(values)]
        self._whole.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._parts

    def columns(self) -> dict[str, np.ndarray]:
        """Every column, whole."""
        return {name: self[name] for name in self._parts}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._parts:
            raise KeyError(name)
        if name not in self._whole:
            self._whole[name] = np.concatenate(self._parts[name])
        return self._whole[name]


def token_stats(rows: RowTable, prefix: str) -> Stats:
    """Combine the per-row summaries stored as ``<prefix>_<field>`` into token-level ``Stats``."""
    n, mean, m2 = kernels.combine_moments(rows[f"{prefix}_count"], rows[f"{prefix}_sum"], rows[f"{prefix}_m2"])
    if n == 0:
        return Stats(count=0, mean=None, std=None, min=None, max=None)
    pos = float(rows[f"{prefix}_positive"].sum())
    neg = float(rows[f"{prefix}_negative"].sum())
    return Stats(
        count=int(n), mean=mean, std=math.sqrt(m2 / (n - 1)) if n > 1 else 0.0,
        min=float(rows[f"{prefix}_min"].min()), max=float(rows[f"{prefix}_max"].max()),
        fraction_positive=pos / n, fraction_negative=neg / n, fraction_zero=(n - pos - neg) / n,
    )


def group_min_max(x: Array, group: Array, n_groups: int) -> tuple[Array, Array]:
    """Each group's smallest and largest ``x``, ``(G,)`` each, in ``x``'s dtype (inf and -inf for a group without
    rows), given each row's ``group (B,) int64``."""
    with np.errstate(invalid="ignore"):  # a NaN is its group's min and max, without numpy's warning
        return X.scatter_min(n_groups, group, x, math.inf), X.scatter_max(n_groups, group, x, -math.inf)


def group_flags(reward_total: Array, group_index: Array, size: Array) -> dict[str, Array]:
    """Per-group booleans ``(G,)``: ``singleton_group`` (one row) and ``all_equal_group`` (2+ rows, equal ``R``)."""
    lo, hi = group_min_max(reward_total, group_index, X.numel(size))
    return {"singleton_group": size == 1, "all_equal_group": (size > 1) & (hi == lo)}


def first_rows(group_id: Array, n_groups: int) -> Array:
    """The first row of each of ``n_groups`` groups ``(G,) int64`` given each row's ``group_id (B,)``; ``B`` for a
    group without rows."""
    xp, rows = X.namespace(group_id), X.numel(group_id)
    return X.scatter_min(n_groups, group_id, xp.arange(rows, dtype=xp.int64, device=X.dev(group_id)), rows)


class WarningBuilder:
    """Collects the report's warnings: a code of the catalogue of checks (``report.checks``), its message worded
    from the figures given, its count and the first flagged dataset-wide rows, rendered with file:row."""

    def __init__(self, locate: Callable[[int], tuple[str, int]]):
        self._locate = locate
        self.items: list[ReportWarning] = []

    def add(self, code: str, count: int, rows: Array | list[int], /, **figures) -> None:
        if count <= 0:
            return
        head = rows[:FIRST_ROWS]
        first = [int(r) for r in (head if isinstance(head, list) else X.to_numpy(head).tolist())]
        where = [self._locate(r) for r in first]
        self.items.append(
            ReportWarning(
                code=code, message=CHECKS[code].message(**figures), count=int(count), rows=[w[1] for w in where],
                where=[f"{p}:{r}" for p, r in where],
            )
        )

    def add_rows(self, code: str, flags: Array, /, **figures) -> None:
        """A warning over rows: ``flags (B_total,) bool``; count (its figure ``n``) = flagged rows."""
        rows = X.flatnonzero(flags)
        self.add(code, X.numel(rows), rows, n=X.numel(rows), **figures)


OUTCOME_BASES = {
    "group": ("above group mean", "at group mean", "below group mean", "all-equal group", "singleton group"),
    "reward sign": ("R > 0", "R = 0", "R < 0"),
}
LENGTH_LABELS = 64  # a row's sketch label is outcome * LENGTH_LABELS + floor(log2(valid tokens))


def row_outcomes(total: Array, group_id: Optional[Array] = None,
                 flags: Optional[dict[str, Array]] = None) -> tuple[str, Array]:
    """Each row's part of ``OUTCOME_BASES[basis]`` as ``(basis, (B,) int64)``: with groups (``group_id (B,)``
    and the groups' ``flags``, ``group_flags``), the row's ``total (B,)`` against its group's float64 mean, or
    the group's flag; without, the sign of ``total``."""
    xp, r = X.namespace(total), X.float64(total)
    if group_id is None:
        return "reward sign", xp.where(r > 0, 0, xp.where(r == 0, 1, 2))
    n_groups = X.numel(flags["singleton_group"])
    members = X.float64(X.bincount(group_id, n_groups))
    mean = (X.bincount(group_id, n_groups, weights=r) / xp.clip(members, min=1.0))[group_id]
    part = xp.where(r > mean, 0, xp.where(r == mean, 1, 2))
    part = xp.where(flags["all_equal_group"][group_id], 3, part)
    return "group", xp.where(flags["singleton_group"][group_id], 4, part)


class TokenSketches:
    """The write pass's token-level distributions, fed chunk by chunk: advantages labelled by the row's outcome
    part and valid-length bucket, returns, and (``with_values``) returns paired with values. Counts are exact,
    so nothing depends on the chunking, and sketches of consecutive shards ``merge`` into the sketch of both.
    Each sketch counts on a thread of its own, chunk after chunk, beside the pass (the C loop releases the GIL),
    at most ``BEHIND`` chunks behind it; ``done`` waits for them, and is called before the sketches are read."""

    BEHIND = 4

    def __init__(self, with_values: bool):
        self.advantages, self.returns = Sketch(), Sketch()
        self.pairs = Sketch(paired=True) if with_values else None
        self.returns_are_advantages = True
        self._counting: Optional[list[ThreadPoolExecutor]] = None
        self._counted: deque[list[Future]] = deque()  # per chunk not yet waited for

    def add(self, b: Batch, advantages: Array, returns: Array, valid: Array, outcome: Array,
            count: Array) -> dict[str, Array]:
        """One chunk: ``advantages``, ``returns``, ``valid`` ``(N,)`` over the chunk's tokens, each row's
        outcome part ``outcome (B,)`` (``row_outcomes``) and valid-token ``count (B,)``. ``returns`` may be
        ``advantages`` itself (the same array in every chunk of an estimator whose returns are its advantages):
        then only the advantages count. Returns the per-row columns ``(B,)`` the report's splits use:
        ``length_bucket`` and, with values, the moments ``resid_count, resid_sum, resid_m2`` of ``returns - values``,
        as the kind of array given. The sketches count on the host, in numpy; the arrays are not to change after."""
        length = np.maximum(np.frexp(X.to_numpy(count))[1].astype(np.int64) - 1, 0)
        off, keep, a = X.to_numpy(b.row_offsets), X.to_numpy(valid), X.to_numpy(advantages)
        label = X.to_numpy(outcome) * LENGTH_LABELS + length
        r = None if returns is advantages else X.to_numpy(returns)  # None: one array, nothing more to add
        values = X.to_numpy(b.values) if self.pairs is not None else None
        if self._counting is None:  # one thread per sketch: each counts its chunks in order
            self._counting = [ThreadPoolExecutor(1, thread_name_prefix="rladv-sketch") for _ in range(3)]
        jobs = [self._counting[0].submit(self.advantages.add_rows, a, keep, off, label=label)]
        if r is not None:
            jobs.append(self._counting[1].submit(self._count_returns, r, a, keep, off))
        if self.pairs is not None:
            jobs.append(self._counting[2].submit(self.pairs.add_rows, a if r is None else r, keep, off, y=values))
        self._counted.append(jobs)
        while len(self._counted) > self.BEHIND:  # each chunk waiting holds its arrays
            for job in self._counted.popleft():
                job.result()
        cols = dict(length_bucket=X.like(length, count))
        if self.pairs is not None:
            resid = kernels.row_summary(returns - b.values, valid, b.row_offsets)
            cols.update({f"resid_{k}": resid[k] for k in ("count", "sum", "m2")})
        return cols

    def _count_returns(self, r: np.ndarray, a: np.ndarray, keep: np.ndarray, off: np.ndarray) -> None:
        self.returns.add_rows(r, keep, off)
        # both are 0 off the valid tokens, so whole arrays compare as the valid tokens do
        self.returns_are_advantages &= bool(np.array_equal(r, a))

    def done(self) -> "TokenSketches":
        """Wait for every chunk's counting (raising what it raised); the sketches are complete after."""
        if self._counting is not None:
            try:
                for jobs in self._counted:
                    for job in jobs:
                        job.result()
            finally:
                for pool in self._counting:
                    pool.shutdown(cancel_futures=True)
                self._counting, self._counted = None, deque()
        return self

    def merge(self, other: "TokenSketches") -> None:
        """Add what ``other`` counted (the rows after this one's)."""
        self.done()
        other.done()
        self.advantages.merge(other.advantages)
        self.returns.merge(other.returns)
        if self.pairs is not None:
            self.pairs.merge(other.pairs)
        self.returns_are_advantages &= other.returns_are_advantages


def _sum(x: Array) -> float:
    """Exact sum of a per-row array (independent of order and chunking)."""
    return math.fsum(X.to_numpy(x).astype(np.float64).tolist())


def _parts(rows: RowTable, sketches: TokenSketches, edges: np.ndarray, names, member: np.ndarray,
           label_of) -> list[SplitPart]:
    """One ``SplitPart`` per name: rows where ``member == i``, tokens whose label satisfies ``label_of(labels, i)``."""
    parts = []
    for i, name in enumerate(names):
        sel = member == i
        if not bool(sel.any()):
            continue
        tokens = _sum(rows["adv_count"][sel])
        parts.append(SplitPart(
            label=name, rows=int(sel.sum()), tokens=int(tokens),
            mean=_sum(rows["adv_sum"][sel]) / tokens if tokens else None,
            fraction_positive=_sum(rows["adv_positive"][sel]) / tokens if tokens else None,
            counts=sketches.advantages.label_counts(edges, lambda labels: label_of(labels, i)),
        ))
    return parts


def advantage_splits(rows: RowTable, sketches: TokenSketches, basis: str, edges: np.ndarray) -> AdvantageSplits:
    """The advantages by outcome (``OUTCOME_BASES[basis]``), by valid-length bucket, and by sign (``rows``: the
    pipeline's per-row table, with the write pass's columns)."""
    s = rows
    count, total = rows["adv_count"], rows["adv_sum"]
    has = count > 0
    length = np.where(has, s["length_bucket"], -1)
    lengths = [f"{2 ** k:,}-{2 ** (k + 1) - 1:,} tokens" for k in range(int(length.max()) + 1)]
    return AdvantageSplits(
        outcome=basis,
        by_outcome=_parts(rows, sketches, edges, OUTCOME_BASES[basis], rows["outcome"],
                          lambda labels, i: labels // LENGTH_LABELS == i),
        by_length=_parts(rows, sketches, edges, lengths, length, lambda labels, k: labels % LENGTH_LABELS == k),
        sign=SignSplit(
            tokens_positive=int(_sum(rows["adv_positive"])), tokens_negative=int(_sum(rows["adv_negative"])),
            tokens_zero=int(_sum(count) - _sum(rows["adv_positive"]) - _sum(rows["adv_negative"])),
            rows_positive=int((has & (total > 0)).sum()), rows_negative=int((has & (total < 0)).sum()),
            rows_zero=int((has & (total == 0)).sum()),
            mass_positive=_sum(s["adv_mass_positive"]), mass_negative=_sum(s["adv_mass_negative"]),
        ),
    )


def returns_vs_values(rows: RowTable, sketches: TokenSketches) -> Optional[ReturnsVsValues]:
    """Returns binned against values, and ``1 - Var(returns - values) / Var(returns)`` over valid tokens."""
    if sketches.pairs is None or sketches.pairs.count == 0:
        return None
    value_edges, return_edges, counts, means = sketches.pairs.pairs()
    _, _, m2_resid = kernels.combine_moments(*(rows[f"resid_{k}"] for k in ("count", "sum", "m2")))
    _, _, m2_ret = kernels.combine_moments(rows["ret_count"], rows["ret_sum"], rows["ret_m2"])
    return ReturnsVsValues(value_edges=value_edges.tolist(), return_edges=return_edges.tolist(), counts=counts,
                           mean_return=means, explained_variance=1.0 - m2_resid / m2_ret if m2_ret > 0 else None)


def distributions(rows: RowTable, sketches: TokenSketches, basis: str, group_id: Optional[Array]) -> Distributions:
    """The report's ``distributions`` from the pipeline's per-row table and the write pass's sketches; ``basis``
    names the outcome split of ``rows["outcome"]``."""
    reward, score = rows["reward_total"].astype(np.float64), rows["score_total"].astype(np.float64)
    spread = None
    if group_id is not None:
        group_id = X.to_numpy(group_id)
        n = int(group_id.max()) + 1 if group_id.size else 0
        members = np.bincount(group_id, minlength=n)
        lo, hi = group_min_max(reward, group_id, n)
        spread = histogram((hi - lo)[members > 1])
    adv = sketches.advantages
    edges = adv.edges()
    return Distributions(
        actor_tokens=histogram(rows["actor"], integer=True),
        score_total=None if np.array_equal(score, reward) else histogram(score),
        reward_total=histogram(reward),
        group_spread=spread,
        advantages=adv.histogram(),
        returns=None if sketches.returns_are_advantages else sketches.returns.histogram(),
        advantage_splits=advantage_splits(rows, sketches, basis, edges) if edges is not None else None,
        returns_vs_values=returns_vs_values(rows, sketches),
    )
