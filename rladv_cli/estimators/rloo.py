"""REINFORCE Leave-One-Out (Ahmadian et al. 2024, arXiv:2402.14740): verl's ``rloo`` and ``rloo_vectorized``."""
from __future__ import annotations

from torch import Tensor

from ..config.settings import Config
from ..tensors.batch import Batch


def rloo(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = (R_i·n)/(n−1) − (μ_g·n)/(n−1)`` = ``R_i`` − mean of the other ``n−1`` rows, evaluated in that
    order in float32 with ``μ_g`` the group mean; a singleton keeps ``a_i = R_i`` (§7.5). ``(N,)``."""
    g = batch.groups
    total = batch.reward_total()
    n = g.size[batch.group_index].to(total.dtype)
    loo = (total * n) / (n - 1) - (g.mean[batch.group_index] * n) / (n - 1)
    a = loo.where(n > 1, total)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def rloo_vectorized(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = (c·R_i − S_g) / max(c − 1, 1) · [c > 1]`` with ``S_g`` the group sum in row order; a singleton
    gets 0 (§7.6). ``(N,)``."""
    g = batch.groups
    total = batch.reward_total()
    c = g.size[batch.group_index].to(total.dtype)
    a = ((c * total - g.seq_sum[batch.group_index]) / (c - 1).clamp_min(1)) * (c > 1)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
