"""Batch-wide statistics per group of rows, and per (group, position): what group estimators read.

Rows are in dataset order; groups are dense ids in ``[0, G)``. Every statistic is reduced on the CPU in the
order verl reduces it (a GPU's reductions round otherwise) and moved to the rows' device afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Iterable, Iterator, Optional

import numpy as np

from . import xp as X
from .kernels import torch_row_sums
from .xp import Array


@dataclass(frozen=True)
class GroupStats:
    """Batch-wide statistics of the row totals ``R_i`` per group, indexed by dense group id; ``(G,)`` each.
    Only ``size`` is always there; the others are computed when asked for (``group_stats(wanted=...)``, an
    estimator's ``group_statistics``) and None otherwise.

    size: rows in the group. mean, std: float32 ``torch.mean`` / ``torch.std`` (Bessel) over the members in
    row order, rounded as torch rounds them (``kernels.torch_row_sums``), as verl's dict-based estimators stack
    them; a singleton has ``mean = 0, std = 1``.
    seq_sum: float32 sum accumulated member by member in row order; seq_mean = seq_sum / max(size, 1);
    seq_std = sqrt(Σ (R − seq_mean)² / max(size − 1, 1)) (verl 0.9.1's two-pass ``group_mean_std``).
    length_weighted_mean: ``Σ n_i R_i / Σ n_i`` with ``n_i`` the row's valid tokens (``opo``; 0 for a
    singleton, NaN for a group without valid tokens, as verl's 0/0). top_gap, top_row: ``r1 − r2`` of the two
    largest totals and the dataset row holding ``r1`` (``grpo_passk``; ``torch.topk`` order; 0 and −1 for a
    singleton). longest_row, second_longest: the row whose valid-token count is the group's unique strict
    maximum (−1 if none) and the second-largest count (the optimal-token baselines' zero tail).
    nonempty_size: rows with at least one valid token. sorted_totals: ``(G, S)``, S the largest group: each group's
    totals in ascending order, +inf past its size (``pkpo``).
    """

    size: Array
    mean: Optional[Array] = None
    std: Optional[Array] = None
    seq_sum: Optional[Array] = None
    seq_std: Optional[Array] = None
    length_weighted_mean: Optional[Array] = None
    top_gap: Optional[Array] = None
    top_row: Optional[Array] = None
    longest_row: Optional[Array] = None
    second_longest: Optional[Array] = None
    nonempty_size: Optional[Array] = None
    sorted_totals: Optional[Array] = None

    @property
    def seq_mean(self) -> Array:
        xp = X.namespace(self.seq_sum)
        return self.seq_sum / xp.astype(xp.clip(self.size, min=1), self.seq_sum.dtype)

    def to(self, device: str) -> "GroupStats":
        """The statistics (numpy, as ``group_stats`` makes them) as the arrays of ``device`` hold them."""
        return replace(self, **{f.name: X.on_device(getattr(self, f.name), device) for f in fields(self)
                                if getattr(self, f.name) is not None})

    def on_host(self) -> "GroupStats":
        """The statistics as numpy arrays (``to``'s way back)."""
        return replace(self, **{f.name: X.to_numpy(getattr(self, f.name)) for f in fields(self)
                                if getattr(self, f.name) is not None})


STATISTICS = tuple(f.name for f in fields(GroupStats) if f.name != "size")


def two_pass_std(members: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Per-row ``torch.std`` of ``members [G, s]`` as torch computes it for one 1-D CPU tensor:
    ``sqrt(Σ (x − μ)² / (s − 1))`` in float64 about the mean ``μ (G,)`` in ``members``' dtype, the squares added
    in order, rounded once to that dtype (NaN for ``s = 1``).

    ``members.std(dim=1)`` is not that for ``G ≥ 2``: torch takes another reduction path (Welford's,
    ``estimators.matrix.row_stds``), which rounds otherwise and on a group whose totals are a few ulps apart moves
    an advantage by ~1e-3 (0.18410 against verl's 0.18368).
    """
    deviation = members.astype(np.float64) - mean.astype(np.float64)[:, None]
    m2 = np.zeros(members.shape[0], dtype=np.float64)
    for j in range(members.shape[1]):
        m2 += deviation[:, j] * deviation[:, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(m2 / float(members.shape[1] - 1)).astype(members.dtype)


def group_stats(row_total: Array, group_index: Array, num_groups: int, valid_count: Array,
                wanted: Iterable[str] = STATISTICS) -> GroupStats:
    """Group statistics ``wanted`` (``STATISTICS``; ``size`` always) of ``row_total (B,) float32`` with dense
    ``group_index (B,) int64`` in ``[0, G)`` and each row's valid-token count ``valid_count (B,)``; rows are
    in dataset order.

    Groups are bucketed by size and each bucket reduced as a ``[G_s, s]`` matrix of its members in row order,
    so every statistic rounds as verl's per-group 1-D tensors do (the std by ``two_pass_std``). Sequential sums use
    ``index_add`` in row order, as verl's scatter does. Computed with numpy on the CPU whatever the inputs'
    device (``B`` values; a GPU's reductions round otherwise) and returned as the kind of array given.
    """
    wanted = set(wanted)
    unknown = wanted - set(STATISTICS)
    if unknown:
        raise ValueError(f"unknown group statistics {sorted(unknown)}")
    given = row_total
    row_total, group_index = X.to_numpy(row_total), X.to_numpy(group_index).astype(np.int64, copy=False)
    dtype = row_total.dtype
    size = np.bincount(group_index, minlength=num_groups).astype(np.int64)
    lengths = X.to_numpy(valid_count).astype(np.int64)
    out = dict(size=size, **_bucketed(row_total, group_index, num_groups, size, lengths, wanted))
    if wanted & {"seq_sum", "seq_std"}:
        seq_sum = X.index_add(num_groups, group_index, row_total)
        if "seq_sum" in wanted:
            out["seq_sum"] = seq_sum
        if "seq_std" in wanted:
            seq_mean = seq_sum / np.maximum(size, 1).astype(dtype)
            dev = row_total - seq_mean[group_index]
            sq = X.index_add(num_groups, group_index, dev * dev)
            out["seq_std"] = np.sqrt(np.maximum(sq / np.maximum(size - 1, 1).astype(dtype), 0.0)).astype(dtype)
    if "nonempty_size" in wanted:
        out["nonempty_size"] = np.bincount(group_index, weights=lengths > 0, minlength=num_groups).astype(np.int64)
    if "sorted_totals" in wanted:
        out["sorted_totals"] = _sorted_totals(row_total, group_index, size)
    return GroupStats(**{name: X.like(value, given) for name, value in out.items()})


_BUCKETED = {"mean", "std", "length_weighted_mean", "top_gap", "top_row", "longest_row", "second_longest"}


def _bucketed(row_total: np.ndarray, group_index: np.ndarray, num_groups: int, size: np.ndarray,
              lengths: np.ndarray, wanted: set[str]) -> dict[str, np.ndarray]:
    """The statistics of ``wanted`` that reduce each group's members as one row of a ``[G_s, s]`` matrix."""
    wanted = wanted & _BUCKETED
    if not wanted:
        return {}
    dtype = row_total.dtype
    out = {
        "mean": np.zeros(num_groups, dtype=dtype), "std": np.ones(num_groups, dtype=dtype),
        "length_weighted_mean": np.zeros(num_groups, dtype=dtype), "top_gap": np.zeros(num_groups, dtype=dtype),
        "top_row": np.full(num_groups, -1, dtype=np.int64),
        "longest_row": np.full(num_groups, -1, dtype=np.int64),
        "second_longest": np.zeros(num_groups, dtype=np.int64),
    }
    out = {name: out[name] for name in wanted}
    for ids, rows in group_rows(group_index, size):
        if rows.shape[1] < 2:
            continue
        members, n = row_total[rows], lengths[rows]
        if wanted & {"mean", "std"}:
            group_mean = torch_row_sums(members) / np.float32(rows.shape[1])
            if "mean" in wanted:
                out["mean"][ids] = group_mean
            if "std" in wanted:
                out["std"][ids] = two_pass_std(members, group_mean)
        if "length_weighted_mean" in wanted:
            with np.errstate(divide="ignore", invalid="ignore"):
                out["length_weighted_mean"][ids] = (torch_row_sums((n * members).astype(dtype))
                                                    / n.sum(axis=1).astype(dtype))
        if wanted & {"top_gap", "top_row"}:
            best, at = _top2(members)
            if "top_gap" in wanted:
                out["top_gap"][ids] = best[:, 0] - best[:, 1]
            if "top_row" in wanted:
                out["top_row"][ids] = np.take_along_axis(rows, at[:, :1], axis=1)[:, 0]
        if wanted & {"longest_row", "second_longest"}:
            longest, at = _top2(n)
            if "longest_row" in wanted:
                unique = (n == longest[:, :1]).sum(axis=1) == 1
                out["longest_row"][ids] = np.where(unique, np.take_along_axis(rows, at[:, :1], axis=1)[:, 0], -1)
            if "second_longest" in wanted:
                out["second_longest"][ids] = longest[:, 1]
    return out


def _top2(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two largest values of each row of ``m (G, s)`` (s ≥ 2) and their columns, largest first; among equal
    values the first column wins (``torch.topk`` on the CPU)."""
    order = np.argsort(-m, axis=1, kind="stable")[:, :2]
    return np.take_along_axis(m, order, axis=1), order


def group_rows(group_index: Array, size: Array) -> Iterator[tuple[Array, Array]]:
    """The groups bucketed by size: for each size ``s`` present (ascending), the group ids ``(G_s,)`` and their
    members' dataset rows as a ``[G_s, s]`` matrix, each group's rows in row order (``size``: rows per group
    ``(G,)``, ``bincount(group_index)``)."""
    xp = X.namespace(group_index)
    order = xp.argsort(group_index, stable=True)
    start = xp.cumulative_sum(size) - size
    for s in X.unique(size).tolist():
        if s == 0:
            continue
        ids = X.flatnonzero(size == s)
        yield ids, order[start[ids, None] + xp.arange(s, device=X.dev(group_index))]


def block_rows(group_index: Array, batch_index: Array, size: int) -> Iterator[Array]:
    """For each batch id (ascending), the dataset rows of its groups, every one of ``size`` rows, as a
    ``[G_b, size]`` matrix (groups by id, each group's rows in row order): the matrix a trainer's
    ``rewards.view(-1, size)`` makes of its batch, up to the order of its rows."""
    xp = X.namespace(group_index)
    rows = xp.reshape(xp.argsort(group_index, stable=True), (-1, size))
    batch_of_group = batch_index[rows[:, 0]]
    for b in X.unique(batch_index).tolist():
        yield rows[batch_of_group == b]


def _sorted_totals(row_total: np.ndarray, group_index: np.ndarray, size: np.ndarray) -> np.ndarray:
    """``(G, max size)``: each group's totals ascending (a stable sort by total, then by group), +inf past the
    group's size."""
    by_total = np.argsort(row_total, kind="stable")
    order = by_total[np.argsort(group_index[by_total], kind="stable")]
    group = group_index[order]
    start = np.cumsum(size) - size
    out = np.full((size.size, max(int(size.max()) if size.size else 0, 1)), np.inf, dtype=row_total.dtype)
    out[group, np.arange(order.size) - start[group]] = row_total[order]
    return out


@dataclass(frozen=True)
class PositionSums:
    """Per-(group, position) sums over the rows of each group, for estimators whose baseline varies along the
    response: ``sums[name]`` is ``(G·width,)`` float32, entry ``g·width + t`` for group ``g``, position ``t``."""

    width: int
    sums: dict[str, Array]

    def index(self, group: Array, position: Array) -> Array:
        return group * self.width + position
