"""REINFORCE Leave-One-Out (Ahmadian et al. 2024, arXiv:2402.14740): verl's ``rloo`` and ``rloo_vectorized``."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def rloo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i·n)/(n−1) − (μ_g·n)/(n−1)`` = ``R_i`` − mean of the other ``n−1`` rows, evaluated in that
    order in float32 with ``μ_g`` the group mean; a singleton keeps ``a_i = R_i`` (docs/semantics.md §7.5).
    ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    xp = X.namespace(total)
    n = xp.astype(g.size[at], total.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):  # a singleton's n − 1 = 0; its R is kept
        loo = (total * n) / (n - 1) - (g.mean[at] * n) / (n - 1)
    a = xp.where(n > 1, loo, total)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def rloo_vectorized(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (c·R_i − S_g) / max(c − 1, 1) · [c > 1]`` with ``S_g`` the group sum in row order; a singleton
    gets 0 (docs/semantics.md §7.6). ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    xp = X.namespace(total)
    c = xp.astype(g.size[at], total.dtype)
    a = ((c * total - g.seq_sum[at]) / xp.clip(c - 1, min=1)) * (c > 1)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def arithmetic(r: float, totals: np.ndarray, params: Params) -> str:
    """The row's ``R − (S − R)/(n − 1)``; a singleton keeps ``R``."""
    n, s = totals.size, float(totals.sum())
    if n < 2:
        return f"a singleton keeps R = {r:.7g}"
    return f"R - (sum - R) / (n - 1) = {r:.7g} - ({s:.7g} - {r:.7g}) / {n - 1} = {r - (s - r) / (n - 1):.7g}"


def arithmetic_vectorized(r: float, totals: np.ndarray, params: Params) -> str:
    """The row's ``(c·R − S)/(c − 1)``; a singleton gets 0."""
    c, s = totals.size, float(totals.sum())
    if c < 2:
        return "a singleton gets 0"
    return f"(n R - sum) / (n - 1) = ({c} x {r:.7g} - {s:.7g}) / {c - 1} = {(c * r - s) / (c - 1):.7g}"
