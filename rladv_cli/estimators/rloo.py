"""REINFORCE Leave-One-Out (Ahmadian et al. 2024, arXiv:2402.14740): verl's ``rloo`` and ``rloo_vectorized``."""
from __future__ import annotations

from torch import Tensor

from ..tensors.batch import Batch
from .inputs import Inputs
from .registry import Params


def rloo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Tensor, Tensor]:
    """``a_i = (R_i·n)/(n−1) − (μ_g·n)/(n−1)`` = ``R_i`` − mean of the other ``n−1`` rows, evaluated in that
    order in float32 with ``μ_g`` the group mean; a singleton keeps ``a_i = R_i`` (docs/semantics.md §7.5).
    ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    n = g.size[at].to(total.dtype)
    loo = (total * n) / (n - 1) - (g.mean[at] * n) / (n - 1)
    a = loo.where(n > 1, total)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def rloo_vectorized(batch: Batch, inputs: Inputs, params: Params) -> tuple[Tensor, Tensor]:
    """``a_i = (c·R_i − S_g) / max(c − 1, 1) · [c > 1]`` with ``S_g`` the group sum in row order; a singleton
    gets 0 (docs/semantics.md §7.6). ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    c = g.size[at].to(total.dtype)
    a = ((c * total - g.seq_sum[at]) / (c - 1).clamp_min(1)) * (c > 1)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
