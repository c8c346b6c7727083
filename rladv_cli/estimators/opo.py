"""On-Policy RL with Optimal reward baseline (Hao et al. 2025, arXiv:2505.23585): verl's ``opo``."""
from __future__ import annotations

from torch import Tensor

from ..config.settings import Config
from ..tensors.batch import Batch


def opo(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = R_i − b_g`` with the length-weighted baseline ``b_g = Σ n_j R_j / Σ n_j`` over the group
    (``n_j`` = the row's valid tokens after rejection; 0 for a singleton; NaN when no row of the group has a
    valid token, as in verl); advantages = a·m, returns = advantages (SEMANTICS §7.10). ``(N,)``."""
    g = batch.groups
    single = g.size[batch.group_index] <= 1
    baseline = g.length_weighted_mean[batch.group_index].masked_fill(single, 0.0)
    advantages = batch.per_token(batch.reward_total() - baseline) * batch.response_mask
    return advantages, advantages
