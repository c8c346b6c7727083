"""On-Policy RL with Optimal reward baseline (Hao et al. 2025, arXiv:2505.23585): verl's ``opo``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def opo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = R_i − b_g`` with the length-weighted baseline ``b_g = Σ n_j R_j / Σ n_j`` over the group
    (``n_j`` = the row's valid tokens after rejection; 0 for a singleton; NaN when no row of the group has a
    valid token, as in verl); advantages = a·m, returns = advantages (docs/semantics.md §7.10). ``(N,)``."""
    g, at = inputs.groups, inputs.group_index
    single = g.size[at] <= 1
    baseline = X.namespace(at).where(single, 0.0, g.length_weighted_mean[at])
    advantages = batch.per_token(inputs.reward_total - baseline) * batch.response_mask
    return advantages, advantages
