"""What an estimator reads beyond the chunk's tokens: per-row values and batch-wide statistics that the earlier
passes established for the chunk's rows. The pipeline sets exactly the fields the estimator's ``needs`` name
(``registry.INPUTS``); every other field is None."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..tensors.groups import GroupStats, PositionSums
from ..tensors.xp import Array


@dataclass(frozen=True)
class Inputs:
    """Per chunk of ``B`` rows.

    reward_total: ``R_i (B,)`` float32, each row's total reward summed as verl sums it (``Batch.row_total``);
    group_index: the dense id of each row's ``(batch, uid)`` group ``(B,)``; groups: the batch-wide group
    statistics of the row totals (``GroupStats``, ``(G,)`` each); session_total, session_active: with
    multi-output sessions folded (docs/semantics.md §8), ``R`` of the row's session's final output and whether that
    output has an actor token ``(B,)``; batch_rows, batch_nonzero_rows: the rows of each row's batch and those
    with ``R ≠ 0`` ``(B,)``; components, component_groups: per-row reward components ``(K, B)`` and their
    group statistics; position_sums: per-(group, position) sums an estimator's ``accumulate`` gathered;
    row_advantage: the row's scalar advantage, computed over the whole dataset by ``Estimator.row_advantage``;
    batch_mean, batch_std: the float32 mean and Bessel std of the row totals of each row's batch ``(B,)``, as
    ``groups``' mean and std of a group holding the batch's rows (0 and 1 for a batch of one row).
    """

    reward_total: Optional[Array] = None
    group_index: Optional[Array] = None
    groups: Optional[GroupStats] = None
    session_total: Optional[Array] = None
    session_active: Optional[Array] = None
    batch_rows: Optional[Array] = None
    batch_nonzero_rows: Optional[Array] = None
    components: Optional[Array] = None
    component_groups: Optional[tuple[GroupStats, ...]] = None
    position_sums: Optional[PositionSums] = None
    row_advantage: Optional[Array] = None
    batch_mean: Optional[Array] = None
    batch_std: Optional[Array] = None
