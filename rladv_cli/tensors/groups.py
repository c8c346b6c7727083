"""Batch-wide statistics per group of rows, and per (group, position): what group estimators read.

Rows are in dataset order; groups are dense ids in ``[0, G)``. Every statistic is reduced on the CPU in the
order verl reduces it (a GPU's reductions round otherwise) and moved to the rows' device afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Iterable, Iterator, Optional

import torch
from torch import Tensor


@dataclass(frozen=True)
class GroupStats:
    """Batch-wide statistics of the row totals ``R_i`` per group, indexed by dense group id; ``(G,)`` each.
    Only ``size`` is always there; the others are computed when asked for (``group_stats(wanted=...)``, an
    estimator's ``group_statistics``) and None otherwise.

    size: rows in the group. mean, std: float32 ``torch.mean`` / ``torch.std`` (Bessel) over the members in
    row order, as verl's dict-based estimators stack them; a singleton has ``mean = 0, std = 1``.
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

    size: Tensor
    mean: Optional[Tensor] = None
    std: Optional[Tensor] = None
    seq_sum: Optional[Tensor] = None
    seq_std: Optional[Tensor] = None
    length_weighted_mean: Optional[Tensor] = None
    top_gap: Optional[Tensor] = None
    top_row: Optional[Tensor] = None
    longest_row: Optional[Tensor] = None
    second_longest: Optional[Tensor] = None
    nonempty_size: Optional[Tensor] = None
    sorted_totals: Optional[Tensor] = None

    @property
    def seq_mean(self) -> Tensor:
        return self.seq_sum / self.size.clamp_min(1).to(self.seq_sum.dtype)

    def to(self, device: torch.device) -> "GroupStats":
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if getattr(self, f.name) is not None})


STATISTICS = tuple(f.name for f in fields(GroupStats) if f.name != "size")


def _two_pass_std(members: Tensor, mean: Tensor) -> Tensor:
    """Per-row ``torch.std`` of ``members [G, s]`` (s ≥ 2) as torch computes it for one 1-D CPU tensor:
    ``sqrt(Σ (x − μ)² / (s − 1))`` in float64 about the float32 mean ``μ (G,)``, rounded once to float32.

    ``members.std(dim=1)`` is not that for ``G ≥ 2``: torch takes another reduction path, which rounds otherwise
    and on a group whose totals are a few ulps apart moves an advantage by ~1e-3 (0.18410 against verl's 0.18368).
    """
    deviation = members.double() - mean.double()[:, None]
    return ((deviation * deviation).sum(dim=1) / (members.shape[1] - 1)).sqrt().to(members.dtype)


def group_stats(row_total: Tensor, group_index: Tensor, num_groups: int, valid_count: Tensor,
                wanted: Iterable[str] = STATISTICS) -> GroupStats:
    """Group statistics ``wanted`` (``STATISTICS``; ``size`` always) of ``row_total (B,) float32`` with dense
    ``group_index (B,) int64`` in ``[0, G)`` and each row's valid-token count ``valid_count (B,)``; rows are
    in dataset order.

    Groups are bucketed by size and each bucket reduced as a ``[G_s, s]`` matrix of its members in row order,
    so every statistic rounds as verl's per-group 1-D tensors do (the std by ``_two_pass_std``). Sequential sums use
    ``index_add_`` in row order, as verl's scatter does. Computed on the CPU whatever the inputs' device
    (``B`` values; a GPU's reductions round otherwise) and returned on that device.
    """
    wanted = set(wanted)
    unknown = wanted - set(STATISTICS)
    if unknown:
        raise ValueError(f"unknown group statistics {sorted(unknown)}")
    device = row_total.device
    if device.type != "cpu":
        return group_stats(row_total.cpu(), group_index.cpu(), num_groups, valid_count.cpu(), wanted).to(device)
    dtype = row_total.dtype
    size = torch.bincount(group_index, minlength=num_groups)
    lengths = valid_count.to(torch.long)
    out = dict(size=size, **_bucketed(row_total, group_index, num_groups, size, lengths, wanted))
    if wanted & {"seq_sum", "seq_std"}:
        seq_sum = torch.zeros(num_groups, dtype=dtype).index_add_(0, group_index, row_total)
        if "seq_sum" in wanted:
            out["seq_sum"] = seq_sum
        if "seq_std" in wanted:
            seq_mean = seq_sum / size.clamp_min(1).to(dtype)
            dev = row_total - seq_mean[group_index]
            sq = torch.zeros(num_groups, dtype=dtype).index_add_(0, group_index, dev * dev)
            out["seq_std"] = torch.sqrt((sq / (size - 1).clamp_min(1).to(dtype)).clamp_min(0.0))
    if "nonempty_size" in wanted:
        out["nonempty_size"] = torch.bincount(group_index, weights=(lengths > 0).double(), minlength=num_groups).long()
    if "sorted_totals" in wanted:
        out["sorted_totals"] = _sorted_totals(row_total, group_index, size)
    return GroupStats(**out)


_BUCKETED = {"mean", "std", "length_weighted_mean", "top_gap", "top_row", "longest_row", "second_longest"}


def _bucketed(row_total: Tensor, group_index: Tensor, num_groups: int, size: Tensor, lengths: Tensor,
              wanted: set[str]) -> dict[str, Tensor]:
    """The statistics of ``wanted`` that reduce each group's members as one row of a ``[G_s, s]`` matrix."""
    wanted = wanted & _BUCKETED
    if not wanted:
        return {}
    dtype = row_total.dtype
    out = {
        "mean": torch.zeros(num_groups, dtype=dtype), "std": torch.ones(num_groups, dtype=dtype),
        "length_weighted_mean": torch.zeros(num_groups, dtype=dtype), "top_gap": torch.zeros(num_groups, dtype=dtype),
        "top_row": torch.full((num_groups,), -1, dtype=torch.long),
        "longest_row": torch.full((num_groups,), -1, dtype=torch.long),
        "second_longest": torch.zeros(num_groups, dtype=torch.long),
    }
    out = {name: out[name] for name in wanted}
    for ids, rows in group_rows(group_index, size):
        if rows.shape[1] < 2:
            continue
        members, n = row_total[rows], lengths[rows]
        if wanted & {"mean", "std"}:
            group_mean = members.mean(dim=1)
            if "mean" in wanted:
                out["mean"][ids] = group_mean
            if "std" in wanted:
                out["std"][ids] = _two_pass_std(members, group_mean)
        if "length_weighted_mean" in wanted:
            out["length_weighted_mean"][ids] = (n * members).sum(dim=1) / n.sum(dim=1)
        if wanted & {"top_gap", "top_row"}:
            best, at = torch.topk(members, 2, dim=1)
            if "top_gap" in wanted:
                out["top_gap"][ids] = best[:, 0] - best[:, 1]
            if "top_row" in wanted:
                out["top_row"][ids] = rows.gather(1, at[:, :1]).flatten()
        if wanted & {"longest_row", "second_longest"}:
            longest, at = torch.topk(n, 2, dim=1)
            if "longest_row" in wanted:
                unique = (n == longest[:, :1]).sum(dim=1) == 1
                out["longest_row"][ids] = torch.where(unique, rows.gather(1, at[:, :1]).flatten(), -1)
            if "second_longest" in wanted:
                out["second_longest"][ids] = longest[:, 1]
    return out


def group_rows(group_index: Tensor, size: Tensor) -> Iterator[tuple[Tensor, Tensor]]:
    """The groups bucketed by size: for each size ``s`` present (ascending), the group ids ``(G_s,)`` and their
    members' dataset rows as a ``[G_s, s]`` matrix, each group's rows in row order (``size``: rows per group
    ``(G,)``, ``torch.bincount(group_index)``)."""
    order = torch.sort(group_index, stable=True).indices
    start = torch.cumsum(size, 0) - size
    for s in torch.unique(size).tolist():
        if s == 0:
            continue
        ids = torch.nonzero(size == s).flatten()
        yield ids, order[start[ids, None] + torch.arange(s)]


def block_rows(group_index: Tensor, batch_index: Tensor, size: int) -> Iterator[Tensor]:
    """For each batch id (ascending), the dataset rows of its groups, every one of ``size`` rows, as a
    ``[G_b, size]`` matrix (groups by id, each group's rows in row order): the matrix a trainer's
    ``rewards.view(-1, size)`` makes of its batch, up to the order of its rows."""
    rows = torch.sort(group_index, stable=True).indices.view(-1, size)
    batch_of_group = batch_index[rows[:, 0]]
    for b in torch.unique(batch_index).tolist():
        yield rows[batch_of_group == b]


def _sorted_totals(row_total: Tensor, group_index: Tensor, size: Tensor) -> Tensor:
    """``(G, max size)``: each group's totals ascending (a stable sort by total, then by group), +inf past the
    group's size."""
    by_total = torch.sort(row_total, stable=True).indices
    order = by_total[torch.sort(group_index[by_total], stable=True).indices]
    group = group_index[order]
    start = torch.cumsum(size, 0) - size
    out = torch.full((size.numel(), max(int(size.max()) if size.numel() else 0, 1)), float("inf"), dtype=row_total.dtype)
    out[group, torch.arange(order.numel()) - start[group]] = row_total[order]
    return out


@dataclass(frozen=True)
class PositionSums:
    """Per-(group, position) sums over the rows of each group, for estimators whose baseline varies along the
    response: ``sums[name]`` is ``(G·width,)`` float32, entry ``g·width + t`` for group ``g``, position ``t``."""

    width: int
    sums: dict[str, Tensor]

    def index(self, group: Tensor, position: Tensor) -> Tensor:
        return group * self.width + position
