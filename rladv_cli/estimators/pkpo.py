"""Pass@k Policy Optimization (Walder & Karkhanis 2025, "Pass@K Policy Optimization: Solving Harder Reinforcement
Learning Problems", arXiv:2505.15201): ``pkpo``, the paper's transform of a group's rewards with the ``k−1``
leave-one-out baseline (its ``s^(loo−1)``).

The paper comes with no trainer to call; this module computes the transform in closed form on the sorted
group, and tests/reference.py by enumerating the subsets.
"""
from __future__ import annotations

from functools import cache
from math import comb
from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def pkpo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """Per-sample credit for ``max@k``, the expected best of ``k`` draws; ``(N,)`` advantages = returns.

    Over the ``C(n, k)`` subsets ``I`` of size ``k`` of a group of ``n ≥ k`` rows (``--k``), row ``i`` gets

        a_i = (1 / C(n, k)) · Σ_{I ∋ i} (max_{j ∈ I} R_j − max_{j ∈ I∖i} R_j)

    the gain in the subset's best total that row ``i`` brings, averaged (an unbiased gradient weight for
    ``max@k`` with the ``k−1`` leave-one-out baseline; the max of an empty set counts 0, so ``k = 1`` gives
    ``R_i / n``). With the group's totals sorted ascending ``g_1 ≤ … ≤ g_n`` and ``p`` the position of ``R_i``
    (its first one among ties, which all get the same value):

        a_i = (C(p−1, k−1) · R_i − Σ_{j<p} C(j−1, k−2) · g_j) / C(n, k)

    The coefficients are exact ratios of integers rounded to float64, the sum is float64 over the float32
    totals, rounded to float32 once. A row whose total is the group's minimum gets 0 unless ``k = 1``.
    docs/semantics.md §7.17.
    """
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    xp = X.namespace(total)
    ordered = g.sorted_totals[at]  # (B, S): the row's group, ascending, +inf past its size
    below = xp.sum(ordered < total[:, None], axis=1)  # p − 1: the row's first position among its sorted group
    top, lower = _coefficient_rows(g.size[at], params.k, ordered.shape[1], total)
    j = xp.arange(ordered.shape[1], device=X.dev(total))
    taken = j[None, :] < below[:, None]
    with np.errstate(invalid="ignore"):  # 0 · inf past the group's size, not taken
        baseline = xp.sum(xp.where(taken, lower * X.float64(ordered), 0.0), axis=1)
    a = X.float32(xp.take_along_axis(top, below[:, None], axis=1)[:, 0] * X.float64(total) - baseline)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def _coefficient_rows(size: Array, k: int, width: int, like: Array) -> tuple[Array, Array]:
    """Per row of group size ``n``: ``C(p, k−1) / C(n, k)`` and ``C(j, k−2) / C(n, k)`` for 0-based ``p, j <
    width`` (0 past ``n``), float64 ``(B, width)`` each, built on the host and given as the kind of ``like``."""
    sizes, inverse = np.unique(X.to_numpy(size), return_inverse=True)
    tables = [_coefficients(int(n), k) for n in sizes.tolist()]
    top = np.zeros((len(tables), width), dtype=np.float64)
    lower = np.zeros((len(tables), width), dtype=np.float64)
    for u, (t, low) in enumerate(tables):
        top[u, :len(t)] = t
        lower[u, :len(low)] = low
    return X.like(top[inverse], like), X.like(lower[inverse], like)


@cache
def _coefficients(n: int, k: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(C(p, k−1) / C(n, k) for p < n, C(j, k−2) / C(n, k) for j < n)``: exact integer ratios, correctly
    rounded to float64 (Python's int division), 0 where the binomial is (``k − 2 < 0``)."""
    subsets = comb(n, k)
    return (tuple(comb(p, k - 1) / subsets for p in range(n)),
            tuple(comb(j, k - 2) / subsets if k >= 2 else 0.0 for j in range(n)))
